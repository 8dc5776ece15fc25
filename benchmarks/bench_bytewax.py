"""The job's windows in bytewax, a Python stream processor a user might pick instead of Spark.

    .venv/bin/python benchmarks/bench_bytewax.py [--shapes 20:1333,20:133,1000:1333]
        [--events 400000] [--workers 1] [--threads] [--batch-size 1000] [--ordered]
        [--lateness-s 30] [--offset-beginning]

Needs the `bench` extra (`pip install -e '.[bench]'`: bytewax 0.21.1). The input is
`bench_groups.py`'s: per shape `SERVICES:RATE`, a topic of `--events` seeded events (the
generator of `tidegauge produce`, fast pace, 3 partitions, 5 % out of order, heartbeats) from
SERVICES services of equal weight at RATE events per second of event time, on a local Tansu.

The dataflow is what a bytewax user would write for the job's default window: bytewax's own
Kafka input (`KafkaSource`, confluent-kafka, `tail=False`: each partition ends at its end
offset, so the dataflow stops and flushes every window), each value decoded with orjson
(heartbeats and records without a service or event time skipped, as the job does; no dedup,
the topic has no duplicates), keyed by service, then `fold_window` with an `EventClock` on the
record's event time (epoch ms or ISO-8601), `wait_for_system_duration` = the job's allowed
lateness (JobConfig, 30 s; `--lateness-s`) and a 10 s `TumblingWindower` aligned to the epoch.
Per (window, service): count, errors (status >= 500), p50/p99 latency (every latency kept in a
list, sorted when the window closes: exact) and distinct users (`datasketch.HyperLogLog`, p=14
like the job's sketches). `fold_window` runs with `ordered=False` (the folds are commutative);
`--ordered` is bytewax's default (values held until the watermark passes them, then sorted).

It reads from offset 0, the earliest on a fresh Tansu topic: with `OFFSET_BEGINNING`
(`--offset-beginning`) librdkafka first asks for the offset, which takes each partition's
consumer ~0.5 s, not all at once, and the partition that starts first can run more than the
lateness ahead in event time, its events making the others' late.

`--workers 1,2` runs each shape once per value: that many bytewax processes (`-i/-a`, one
worker each), or with `--threads` one process of that many workers (`-w`; they share the GIL).
Prints the machine, then per shape and workers: events produced, Kafka records read, events
bytewax counted into windows, events it emitted as late, windows emitted, wall seconds (the
first worker starting its dataflow to the last one finishing; the produce step and interpreter
start excluded), records read per wall second, the workers' CPU seconds (all their threads)
and the broker's. Nothing is asserted.

Late events are bytewax's own, not the generator's (it sends none). Bytewax keeps a watermark
per key (service), moved by every event (the job: one for the query, moved once per batch),
at max event time - lateness plus the system time since that maximum; an event is late when
its own time is behind it (the job: when its window ended at or before it). Its Kafka input
takes up to `--batch-size` records from each partition in turn, and the partitions are not
the same size (records are keyed by user, and users are Zipf-distributed; 8,873, 6,256 and
5,336 records in one 20,000-event topic): read at the same pace in records, the largest one
falls behind the others in event time as the backlog is read; once by more than the lateness,
its events are late. The job reads every partition's
range of a batch before it moves its watermark. `--lateness-s` wider than the run's event
time span counts every event, for a comparison of the same work.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bytewax.operators as op
import orjson
from bytewax.connectors.kafka import KafkaSource
from bytewax.dataflow import Dataflow
from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window
from bytewax.run import cli_main
from confluent_kafka import OFFSET_BEGINNING
from datasketch import HyperLogLog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tidegauge.core.config import JobConfig  # noqa: E402

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WINDOW = timedelta(seconds=10)
HLL_P = 14

KEYS = ("records", "events", "skipped", "windows", "counted", "late", "errors")

#: What each worker thread saw (threading.get_ident() -> counters): `--threads` runs several
#: bytewax workers in one process. Summed and written as JSON on the process's last stdout line.
_STATS: dict[int, dict[str, int]] = {}


def stats() -> dict[str, int]:
    """This thread's counters."""
    return _STATS.setdefault(threading.get_ident(), dict.fromkeys(KEYS, 0))


# --- the dataflow (runs in each worker process) ------------------------------------------------


class Acc:
    """One (window, service)'s running aggregate."""

    __slots__ = ("count", "errors", "latencies", "users")

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.latencies: list[float] = []
        self.users = HyperLogLog(p=HLL_P)


