"""Catch-up after an outage: how fast a job started against a backlog gets back to live.

    .venv/bin/python benchmarks/bench_catchup.py [--rate 5000] [--backlog 1h] [--services 20]
        [--master local[2]] [--client confluent|kafka-python] [--timeout 30m] [--after 20]
        [--backlog-processes 2] [--start-timeout 240]
        [--job-arg=--max-records-per-trigger=100000 ...]

What a user meets after an outage: the topic holds `--backlog` of event time at `--rate`
(an hour at 5,000 events/s: 18,000,000 records) and live traffic keeps arriving at `--rate`
while the job works through it. Target (not asserted): the job catches up at >= 3x the live
rate, i.e. takes (backlog + what arrives meanwhile) / time >= 15,000 records/s at the
defaults, so an hour's backlog is gone within half an hour.

Starts its own broker (Tansu) and redis-server and a topic of 3 partitions, then:

  * backlog, before the job starts: `--backlog-processes` confluent-kafka processes produce
    rate x backlog events as fast as the machine allows (none paced), built in chunks by the
    live load's own generator code (benchmarks/offered_load.py, so the same services, users,
    latencies and out-of-order delays). Record number j of the N gets the instant
    now - backlog + j x backlog / N (when producing starts): that is its Kafka timestamp and
    its `sent_time`, its event time is that minus the generator's own send delay, as the live
    records have it. So the log looks like one that accumulated over the span, in time order
    per partition: the processes take every P-th record and meet at a barrier every ~1 s of
    event time, so they never drift further apart than that (a partition mixing two processes
    an hour apart would make the job count half of them as late). Producers batch for
    100 ms: Tansu pays per record batch held on every request (BENCHMARKS.md, "The demo"),
    and a log of tiny batches would measure that, not the job. It prints how long producing
    took and its records/s, and checks the backlog by counting the producers'
    acknowledgements (Tansu's ListOffsets answer can be short, /work/shared/NOTES.md) next to
    the end offsets of a fetch response (`LogClient.stable_end_offsets`, exact);
  * catch-up: the live load (offered_load's paced producers at `--rate`, event time now;
    chained in segments of up to a minute, each built while the one before runs, because
    an `OfferedLoad` builds all its events up front and the run's length is not known) and the
    job as a user starts it (`python -m cli.main job ... --trigger 1s --master local[2]
    --starting-offsets earliest`, a subprocess, the default `--max-records-per-trigger` and
    windows: bench_freshness's job with the other starting offsets). No heartbeats are sent to
    kick its first batch (bench_freshness's `wait_first_status`): the backlog is there.
  * every second the topic's end offsets (a fetch response's: records the broker has
    acknowledged) and the job's batches (`read_batches`): caught up = the first batch whose
    committed offsets cover every record the broker held 2 s before that batch's commit to
    Redis (lag <= 2 s of live input). Every ~10 s a progress line: backlog left, lag, the rate
    the job takes records at, ETA;
  * the dashboard's estimate: when 10, 25, 50 and 75 % of the backlog are taken, what the
    health panel would say, `dashboard.job_status.catch_up(read_batches(...))` ("caught up in
    ~N"), next to the time it really took from there;
  * `--after` seconds more of live load once caught up, to show the job live again.

How to read the summary:
  * backlog: records, how long producing took and its records/s (to size a longer run);
  * first batch: seconds from starting the job to its first batch's start and commit (JVM,
    Spark session, Python workers, then a batch of `--max-records-per-trigger` records);
  * caught up: seconds from starting the job to the commit of the batch that caught up; records
    taken by then (the backlog plus the live records that arrived meanwhile) / those seconds =
    the catch-up rate, and its ratio to the live rate (the target's figure). "From its first
    batch" leaves out the start-up;
  * the catch-up's batches: count, median/p95/max duration, records per batch; the CPU seconds
    of the job's process tree (driver, JVM, Python workers) over the catch-up, with the broker's
    and Redis's beside it: everything shares the same cores;
  * the page's estimate: at each share of the backlog taken, "caught up in ~N" as the page
    would show it then, and the seconds it really took from that moment. The page measures the
    last minute of batches against the topic's end the job asked for (every 5 s), so it says
    nothing until two batches are in and lags the job's speed-ups (the JIT) by up to a minute;
  * live again: the `--after` seconds' batches, their median duration and freshness (commit
    to Redis - broker timestamp, the job's per-batch p50/p99 figures: median of the p50s,
    highest p99);
  * late rows: what the job counted as late over its history, against the records it took.
    The backlog is in time order per partition and a capped batch takes the same fraction of
    every partition's backlog (jobs/source/kafka_source.py `split_limit`), so the partitions,
    however unevenly the generator's keys fill them (~43/31/26 %), move through event time
    together: expect none beyond the generator's own out-of-order events.

One run = one fresh JVM: its first batches run at about half a warm job's speed (BENCHMARKS.md,
"Warm and fresh processes"), which is what a user restarting after an outage gets. Prints the
machine first; nothing is asserted. Ctrl-C or SIGTERM stops every process it started.
librdkafka's "Producer terminating with N messages still in queue" at the end is the live load
stopped mid-send, as meant.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import redis  # noqa: E402

from benchmarks.bench_freshness import (  # noqa: E402
    PARTITIONS,
    PREFIX,
    Job,
    _interrupt,
    _p95,
    by_partition,
    cpu_snapshot,
    cpu_text,
    job_argv,
    job_parts,
    ms,
    parts_text,
    start_job,
)
from benchmarks.machine import describe  # noqa: E402
from benchmarks.offered_load import (  # noqa: E402
    OfferedLoad,
    ProducerResult,
    _prepare,
    _Spec,
    processes_for,
)
from cli.local.services import (  # noqa: E402
    Service,
    parent_death_signal,
    start_broker,
    start_redis,
)
from dashboard.job_status import CatchUp, catch_up  # noqa: E402
from jobs.source.kafka_log import LogClient  # noqa: E402
from tidegauge.core.config import (  # noqa: E402
    DEFAULT_MAX_RECORDS_PER_TRIGGER,
    KafkaSettings,
    RedisSettings,
)
from tidegauge.core.durations import format_duration, parse_duration  # noqa: E402
from tidegauge.core.store import Keys, connect, read_batches  # noqa: E402
from tidegauge.core.store.lateness import read_late_counters  # noqa: E402
from tidegauge.traffic.topics import ensure_topic  # noqa: E402

#: Shares of the backlog taken at which the page's estimate is taken down.
MILESTONES = (0.10, 0.25, 0.50, 0.75)
#: Caught up: the committed offsets cover what the broker held this long before the commit.
CAUGHT_UP_LAG_MS = 2_000
#: Seconds between progress lines.
PROGRESS_EVERY_S = 10.0
#: Event time (s) the backlog processes may drift apart before they wait for each other.
DRIFT_S = 1.0
#: Events a backlog process builds at a time (~25 MB).
CHUNK = 100_000
#: Seeds of the backlog's chunks start here: event ids are "{seed:x}-{seq}", and the live
#: segments' seeds (OfferedLoad: seed x 1000 + process) stay far below.
BACKLOG_SEED = 1_000_000_000


# --- the backlog: unpaced producers with given times --------------------------------------------


@dataclass(frozen=True)
class _BacklogSpec:
    index: int
    processes: int
    bootstrap: str
    topic: str
    total: int
    start_ms: int
    span_ms: int
    rate: float
    services: int
    #: Records a process hands over between two barrier waits.
    step: int


@dataclass(frozen=True)
class BacklogPart:
    """What one backlog process did."""

    index: int
    sent: int
    acked: int
    failed: int
    first_error: str | None
    #: Per partition: 1 + the highest acknowledged offset (0: none).
    next_offsets: tuple[int, ...]
    #: The broker timestamps of its acknowledged records: lowest and highest (epoch ms).
    ts_min: int | None
    ts_max: int | None
    cpu_s: float


class _Tally:
    """Delivery reports counted (confluent-kafka calls it from poll and flush)."""

    def __init__(self, partitions: int) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: str | None = None
        self.next_offsets = [0] * partitions
        self.ts_min: int | None = None
        self.ts_max: int | None = None

    def delivered(self, error: Any, msg: Any) -> None:
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = str(error)
            return
        self.acked += 1
        p, o, ts = msg.partition(), msg.offset(), msg.timestamp()[1]
        if o >= self.next_offsets[p]:
            self.next_offsets[p] = o + 1
        if self.ts_min is None or ts < self.ts_min:
            self.ts_min = ts
        if self.ts_max is None or ts > self.ts_max:
            self.ts_max = ts


def _backlog_worker(spec: _BacklogSpec, barrier: Any, progress: Any, conn: Connection) -> None:
    """One backlog process: records j = index, index + P, ... of the N, unpaced, in order."""
    pdeath = parent_death_signal()
    if pdeath is not None:
        pdeath()
    try:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": spec.bootstrap,
                "acks": 1,
                "linger.ms": 100,
                "batch.size": 256 * 1024,
                "queue.buffering.max.messages": 1_000_000,
                "enable.idempotence": False,
                "client.id": "tidegauge-bench-backlog",
            }
        )
        producer.list_topics(spec.topic, timeout=10)
        tally = _Tally(PARTITIONS)
        produce, poll, cb, topic = producer.produce, producer.poll, tally.delivered, spec.topic
        count = len(range(spec.index, spec.total, spec.processes))
        common = spec.total // spec.processes  # every process gets this far: barriers below it
        i, chunk = 0, 0
        while i < count:
            bodies, delays, keys, parts = _prepare(
                _Spec(
                    index=spec.index,
                    bootstrap=spec.bootstrap,
                    topic=topic,
                    partitions=PARTITIONS,
                    rate=spec.rate,
                    count=min(CHUNK, count - i),
                    seed=BACKLOG_SEED + spec.index * 1_000_000 + chunk,
                    acks_path="",
                    client="confluent",
                    services=spec.services,
                )
            )
            chunk += 1
            for k in range(min(len(bodies), count - i)):
                j = i * spec.processes + spec.index
                at = spec.start_ms + j * spec.span_ms // spec.total
                value = bodies[k] + b'%d,"sent_time":%d}' % (at - delays[k], at)
                while True:
                    try:
                        produce(
                            topic,
                            value=value,
                            key=keys[k],
                            partition=parts[k],
                            on_delivery=cb,
                            timestamp=at,
                        )
                        break
                    except BufferError:  # the client's queue is full: let it send
                        poll(0.05)
                i += 1
                if i % spec.step == 0:
                    poll(0)
                    progress.value = tally.acked
                    if i < common:
                        barrier.wait(300)
        left = producer.flush(300)
        if left:
            tally.failed += left
            tally.first_error = tally.first_error or f"{left} unacknowledged after 300s"
        progress.value = tally.acked
        ru = resource.getrusage(resource.RUSAGE_SELF)
        conn.send(
            (
                "done",
                BacklogPart(
                    index=spec.index,
                    sent=i,
                    acked=tally.acked,
                    failed=tally.failed,
                    first_error=tally.first_error,
                    next_offsets=tuple(tally.next_offsets),
                    ts_min=tally.ts_min,
                    ts_max=tally.ts_max,
                    cpu_s=ru.ru_utime + ru.ru_stime,
                ),
            )
        )
    except KeyboardInterrupt:
        return
    except Exception as e:  # reported to the coordinator, which stops the run
        with contextlib.suppress(Exception):
            barrier.abort()
        with contextlib.suppress(OSError, BrokenPipeError):
            conn.send(("error", f"backlog producer {spec.index}: {e!r}"))


@dataclass(frozen=True)
class Backlog:
    """The backlog in the topic: what was produced and where each partition ends."""

    records: int
    start_ms: int
    span_ms: int
    seconds: float
    cpu_s: float
    #: Per partition: the end of the backlog (from the acknowledgements).
    ends: dict[int, int]
    parts: list[BacklogPart]

    @property
    def acked(self) -> int:
        return sum(p.acked for p in self.parts)


def produce_backlog(
    bootstrap: str,
    topic: str,
    total: int,
    span_ms: int,
    rate: float,
    services: int,
    processes: int,
) -> Backlog:
    """Produce `total` events spread over the `span_ms` before now, unpaced; wait for acks."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    start_ms = int(time.time() * 1000) - span_ms
    step = max(1_000, round(rate * DRIFT_S / processes))
    procs, conns, counters = [], [], []
    parts: dict[int, BacklogPart] = {}
    t = time.monotonic()
    try:
        for i in range(processes):
            spec = _BacklogSpec(
                index=i,
                processes=processes,
                bootstrap=bootstrap,
                topic=topic,
                total=total,
                start_ms=start_ms,
                span_ms=span_ms,
                rate=rate,
                services=services,
                step=step,
            )
            counter = ctx.Value("q", 0, lock=False)
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_backlog_worker,
                args=(spec, barrier, counter, child),
                daemon=True,
                name=f"bench-backlog-{i}",
            )
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
            counters.append(counter)
        next_line = time.monotonic() + PROGRESS_EVERY_S
        while len(parts) < processes:
            for i, conn in enumerate(conns):
                if i in parts or not conn.poll(0.2):
                    continue
                try:
                    msg = conn.recv()
                except EOFError:
                    raise RuntimeError(f"backlog producer {i} exited without a report") from None
                if msg[0] != "done":
                    raise RuntimeError(msg[1])
                parts[i] = msg[1]
            dead = [p for i, p in enumerate(procs) if i not in parts and not p.is_alive()]
            if dead and not any(c.poll(0) for c in conns):
                raise RuntimeError(f"{dead[0].name} died (exit code {dead[0].exitcode})")
            if time.monotonic() >= next_line:
                done = sum(c.value for c in counters)
                el = time.monotonic() - t
                print(
                    f"  backlog: {done:,} of {total:,} acknowledged after {el:.0f}s "
                    f"({done / el:,.0f} records/s)",
                    flush=True,
                )
                next_line += PROGRESS_EVERY_S
        seconds = time.monotonic() - t
    finally:
        with contextlib.suppress(Exception):
            barrier.abort()
        for p in procs:
            p.join(5 if len(parts) == processes else 0)  # interrupted: no need to wait
            if p.is_alive():
                p.terminate()
                p.join(5)
        for conn in conns:
            conn.close()
    ordered = [parts[i] for i in range(processes)]
    ends = {p: max(x.next_offsets[p] for x in ordered) for p in range(PARTITIONS)}
    return Backlog(
        records=total,
        start_ms=start_ms,
        span_ms=span_ms,
        seconds=seconds,
        cpu_s=sum(x.cpu_s for x in ordered),
        ends=ends,
        parts=ordered,
    )


