"""Offered load for benchmarks: events made before the clock starts, sent paced from processes.

A benchmark that measures the job must not measure its producer. So every process of an
`OfferedLoad` first builds all the events it will send (the project's generator, `generate`,
with its services, users, latencies and statuses), encodes each to bytes up to its two clock
fields, picks its partition (Kafka's default murmur2 rule on the key, as `tidegauge produce`
gets it, computed once per key) and connects; only then does the coordinator pick the start
instant T0. From T0 each process sends `rate / processes` events per second in ticks of 100 ms
(a tick sends whatever is due by its end, so a late tick catches up), with the client's
batching (linger 5 ms, batches up to 256 KiB, acks=1). The client is kafka-python's
`KafkaProducer` or, with `client="confluent"`, confluent-kafka (librdkafka): the same records,
about a sixth of the CPU per record, which matters when the producers share the job's cores.

What is left for the send loop is one bytes format per record: `event_time` (the tick's wall
clock minus the generator's own send delay of that event, so its out-of-order events stay out of
order by the same amount) and `sent_time` (the tick's wall clock) are appended as the last
fields, so events are near "now" however long the preparation took, and the job's watermark sees
live traffic. The Kafka timestamp is left to the client (no timestamp given: it stamps the record
with its wall clock when it is handed over, `send`/`produce`). Times are epoch ms, never ISO
strings (the generator writes 10% as ISO by default; here parsing costs the same for every
record).

Sending stops at the end of the measured interval even if a process fell behind (what it did
not send is reported as `behind`), so a run never overruns its schedule. Each process reports,
at three marks (end of warm-up, end of the measured interval, after the
final flush): records sent and acknowledged, failures, the next offset per partition (from the
acks: Tansu's ListOffsets answers short, see NOTES), its own CPU seconds (getrusage, all its
threads) and the wall time of the mark. It also keeps (partition, offset, timestamp) of every
acknowledged record, written to an .npy file at the end, so a benchmark can recompute per-record
freshness independently of the job.

Runs on Linux (spawned processes; a parent-death signal stops them if the coordinator is
killed).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import resource
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Mark", "OfferedLoad", "ProducerResult", "TICK_S", "combine_marks", "processes_for"]

#: Pacing interval: every tick sends the records due by its end.
TICK_S = 0.1

_PRODUCER_CONFIG: dict[str, Any] = {
    "acks": 1,
    "linger_ms": 5,
    "batch_size": 256 * 1024,
    "max_in_flight_requests_per_connection": 5,
    "client_id": "tidegauge-bench-load",
}


def processes_for(rate: float, per_process: float) -> int:
    """How many producer processes offer `rate` events/s at most `per_process` each."""
    return max(1, math.ceil(rate / per_process))


@dataclass(frozen=True)
class Mark:
    """A producer process's counters at one instant (wall clock `at_s`, epoch seconds)."""

    at_s: float
    sent: int
    acked: int
    failed: int
    #: Records that were due by now but not yet handed to the producer (it fell behind).
    behind: int
    #: Per partition: 1 + the highest acknowledged offset (0: none yet).
    next_offsets: tuple[int, ...]
    cpu_s: float


@dataclass(frozen=True)
class ProducerResult:
    """What one producer process did; `acks_path` holds (partition, offset, timestamp) rows."""

    index: int
    events: int
    prepare_s: float
    marks: dict[str, Mark]
    acks_path: str
    first_error: str | None = None


@dataclass(frozen=True)
class _Spec:
    index: int
    bootstrap: str
    topic: str
    partitions: int
    rate: float
    count: int
    seed: int
    acks_path: str
    client: str
    #: Equal services named s00000.. (0: the generator's default mix).
    services: int = 0
    #: Routes of `tidegauge produce --attributes` (0: the events carry no attributes).
    routes: int = 0
    regions: int = 3


class _Acks:
    """Ack bookkeeping; its callbacks run on kafka-python's I/O thread."""

    def __init__(self, partitions: int) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: str | None = None
        self.next_offsets = [0] * partitions
        self.parts = array("q")
        self.offsets = array("q")
        self.times = array("q")

    def ok(self, md: Any) -> None:
        self.acked += 1
        self.parts.append(md.partition)
        self.offsets.append(md.offset)
        self.times.append(md.timestamp)
        if md.offset >= self.next_offsets[md.partition]:
            self.next_offsets[md.partition] = md.offset + 1

    def delivered(self, error: Any, msg: Any) -> None:
        """confluent-kafka's delivery report."""
        if error is not None:
            self.err(error)
            return
        self.acked += 1
        p, o = msg.partition(), msg.offset()
        self.parts.append(p)
        self.offsets.append(o)
        self.times.append(msg.timestamp()[1])
        if o >= self.next_offsets[p]:
            self.next_offsets[p] = o + 1

    def err(self, e: Any) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = repr(e)