def parse(msg: Any) -> tuple[str, datetime, float, int, str | None] | None:
    """A Kafka message -> (service, event time, latency ms, status, user), None if no request."""
    st = stats()
    st["records"] += 1
    try:
        d = orjson.loads(msg.value)
        if not isinstance(d, dict) or d.get("heartbeat"):
            raise ValueError("not a request")
        t = d["event_time"]
        if isinstance(t, str):
            ts = datetime.fromisoformat(t)
        else:
            ts = datetime.fromtimestamp(t / 1000, tz=UTC)
        event = (str(d["service"]), ts, float(d["latency_ms"]), int(d["status"]), d.get("user_id"))
    except (ValueError, KeyError, TypeError):
        st["skipped"] += 1
        return None
    st["events"] += 1
    return event


def fold(acc: Acc, event: tuple[str, datetime, float, int, str | None]) -> Acc:
    acc.count += 1
    if event[3] >= 500:
        acc.errors += 1
    acc.latencies.append(event[2])
    if event[4]:
        acc.users.update(event[4].encode())
    return acc


def merge(a: Acc, b: Acc) -> Acc:
    a.count += b.count
    a.errors += b.errors
    a.latencies += b.latencies
    a.users.merge(b.users)
    return a


def finish(item: tuple[str, tuple[int, Acc]]) -> tuple[str, int, int, int, float, float, float]:
    """A closed window -> (service, window id, count, errors, p50, p99, distinct users)."""
    service, (window_id, acc) = item
    lat = sorted(acc.latencies)
    n = len(lat)
    p50, p99 = (lat[max(0, math.ceil(q * n) - 1)] for q in (0.5, 0.99))  # nearest rank
    return (service, window_id, acc.count, acc.errors, p50, p99, acc.users.count())


def on_window(row: tuple[str, int, int, int, float, float, float]) -> None:
    st = stats()
    st["windows"] += 1
    st["counted"] += row[2]
    st["errors"] += row[3]


def on_late(_item: Any) -> None:
    stats()["late"] += 1


def build_flow(
    bootstrap: str,
    topic: str,
    batch_size: int,
    ordered: bool,
    from_beginning: bool = False,
    lateness_s: float = JobConfig.allowed_lateness_ms / 1000,
) -> Any:
    flow = Dataflow("tidegauge_windows")
    msgs = op.input(
        "kafka",
        flow,
        KafkaSource(
            [bootstrap],
            [topic],
            tail=False,
            starting_offset=OFFSET_BEGINNING if from_beginning else 0,
            batch_size=batch_size,
        ),
    )
    events = op.filter_map("parse", msgs, parse)
    keyed = op.key_on("service", events, lambda e: e[0])
    out = fold_window(
        "window",
        keyed,
        EventClock(lambda e: e[1], wait_for_system_duration=timedelta(seconds=lateness_s)),
        TumblingWindower(length=WINDOW, align_to=EPOCH),
        Acc,
        fold,
        merge,
        ordered=ordered,
    )
    rows = op.map("finish", out.down, finish)
    op.inspect("sink", rows, lambda _step, row: on_window(row))
    op.inspect("late", out.late, lambda _step, item: on_late(item))
    return flow


def run_worker(spec: dict[str, Any]) -> None:
    """One bytewax process of `spec["addresses"]` (alone when there is one), `spec["threads"]`
    workers in it."""
    flow = build_flow(
        spec["bootstrap"],
        spec["topic"],
        spec["batch_size"],
        spec["ordered"],
        spec["beginning"],
        spec["lateness_s"],
    )
    addresses = spec["addresses"]
    cluster = {"process_id": spec["proc_id"], "addresses": addresses} if len(addresses) > 1 else {}
    t0, c0 = time.monotonic(), time.process_time()
    cli_main(
        flow,
        workers_per_process=spec["threads"],
        epoch_interval=timedelta(seconds=10),
        **cluster,
    )
    t1, c1 = time.monotonic(), time.process_time()
    total = {k: sum(st[k] for st in _STATS.values()) for k in KEYS}
    print(json.dumps({**total, "t0": t0, "t1": t1, "cpu": c1 - c0}), flush=True)


# --- the driver --------------------------------------------------------------------------------


@dataclass
class Result:
    shape: str
    workers: str
    produced: int
    stats: dict[str, float]
    wall_s: float
    broker_cpu_s: float

    def line(self) -> str:
        s = self.stats
        return (
            f"  {self.workers}: {self.produced:,} events produced, "
            f"{s['records']:,} records read, {s['counted']:,} counted into windows, "
            f"{s['late']:,} late, {s['windows']:,} windows, {self.wall_s:.1f} s wall, "
            f"{s['records'] / self.wall_s:,.0f} records/s, CPU {s['cpu']:.1f} s "
            f"(broker {self.broker_cpu_s:.1f} s)"
        )