# --- the live load, chained -----------------------------------------------------------------


class LiveLoad:
    """offered_load's paced producers at a rate, event time now, for as long as it takes.

    An `OfferedLoad` builds all its events before it starts, and a catch-up's length is not
    known, so the load is a chain of segments of `segment_s`: the next one is built (in its own
    processes) while one runs and is told to start when it ends, so at most two segments'
    events are held at a time. A segment that could not be built in time starts late: the
    largest such gap is `late_s`.
    """

    def __init__(self, make: Callable[[int], OfferedLoad], segment_s: float) -> None:
        self._make = make
        self.segment_s = segment_s
        self._segments: list[OfferedLoad] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = 0.0
        self.started = 0
        self.late_s = 0.0
        self.results: list[ProducerResult] = []
        self.error: str | None = None

    def prepare(self) -> OfferedLoad:
        """Build the first segment (blocks until its processes are ready)."""
        first = self._make(0)
        self._segments.append(first)
        first.prepare()
        return first

    def start(self, lead_s: float = 0.5) -> float:
        """Start the first segment at now + `lead_s` and the chain after it; return T0 (epoch s)."""
        self.t0 = self._segments[0].start(lead_s)
        self.started = 1
        self._thread = threading.Thread(target=self._chain, name="live-load", daemon=True)
        self._thread.start()
        return self.t0

    def _chain(self) -> None:
        """Build and start segment after segment until stopped; then close them all.

        The thread that builds a segment must outlive its processes: they ask Linux to
        SIGTERM them when the thread that started them ends (`parent_death_signal`), and one
        killed while it waits on its segment's stop event leaves `Event.set()` hanging.
        """
        current, t_next = self._segments[0], self.t0 + self.segment_s
        try:
            while not self._stop.is_set():
                nxt = self._make(self.started)
                self._segments.append(nxt)
                nxt.prepare()
                if self._stop.is_set():
                    return
                lead = t_next - time.time()
                self.late_s = max(self.late_s, -lead)
                t_start = nxt.start(max(0.05, lead))
                self.started += 1
                if self._stop.wait(max(0.0, t_next - time.time()) + 1.0):
                    return
                self.results.extend(current.results(timeout_s=60))
                current.close()
                self._segments.remove(current)
                current, t_next = nxt, t_start + self.segment_s
        except Exception as e:  # reported in the summary
            if not self._stop.is_set():
                self.error = repr(e)
        finally:
            self._close_all()

    def _close_all(self) -> None:
        for seg in self._segments:
            with contextlib.suppress(Exception):
                seg.close()
        self._segments.clear()

    def stop(self) -> None:
        """Stop sending and reap every segment's processes (idempotent).

        Waits for a segment being built (seconds) and its thread's clean-up.
        """
        self._stop.set()
        if self._thread is None:
            self._close_all()
        else:
            self._thread.join(120)