def _prepare(spec: _Spec) -> tuple[list[bytes], list[int], list[bytes], list[int]]:
    """Bodies (JSON up to `"event_time":`), send delays (ms), keys and partitions."""
    import json

    from kafka.partitioner.default import murmur2

    from tidegauge.traffic.attributes import Attributes
    from tidegauge.traffic.config import GeneratorConfig
    from tidegauge.traffic.generator import generate

    cfg = GeneratorConfig(
        seed=spec.seed,
        rate=spec.rate,
        count=spec.count,
        pace="fast",
        start_time_ms=1_780_000_000_000,
        partitions=spec.partitions,
        heartbeat_interval_ms=0,
        **(
            {"services": tuple((f"s{k:05d}", 1.0) for k in range(spec.services))}
            if spec.services
            else {}
        ),
    )
    bodies: list[bytes] = []
    delays: list[int] = []
    keys: list[bytes] = []
    parts: list[int] = []
    key_part: dict[bytes, tuple[bytes, int]] = {}
    svc_json: dict[str, str] = {}
    attributes = Attributes(spec.routes, spec.regions) if spec.routes else None
    for r in generate(cfg):
        if r.kind != "event" or r.event_time is None or r.service is None:
            continue
        svc = svc_json.get(r.service) or svc_json.setdefault(r.service, json.dumps(r.service))
        user = "" if r.user_id is None else f',"user_id":"{r.user_id}"'
        extra = ""
        if attributes is not None:  # as `tidegauge produce --attributes` writes them
            extra = attributes.of(r.event_id, r.service).json_members() + ","  # type: ignore[arg-type]
        bodies.append(
            f'{{"event_id":"{r.event_id}","service":{svc}{user},"latency_ms":{r.latency_ms!r},'
            f'"status":{r.status},{extra}"event_time":'.encode()
        )
        delays.append(max(0, r.send_ms - r.event_time))
        kp = key_part.get(r.key)
        if kp is None:  # one bytes object and one hash per distinct key
            kp = key_part[r.key] = (r.key, (murmur2(r.key) & 0x7FFFFFFF) % spec.partitions)
        keys.append(kp[0])
        parts.append(kp[1])
    return bodies, delays, keys, parts


class _Client:
    """One producer client behind the same three verbs, so the send loop is the same for both.

    `send(i0, i1, now_ms)` hands records i0..i1-1 over (values completed with `now_ms`),
    `serve()` lets acknowledgements be counted (confluent-kafka runs its callbacks only there),
    `finish()` flushes and closes.
    """

    def __init__(
        self,
        spec: _Spec,
        acks: _Acks,
        bodies: list[bytes],
        delays: list[int],
        keys: list[bytes],
        parts: list[int],
    ) -> None:
        self.spec, self.acks = spec, acks
        self.bodies, self.delays, self.keys, self.parts = bodies, delays, keys, parts
        if spec.client == "confluent":
            from confluent_kafka import Producer

            self.producer: Any = Producer(
                {
                    "bootstrap.servers": spec.bootstrap,
                    "acks": 1,
                    "linger.ms": 5,
                    "batch.size": 256 * 1024,
                    "queue.buffering.max.messages": 2_000_000,
                    "enable.idempotence": False,
                    "client.id": "tidegauge-bench-load",
                }
            )
            self.producer.list_topics(spec.topic, timeout=10)  # metadata before the clock
        else:
            from kafka import KafkaProducer

            self.producer = KafkaProducer(
                bootstrap_servers=spec.bootstrap.split(","), **_PRODUCER_CONFIG
            )
            self.producer.partitions_for(spec.topic)  # metadata before the clock starts

    def send(self, i0: int, i1: int, now_ms: int) -> None:
        bodies, delays, keys, parts, topic = (
            self.bodies,
            self.delays,
            self.keys,
            self.parts,
            self.spec.topic,
        )
        if self.spec.client == "confluent":
            produce, cb = self.producer.produce, self.acks.delivered
            for i in range(i0, i1):
                produce(
                    topic,
                    bodies[i] + b'%d,"sent_time":%d}' % (now_ms - delays[i], now_ms),
                    keys[i],
                    parts[i],
                    on_delivery=cb,
                )
            self.producer.poll(0)
        else:
            send, ok, err = self.producer.send, self.acks.ok, self.acks.err
            for i in range(i0, i1):
                send(
                    topic,
                    value=bodies[i] + b'%d,"sent_time":%d}' % (now_ms - delays[i], now_ms),
                    key=keys[i],
                    partition=parts[i],
                ).add_callback(ok).add_errback(err)

    def serve(self) -> None:
        if self.spec.client == "confluent":
            self.producer.poll(0)

    def finish(self) -> None:
        if self.spec.client == "confluent":
            left = self.producer.flush(60)
            if left:
                self.acks.err(RuntimeError(f"{left} records still unacknowledged after 60s"))
        else:
            self.producer.flush(timeout=60)
            self.producer.close(timeout=10)

    def close(self) -> None:
        if self.spec.client != "confluent":
            self.producer.close(timeout=5)