def cpu_s(pid: int) -> float:
    """utime + stime of one process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_bytewax(
    bootstrap: str, topic: str, workers: int, args: argparse.Namespace
) -> tuple[dict[str, float], float]:
    """Run the dataflow on `workers` workers; their summed stats and the wall seconds.

    As that many processes of one worker (`-i/-a`), or with `--threads` as one process of that
    many worker threads (`-w`).
    """
    processes, threads = (1, workers) if args.threads else (workers, 1)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(processes)]
    procs = []
    for i in range(processes):
        spec = {
            "bootstrap": bootstrap,
            "topic": topic,
            "batch_size": args.batch_size,
            "ordered": args.ordered,
            "beginning": args.offset_beginning,
            "lateness_s": args.lateness_s,
            "addresses": addresses,
            "proc_id": i,
            "threads": threads,
        }
        cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    outs = []
    try:
        for p in procs:
            stdout, _ = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"bytewax worker exited with {p.returncode}")
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:  # a failed worker leaves the others waiting for it
            if p.poll() is None:
                p.kill()
                p.wait()
    total = {k: sum(o[k] for o in outs) for k in (*KEYS, "cpu")}
    wall = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    return total, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default="20:1333,20:133,1000:1333")
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--workers", default="1", help="bytewax workers, e.g. 1,2 (processes)")
    ap.add_argument("--batch-size", type=int, default=1000, help="KafkaSource batch_size")
    ap.add_argument("--ordered", action="store_true", help="fold_window(ordered=True)")
    ap.add_argument(
        "--offset-beginning",
        action="store_true",
        help="start at OFFSET_BEGINNING instead of offset 0 (see the docstring)",
    )
    ap.add_argument(
        "--lateness-s",
        type=float,
        default=JobConfig.allowed_lateness_ms / 1000,
        help="EventClock wait_for_system_duration (default: the job's allowed lateness)",
    )
    ap.add_argument(
        "--threads",
        action="store_true",
        help="run --workers as threads of one process (bytewax -w) instead of processes",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        run_worker(json.loads(args.worker))
        return

    from benchmarks.bench_groups import parse_shapes, produce_shape
    from benchmarks.machine import describe
    from cli.local.services import start_broker
    from tidegauge.core.config import KafkaSettings

    print(f"machine: {describe(('bytewax', 'confluent-kafka', 'datasketch', 'orjson'))}")
    print(
        f"fold_window(ordered={args.ordered}), KafkaSource batch_size {args.batch_size}, "
        f"starting offset {'OFFSET_BEGINNING' if args.offset_beginning else 0}, "
        f"lateness {args.lateness_s:g} s, 10 s tumbling windows",
        flush=True,
    )
    broker = start_broker()
    results: list[Result] = []
    try:
        for i, (services, rate) in enumerate(parse_shapes(args.shapes)):
            shape = f"{services}:{rate:g}"
            kafka = KafkaSettings(bootstrap=broker.address, topic=f"bytewax-{i}")
            t = time.monotonic()
            summary = produce_shape(kafka, services, rate, args.events)
            print(
                f"shape {shape}: produced {summary.events:,} events in {summary.records:,} "
                f"records in {time.monotonic() - t:.1f}s",
                flush=True,
            )
            for workers in (int(w) for w in args.workers.split(",")):
                b0 = cpu_s(broker.proc.pid)
                stats, wall = run_bytewax(broker.address, kafka.topic, workers, args)
                kind = "thread" if args.threads and workers > 1 else "process"
                plural = ("es" if kind == "process" else "s") if workers > 1 else ""
                label = f"{workers} {kind}{plural}"
                broker_s = cpu_s(broker.proc.pid) - b0
                r = Result(shape, label, summary.events, stats, wall, broker_s)
                results.append(r)
                print(r.line(), flush=True)
    finally:
        broker.stop()
    print(f"{'shape':<12} {'workers':>11} {'records/s':>10} {'wall s':>7} {'CPU s':>6} {'late':>6}")
    for r in results:
        print(
            f"{r.shape:<12} {r.workers:>11} {r.stats['records'] / r.wall_s:>10,.0f} "
            f"{r.wall_s:>7.1f} {r.stats['cpu']:>6.1f} {r.stats['late']:>6,}"
        )


if __name__ == "__main__":
    main()