# --- watching the job ---------------------------------------------------------------------------


def commit_ms(batch: dict[str, Any]) -> int:
    """When the batch's results reached Redis (epoch ms): its `commit_time`, else its end."""
    fresh = batch.get("freshness") or {}
    if fresh.get("commit_time"):
        return int(fresh["commit_time"])
    return int(batch["batch_time"]) + int(batch.get("batch_duration_ms") or 0)


def held_at(samples: list[tuple[int, dict[int, int]]], at_ms: int) -> dict[int, int] | None:
    """The topic's end offsets in the latest sample taken at or before `at_ms`."""
    found = None
    for t, ends in samples:
        if t > at_ms:
            break
        found = ends
    return found


def covers(batch: dict[str, Any], samples: list[tuple[int, dict[int, int]]]) -> bool:
    """Whether the batch's committed offsets reach what the broker held 2 s before its commit."""
    ends = held_at(samples, commit_ms(batch) - CAUGHT_UP_LAG_MS)
    if ends is None:
        return False
    done = by_partition(batch.get("offsets"))
    return all(done.get(p, 0) >= o for p, o in ends.items())


@dataclass
class Milestone:
    """The page's estimate when a share of the backlog had been taken."""

    share: float
    at_s: float
    estimate: CatchUp | None


@dataclass
class Watch:
    """What the watch loop saw (times in seconds from the job's start, epoch ms in batches)."""

    samples: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    milestones: list[Milestone] = field(default_factory=list)
    caught: dict[str, Any] | None = None
    caught_seen_s: float | None = None
    cpu: dict[str, float | None] = field(default_factory=dict)
    parts: dict[str, float] = field(default_factory=dict)
    end_s: float = 0.0