def _worker(spec: _Spec, conn: Connection, stop: Any) -> None:
    """Producer process: prepare, say ready, wait for (T0, warmup, seconds), send, report."""
    from cli.local.services import parent_death_signal

    pdeath = parent_death_signal()
    if pdeath is not None:
        pdeath()
    try:
        t = time.perf_counter()
        bodies, delays, keys, parts = _prepare(spec)
        acks = _Acks(spec.partitions)
        client = _Client(spec, acks, bodies, delays, keys, parts)
        prepare_s = time.perf_counter() - t
        conn.send(("ready", len(bodies), prepare_s))
        msg = conn.recv()
        if msg[0] != "go":
            client.close()
            return
        _, t0, warmup_s, seconds = msg
        marks = _send(spec.rate, len(bodies), client, acks, t0, warmup_s, seconds, stop)
        np.save(
            spec.acks_path,
            np.stack(
                [np.frombuffer(a, dtype=np.int64) for a in (acks.parts, acks.offsets, acks.times)]
            )
            if acks.acked
            else np.zeros((3, 0), np.int64),
        )
        conn.send(
            (
                "done",
                ProducerResult(
                    spec.index, len(bodies), prepare_s, marks, spec.acks_path, acks.first_error
                ),
            )
        )
    except KeyboardInterrupt:
        return
    except Exception as e:  # reported to the coordinator, which fails the run
        with contextlib.suppress(OSError, BrokenPipeError):
            conn.send(("error", f"producer {spec.index}: {e!r}"))


def _send(
    rate: float,
    n: int,
    client: _Client,
    acks: _Acks,
    t0: float,
    warmup_s: float,
    seconds: float,
    stop: Any,
) -> dict[str, Mark]:
    marks: dict[str, Mark] = {}
    mono0 = time.monotonic() + (t0 - time.time())
    sent = 0

    def due_at(elapsed_s: float) -> int:
        return min(n, int(rate * elapsed_s))

    def mark(name: str) -> None:
        client.serve()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        elapsed = time.monotonic() - mono0
        marks[name] = Mark(
            at_s=time.time(),
            sent=sent,
            acked=acks.acked,
            failed=acks.failed,
            behind=max(0, due_at(elapsed) - sent),
            next_offsets=tuple(acks.next_offsets),
            cpu_s=ru.ru_utime + ru.ru_stime,
        )

    if stop.wait(max(0.0, mono0 - time.monotonic())):
        return marks
    k = 0
    while sent < n and not stop.is_set():
        now = time.monotonic()
        target = mono0 + k * TICK_S
        if target > now:
            time.sleep(target - now)
        elapsed = time.monotonic() - mono0
        if "warm" not in marks and elapsed >= warmup_s:
            mark("warm")
        if elapsed >= warmup_s + seconds:  # a producer that fell behind stops on time too
            mark("end")
            break
        due = due_at((k + 1) * TICK_S)
        if due > sent:
            client.send(sent, due, int(time.time() * 1000))
            sent = due
        k += 1
    for name, at in (("warm", warmup_s), ("end", warmup_s + seconds)):
        while name not in marks:
            left = mono0 + at - time.monotonic()
            if left <= 0:
                mark(name)
            elif stop.wait(min(left, TICK_S)):
                return marks
            else:
                client.serve()
    client.finish()
    mark("final")
    return marks