def backlog_taken(done: dict[int, int], backlog: Backlog) -> int:
    """Records of the backlog at or below the committed offsets `done`."""
    return sum(min(done.get(p, 0), end) for p, end in backlog.ends.items())


def watch(
    args: argparse.Namespace,
    job: Job,
    r: redis.Redis,
    log: LogClient,
    backlog: Backlog,
    t_start: float,
    pids: dict[str, int],
    cpu0: dict[str, float | None],
) -> Watch:
    """Every second until caught up (+ `--after`) or `--timeout`: offsets, batches, progress."""
    keys = Keys(PREFIX)
    w = Watch()
    timeout_s = parse_duration(args.timeout) / 1000
    partitions = log.partitions()
    history: list[tuple[float, int, int]] = []  # (s since start, committed, topic end)
    next_line = t_start + PROGRESS_EVERY_S
    seen = -1
    while True:
        now = time.time()
        ends = log.stable_end_offsets(partitions)
        w.samples.append((int(now * 1000), ends))
        batches = read_batches(r, keys, limit=200)
        fresh = [b for b in batches if int(b["batch_id"]) > seen]
        if fresh:
            seen = int(fresh[-1]["batch_id"])
        for b in fresh:
            if w.caught is None and covers(b, w.samples):
                w.caught, w.caught_seen_s = b, now - t_start
                w.cpu = {
                    k: None if v is None or cpu0.get(k) is None else v - (cpu0[k] or 0.0)
                    for k, v in cpu_snapshot(pids).items()
                }
                w.parts = job_parts(job.proc.pid)
                print(
                    f"+{now - t_start:5.0f}s: caught up (batch {b['batch_id']} committed at "
                    f"+{commit_ms(b) / 1000 - t_start:.1f}s covers the topic 2 s before); "
                    f"{args.after:g}s more of live load",
                    flush=True,
                )
        done = by_partition(batches[-1].get("offsets")) if batches else {}
        committed, end_total = sum(done.values()), sum(ends.values())
        history.append((now - t_start, committed, end_total))
        taken = backlog_taken(done, backlog)
        for share in MILESTONES:
            if taken >= share * backlog.records and all(m.share != share for m in w.milestones):
                w.milestones.append(
                    Milestone(share, now - t_start, catch_up(read_batches(r, keys)))
                )
        if now >= next_line:
            print(progress_line(now - t_start, history, backlog, taken, batches), flush=True)
            next_line += PROGRESS_EVERY_S
        if not job.alive():
            raise RuntimeError(job.exit_text())
        if not batches and now - t_start > args.start_timeout:
            raise TimeoutError(f"no batch after {args.start_timeout:g}s:\n{job.log_tail()}")
        if w.caught_seen_s is not None and now - t_start >= w.caught_seen_s + args.after:
            break
        if w.caught is None and now - t_start >= timeout_s:
            print(f"+{now - t_start:5.0f}s: NOT caught up after {args.timeout}; stopping")
            break
        time.sleep(max(0.0, 1.0 - (time.time() - now)))
    w.end_s = time.time() - t_start
    return w


def progress_line(
    at_s: float,
    history: list[tuple[float, int, int]],
    backlog: Backlog,
    taken: int,
    batches: list[dict[str, Any]],
) -> str:
    """Backlog left, lag, the rate records are taken and arrive at over the last ~10 s, ETA."""
    if not batches:
        return f"+{at_s:5.0f}s: no batch yet (the job is starting)"
    t1, c1, e1 = history[-1]
    t0, c0, e0 = next(h for h in history if h[0] >= t1 - PROGRESS_EVERY_S)
    dt = max(t1 - t0, 1e-9)
    take, arrive = (c1 - c0) / dt, (e1 - e0) / dt
    lag = max(0, e1 - c1)
    gain = take - arrive
    if lag <= arrive * CAUGHT_UP_LAG_MS / 1000:
        eta = "live (lag <= 2 s of input)"
    elif gain > 0:
        eta = f"ETA ~{format_duration(max(1, round(lag / gain)) * 1000)}"
    else:
        eta = "not gaining"
    return (
        f"+{at_s:5.0f}s: backlog left {backlog.records - taken:,} of {backlog.records:,} "
        f"({taken / backlog.records:.0%} taken); lag {lag:,} records; taking {take:,.0f}/s, "
        f"arriving {arrive:,.0f}/s (last {dt:.0f}s); {eta}; batch {batches[-1]['batch_id']}"
    )