@dataclass
class OfferedLoad:
    """`rate` events/s offered to `topic` by `processes` processes, for warm-up + seconds.

    Use: `prepare()` (blocks until every process has built its events and connected),
    `start(warmup_s, seconds)` (returns T0, epoch s), `results()` (blocks until all are done),
    `close()` (always; stops and reaps the processes).
    """

    bootstrap: str
    topic: str
    partitions: int
    rate: float
    processes: int
    warmup_s: float
    seconds: float
    workdir: Path
    seed: int = 1
    #: "kafka-python" (KafkaProducer) or "confluent" (confluent-kafka, librdkafka).
    client: str = "kafka-python"
    #: Equal services named s00000.. (0: the generator's default mix of a few).
    services: int = 0
    #: Routes and regions of the events' attributes (0 routes: none), as `_Spec`'s.
    routes: int = 0
    regions: int = 3
    _procs: list[Any] = field(default_factory=list)
    _conns: list[Connection] = field(default_factory=list)
    _stop: Any = None
    events: int = 0
    prepare_s: float = 0.0

    def prepare(self, timeout_s: float = 600.0) -> None:
        """Start the processes; return once all have their events encoded and are connected."""
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        share = self.rate / self.processes
        count = math.ceil(share * (self.warmup_s + self.seconds))
        for i in range(self.processes):
            spec = _Spec(
                index=i,
                bootstrap=self.bootstrap,
                topic=self.topic,
                partitions=self.partitions,
                rate=share,
                count=count,
                seed=self.seed * 1000 + i,
                acks_path=str(self.workdir / f"acks-{self.seed}-{i}.npy"),
                client=self.client,
                services=self.services,
                routes=self.routes,
                regions=self.regions,
            )
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_worker, args=(spec, child, self._stop), daemon=True, name=f"bench-load-{i}"
            )
            p.start()
            child.close()
            self._procs.append(p)
            self._conns.append(parent)
        deadline = time.monotonic() + timeout_s
        for conn in self._conns:
            msg = self._recv(conn, deadline)
            if msg[0] != "ready":
                raise RuntimeError(msg[1])
            self.events += msg[1]
            self.prepare_s = max(self.prepare_s, msg[2])

    def start(self, lead_s: float = 0.5) -> float:
        """Tell every process to start at T0 = now + lead_s; return T0 (epoch seconds)."""
        t0 = time.time() + lead_s
        for conn in self._conns:
            conn.send(("go", t0, self.warmup_s, self.seconds))
        return t0

    def results(self, timeout_s: float) -> list[ProducerResult]:
        """Wait for every process's report (they flush first)."""
        deadline = time.monotonic() + timeout_s
        out = []
        for conn in self._conns:
            msg = self._recv(conn, deadline)
            if msg[0] != "done":
                raise RuntimeError(msg[1])
            out.append(msg[1])
        return out

    def close(self) -> None:
        """Stop sending, then terminate and reap every process (idempotent)."""
        if self._stop is not None:
            self._stop.set()
        for conn in self._conns:
            with contextlib.suppress(OSError, BrokenPipeError):
                conn.send(("stop",))
        for p in self._procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        for conn in self._conns:
            conn.close()
        self._procs.clear()
        self._conns.clear()

    def _recv(self, conn: Connection, deadline: float) -> Any:
        while not conn.poll(0.2):
            if time.monotonic() > deadline:
                raise TimeoutError("a producer process did not answer in time")
            if any(not p.is_alive() and p.exitcode not in (0, None) for p in self._procs):
                raise RuntimeError("a producer process died (see its stderr)")
        try:
            return conn.recv()
        except EOFError:
            raise RuntimeError("a producer process exited without a report") from None


def combine_marks(results: Sequence[ProducerResult], name: str) -> dict[str, Any]:
    """Sum of the processes' counters at mark `name`; next offsets as the per-partition max."""
    ms = [r.marks[name] for r in results if name in r.marks]
    if not ms:
        return {}
    return {
        "at_s": max(m.at_s for m in ms),
        "sent": sum(m.sent for m in ms),
        "acked": sum(m.acked for m in ms),
        "failed": sum(m.failed for m in ms),
        "behind": sum(m.behind for m in ms),
        "next_offsets": [max(col) for col in zip(*(m.next_offsets for m in ms), strict=True)],
        "cpu_s": sum(m.cpu_s for m in ms),
    }