# --- the summary --------------------------------------------------------------------------------


def summarise(
    args: argparse.Namespace,
    backlog: Backlog,
    w: Watch,
    history: list[dict[str, Any]],
    t_start: float,
    live: LiveLoad,
    late_rows: int,
) -> None:
    """One block of figures: backlog, first batch, catch-up, the page's estimate, live again."""
    rate = args.rate
    print("\nsummary")
    print(
        f"  backlog: {backlog.records:,} events over {args.backlog} of event time, produced by "
        f"{len(backlog.parts)} processes in {backlog.seconds:.1f}s = "
        f"{backlog.records / backlog.seconds:,.0f} records/s ({backlog.cpu_s:.0f} CPU s)"
    )
    failed = sum(x.marks["final"].failed for x in live.results if "final" in x.marks)
    if w.samples:
        t_last, ends = w.samples[-1]
        live_s = t_last / 1000 - live.t0
        arrived = sum(ends.values()) - sum(backlog.ends.values())
        print(
            f"  live load: {rate:,} events/s offered, {arrived / max(live_s, 1e-9):,.0f}/s "
            f"acknowledged over {live_s:.0f}s (the topic's end); {live.started} segment(s)"
            + (f", one started {live.late_s:.1f}s late" if live.late_s > 0.2 else "")
            + (f"; {failed:,} failed in the finished ones" if failed else "")
            + (f"; error: {live.error}" if live.error else "")
        )
    if not history:
        print("  the job committed no batch")
        return
    first = history[0]
    print(
        f"  first batch: started +{int(first['batch_time']) / 1000 - t_start:.1f}s after the job "
        f"was started, committed +{commit_ms(first) / 1000 - t_start:.1f}s "
        f"({int(first.get('input_rows') or 0):,} records, {ms(first.get('batch_duration_ms'))})"
    )
    caught = w.caught
    upto = int(caught["batch_id"]) if caught else int(history[-1]["batch_id"])
    during = [b for b in history if int(b["batch_id"]) <= upto]
    last = caught or during[-1]
    taken = sum(by_partition(last.get("offsets")).values())
    span_s = commit_ms(last) / 1000 - t_start
    from_first_s = (commit_ms(last) - int(first["batch_time"])) / 1000
    catch_rate = taken / span_s if span_s > 0 else 0.0
    if caught:
        print(
            f"  caught up: +{span_s:.1f}s after the job was started (batch {upto}, lag <= 2 s "
            f"of live input); {taken:,} records taken = {catch_rate:,.0f} records/s = "
            f"{catch_rate / rate:.1f}x the live rate (target >= 3x); from its first batch "
            f"{taken / max(from_first_s, 1e-9):,.0f} records/s"
        )
    else:
        taken_b = backlog_taken(by_partition(last.get("offsets")), backlog)
        print(
            f"  NOT caught up within {args.timeout}: by +{span_s:.0f}s (batch {upto}) "
            f"{taken:,} records taken ({taken_b:,} of the backlog, "
            f"{taken_b / backlog.records:.0%}) = {catch_rate:,.0f} records/s = "
            f"{catch_rate / rate:.1f}x the live rate (target >= 3x)"
        )
    durations = sorted(float(b.get("batch_duration_ms") or 0) for b in during)
    rows = sorted(int(b.get("input_rows") or 0) for b in during)
    print(
        f"  batches until then: {len(during)}, duration median {ms(float(np.median(durations)))}, "
        f"p95 {ms(_p95(durations))}, max {ms(durations[-1])}; records per batch median "
        f"{float(np.median(rows)):,.0f}, max {rows[-1]:,} (the job's cap "
        f"{max_per_trigger(args):,})"
    )
    if caught and w.cpu:
        cores = (w.cpu.get("job") or 0.0) / max(w.caught_seen_s or 1.0, 1e-9)
        print(
            f"  CPU seconds until caught up: job {cpu_text(w.cpu.get('job'))} "
            f"({cores:.2f} cores), broker {cpu_text(w.cpu.get('broker'))}, redis "
            f"{cpu_text(w.cpu.get('redis'))}; {os.cpu_count()} cores x "
            f"{w.caught_seen_s:.0f}s = {(os.cpu_count() or 1) * (w.caught_seen_s or 0):.0f}"
        )
        if w.parts:
            print(f"  the job's by part: {parts_text({}, w.parts)}")
    print_estimates(w)
    if caught:
        after = [
            b
            for b in history
            if int(b["batch_id"]) > upto and int(b["batch_time"]) <= (t_start + w.end_s) * 1000
        ]
        fresh = [b["freshness"] for b in after if b.get("freshness")]
        dur = sorted(int(b.get("batch_duration_ms") or 0) for b in after)
        print(
            f"  live again, {args.after:g}s after: {len(after)} batches, duration median "
            f"{ms(float(np.median(dur)) if dur else None)}, max {ms(dur[-1] if dur else None)}; "
            f"freshness p50 {ms(float(np.median([f['p50_ms'] for f in fresh])) if fresh else None)}"
            f", p99 {ms(max((f['p99_ms'] for f in fresh), default=None))}, max "
            f"{ms(max((f['max_ms'] for f in fresh), default=None))}"
        )
    took_all = sum(by_partition(history[-1].get("offsets")).values())
    print(
        f"  late rows the job counted over its history: {late_rows:,} "
        f"({late_rows / max(took_all, 1):.1%} of the {took_all:,} records it took)",
        flush=True,
    )


def print_estimates(w: Watch) -> None:
    """The page's "caught up in ~N" at each milestone next to what it really took."""
    if not w.milestones:
        return
    print("  the page's estimate (dashboard.job_status.catch_up) against what happened:")
    for m in w.milestones:
        actual = w.caught_seen_s - m.at_s if w.caught_seen_s is not None else None
        est = m.estimate
        if est is None:
            said = "nothing (not behind by more than a batch, by its reckoning)"
        elif est.eta_s is None:
            said = (
                f"not gaining ({est.backlog:,} behind, taking {est.processed_per_s:,.0f}/s, "
                f"arriving {est.arriving_per_s:,.0f}/s)"
            )
        else:
            said = (
                f"~{format_duration(max(1, round(est.eta_s)) * 1000)} ({est.backlog:,} behind, "
                f"taking {est.processed_per_s:,.0f}/s, arriving {est.arriving_per_s:,.0f}/s)"
            )
        took = "-" if actual is None else f"{actual:.0f}s"
        if actual and est is not None and est.eta_s is not None:
            took += f" (the page said {est.eta_s / actual:.1f}x that)"
        print(f"    {m.share:>4.0%} taken at +{m.at_s:.0f}s: the page said {said}; it took {took}")


def max_per_trigger(args: argparse.Namespace) -> int:
    """The job's --max-records-per-trigger: a --job-arg's, else the default."""
    value = DEFAULT_MAX_RECORDS_PER_TRIGGER
    for i, a in enumerate(args.job_arg):
        if a.startswith("--max-records-per-trigger="):
            value = int(a.split("=", 1)[1])
        elif a == "--max-records-per-trigger" and i + 1 < len(args.job_arg):
            value = int(args.job_arg[i + 1])
    return value


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=int, default=5000, help="live events/s (default 5000)")
    ap.add_argument(
        "--backlog",
        default="1h",
        help="event time the backlog spans; it holds rate x backlog events (default 1h)",
    )
    ap.add_argument("--services", type=int, default=20, help="events spread evenly over N services")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--client",
        choices=["kafka-python", "confluent"],
        default="confluent",
        help="the live load's producer client (default confluent; the backlog's is always)",
    )
    ap.add_argument(
        "--backlog-processes", type=int, default=2, help="processes producing the backlog"
    )
    ap.add_argument(
        "--timeout", default="30m", help="give up waiting for the catch-up after this long"
    )
    ap.add_argument(
        "--after", type=float, default=20.0, help="seconds of live load after catching up"
    )
    ap.add_argument(
        "--start-timeout",
        type=float,
        default=240.0,
        help="seconds to wait for the job's first batch",
    )
    ap.add_argument(
        "--job-arg",
        action="append",
        default=[],
        help="extra flag for `tidegauge job` (repeat; e.g. "
        "--job-arg=--max-records-per-trigger=100000)",
    )
    args = ap.parse_args()
    if args.rate <= 0 or args.services <= 0 or args.backlog_processes <= 0:
        ap.error("--rate, --services and --backlog-processes want positive integers")
    span_ms = parse_duration(args.backlog)
    total = round(args.rate * span_ms / 1000)
    if total < 1:
        ap.error("--backlog too short: no event at this rate")
    parse_duration(args.timeout)

    signal.signal(signal.SIGTERM, _interrupt)  # the same clean-up as Ctrl-C
    libs = ("pyspark", "numpy", "confluent-kafka", "kafka-python", "redis")
    print(f"machine: {describe(libs)}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="tg-catchup-"))
    services: dict[str, Service] = {}
    job: Job | None = None
    live: LiveLoad | None = None
    log: LogClient | None = None
    try:
        services["broker"] = start_broker(log_path=tmp / "broker.log")
        services["redis"] = start_redis(log_path=tmp / "redis.log")
        kafka = KafkaSettings(bootstrap=services["broker"].address, topic="catchup")
        ensure_topic(kafka, PARTITIONS)
        url = f"redis://{services['redis'].address}/0"
        r = connect(RedisSettings(url=url))
        log = LogClient(kafka.bootstrap, kafka.topic, "tidegauge-bench-catchup")

        print(
            f"\nbacklog: {total:,} events ({args.rate:,}/s x {args.backlog}, {args.services} "
            f"services), unpaced, {args.backlog_processes} confluent-kafka processes",
            flush=True,
        )
        backlog = produce_backlog(
            kafka.bootstrap,
            kafka.topic,
            total,
            span_ms,
            args.rate,
            args.services,
            args.backlog_processes,
        )
        report_backlog(backlog, log)

        # offered_load's processes (bench_freshness's --per-process defaults); a segment holds
        # ~400,000 events per process (~3.5 s to build), a minute at most
        nproc = processes_for(args.rate, 100_000 if args.client == "confluent" else 20_000)
        segment_s = min(60.0, max(10.0, 400_000 / (args.rate / nproc)))

        def segment(k: int) -> OfferedLoad:
            return OfferedLoad(
                bootstrap=kafka.bootstrap,
                topic=kafka.topic,
                partitions=PARTITIONS,
                rate=args.rate,
                processes=nproc,
                warmup_s=0.0,
                seconds=segment_s,
                workdir=tmp,
                seed=k + 1,
                client=args.client,
                services=args.services,
            )

        live = LiveLoad(segment, segment_s)
        live.prepare()
        argv = job_argv(
            kafka,
            url,
            tmp / "checkpoint",
            "1s",
            args.master,
            "earliest",
            args.services,
            args.job_arg,
        )
        print(
            f"\nlive load: {args.rate:,} events/s ({args.client}, segments of {segment_s:.0f}s); "
            f"job: {' '.join(argv[1:])}",
            flush=True,
        )
        pids = {n: s.proc.pid for n, s in services.items()}
        cpu0 = cpu_snapshot(pids)
        live.start(lead_s=0.2)
        t_start = time.time()
        job = start_job(argv, tmp / "job.log")
        pids["job"] = job.proc.pid
        cpu0["job"] = 0.0
        print(
            f"job and live load started; the backlog's newest record is "
            f"{t_start - (backlog.start_ms + backlog.span_ms) / 1000:.0f}s old",
            flush=True,
        )
        w = watch(args, job, r, log, backlog, t_start, pids, cpu0)
        live.stop()
        keys = Keys(PREFIX)
        history = read_batches(r, keys)
        summarise(args, backlog, w, history, t_start, live, read_late_counters(r, keys).tidegauge)
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
    finally:
        if live is not None:
            live.stop()
        if job is not None:
            job.stop()
        if log is not None:
            with contextlib.suppress(Exception):
                log.close()
        for svc in services.values():
            svc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def report_backlog(backlog: Backlog, log: LogClient) -> None:
    """Producing time and rate; the acknowledgements against the total and the broker's ends."""
    acked, failed = backlog.acked, sum(p.failed for p in backlog.parts)
    errors = [p.first_error for p in backlog.parts if p.first_error]
    fetched = dict(sorted(log.stable_end_offsets(sorted(backlog.ends)).items()))
    ts_min = min((p.ts_min for p in backlog.parts if p.ts_min is not None), default=None)
    ts_max = max((p.ts_max for p in backlog.parts if p.ts_max is not None), default=None)
    ok = acked == backlog.records and sum(backlog.ends.values()) == backlog.records
    print(
        f"  produced in {backlog.seconds:.1f}s = {backlog.records / backlog.seconds:,.0f} "
        f"records/s ({backlog.cpu_s:.0f} CPU s in the producers); {acked:,} acknowledged, "
        f"{failed:,} failed"
        + (f" (first error {errors[0]})" if errors else "")
        + f"; per partition (acks) {'/'.join(f'{v:,}' for v in backlog.ends.values())}, "
        f"the broker's ends (fetch) {'/'.join(f'{v:,}' for v in fetched.values())}: "
        + ("the backlog is all there" if ok and fetched == backlog.ends else "MISMATCH")
    )
    if ts_min is not None and ts_max is not None:
        now = time.time() * 1000
        print(
            f"  broker timestamps from {(now - ts_min) / 1000:,.0f}s to "
            f"{(now - ts_max) / 1000:,.1f}s ago (the span asked for: "
            f"{backlog.span_ms / 1000:,.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
