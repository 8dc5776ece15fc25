"""The cost of one (window, group) update: the job beside Spark's built-ins as groups grow.

    .venv/bin/python benchmarks/bench_groups.py [--shapes 10:10000,100:2000,1000:2000,2000:500]
        [--events 300000] [--per-trigger 100000] [--rounds 1] [--contenders baseline,tidegauge]
        [--phases]

A shape `SERVICES:RATE` is a topic of `--events` seeded events (the generator of `tidegauge
produce`, fast pace, 3 partitions, 5 % out of order, heartbeats) from SERVICES services of equal
weight at RATE events per second of event time. Every shape has the same records per batch
(`--per-trigger`, `available-now`); only the event time a batch spans (per-trigger / RATE
seconds) and so the (10 s window, service) groups it touches change: about SERVICES x
(span / 10 s + 1). The defaults go from ~20 groups per batch to ~40,000.

For each shape the contenders run alternated, each in a process and SparkSession of its own,
started once: the built-ins' `groupBy(window, service)` with count, `percentile_approx` and
`approx_count_distinct` (as `bench_job.py` runs them) with HotSpot's default compilers, and
`jobs.pipeline.run_job` with its Redis sink and the job's JVM settings. Not one session for
both: a JVM's JIT compiles for minutes, and one contender's compiling took the cores from the
other's batches (the built-ins' generated code cost 14.5 s of compiler CPU during their first
round of 1,000 services, which the job's next round then shared); and each round starts once the
machine is quiet (at most 10 % busy, 30 s at most: a JVM goes on compiling after its round).
Per contender:
  * batch ms: median duration of the batches after the first one with records (which starts the
    Python workers);
  * groups/batch: (window, service) updates per batch, median over the same batches (the job:
    window updates handed to its sink, `bench_curves.SinkTimer`; the built-ins: rows of their
    update-mode output);
  * us/group: batch ms / groups per batch: what one group costs when groups dominate;
  * slope: the marginal cost of a group between this shape and the one before it (us per extra
    group): the figure the groups curve is about.
Prints the machine, a line per run and a table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

import jobs.pipeline  # noqa: E402
from benchmarks.bench_curves import SinkTimer  # noqa: E402
from benchmarks.bench_job import (  # noqa: E402
    _batch_of,
    _wall_s,
    machine,
    new_stages,
    records_of,
    run_baseline,
)
from cli.local.services import start_broker, start_redis  # noqa: E402
from jobs.runtime.session import FULL_JIT, build_session  # noqa: E402
from jobs.summary.read_task import EventDataSource  # noqa: E402
from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings  # noqa: E402
from tidegauge.traffic.config import GeneratorConfig  # noqa: E402
from tidegauge.traffic.producer import produce  # noqa: E402
from tidegauge.traffic.topics import ensure_topic  # noqa: E402

START_MS = 1_780_000_000_000


@dataclass
class Run:
    """One contender on one shape."""

    shape: str
    contender: str
    batch_ms: float
    groups: float
    records: float

    @property
    def us_per_group(self) -> float:
        """Batch time per (window, group) update."""
        return self.batch_ms * 1000 / self.groups if self.groups else float("nan")


def parse_shapes(text: str) -> list[tuple[int, float]]:
    """'10:10000,1000:2000' -> [(services, events per second of event time), ...]."""
    out = []
    for part in text.split(","):
        services, _, rate = part.partition(":")
        out.append((int(services), float(rate)))
    return out


def produce_shape(kafka: KafkaSettings, services: int, rate: float, events: int) -> Any:
    """A shape's topic (3 partitions): `events` seeded events of `services` equal services.

    The generator of `tidegauge produce` at a fast pace, `rate` events per second of event
    time, 5 % out of order, heartbeats; the same records for every contender (and
    bench_bytewax.py). Returns the producer's summary.
    """
    ensure_topic(kafka, 3)
    return produce(
        GeneratorConfig(
            seed=1,
            rate=rate,
            count=events,
            pace="fast",
            start_time_ms=START_MS,
            services=tuple((f"s{k:05d}", 1.0) for k in range(services)),
            out_of_order_fraction=0.05,
            heartbeat_interval_ms=1000,
        ),
        kafka,
    )


def steady(progress: list[Any]) -> list[Any]:
    """The batches with records, without the first (it starts the query's Python workers)."""
    return [p for p in progress if records_of(p)][1:]


def stages_by_batch(stages: list[dict[str, Any]]) -> dict[int, str]:
    """Per micro-batch: each Spark stage's wall and summed task time, "wall/tasks s"."""
    out: dict[int, list[str]] = {}
    for st in stages:
        batch = _batch_of(st)
        if batch is not None and st["numTasks"]:
            out.setdefault(batch, []).append(
                f"{st['numTasks']}x {_wall_s(st):.2f}/{st['executorRunTime'] / 1000:.2f}"
            )
    return {b: " + ".join(parts) for b, parts in out.items()}


def measure(shape: str, name: str, progress: list[Any], groups_per_batch: list[int]) -> Run:
    """A run's medians over its steady batches."""
    batches = steady(progress)
    groups = [g for g in groups_per_batch if g][1:] or [0]
    return Run(
        shape,
        name,
        statistics.median(p.batchDuration for p in batches) if batches else float("nan"),
        statistics.median(groups),
        statistics.median(records_of(p) for p in batches) if batches else 0,
    )


def table(runs: list[Run], contenders: list[str]) -> str:
    """Per shape and contender: batch ms, groups per batch, us per group and the slope."""
    lines = [
        f"{'shape':<12} {'contender':<10} {'batch ms':>9} {'groups/batch':>13} "
        f"{'us/group':>9} {'slope us':>9}"
    ]
    for name in contenders:
        prev: Run | None = None
        for r in [r for r in runs if r.contender == name]:
            slope = float("nan")
            if prev is not None and r.groups != prev.groups:
                slope = (r.batch_ms - prev.batch_ms) * 1000 / (r.groups - prev.groups)
            lines.append(
                f"{r.shape:<12} {name:<10} {r.batch_ms:>9,.0f} {r.groups:>13,.0f} "
                f"{r.us_per_group:>9,.0f} {slope:>9,.0f}"
            )
            prev = r
    return "\n".join(lines)


def run_one(
    spark: Any, name: str, req: dict[str, Any], args: argparse.Namespace, seen: set[int]
) -> tuple[Run, list[str]]:
    """One contender's run over one shape's topic; with `--phases`, a line per batch too."""
    kafka = KafkaSettings(bootstrap=req["bootstrap"], topic=req["topic"])
    ck = req["checkpoint"]
    spark.conf.set("spark.sql.codegen.wholeStage", "true" if name == "baseline" else "false")
    if name == "baseline":
        rows: list[int] = []
        rows_ms: list[float] = []
        progress = run_baseline(spark, kafka, args.per_trigger, ck, rows.append)
    else:
        url = req["redis"]
        redis.Redis.from_url(url).flushdb()  # no windows of an earlier run
        cfg = JobConfig(
            kafka=kafka,
            redis=RedisSettings(url=url),
            checkpoint=ck,
            trigger="available-now",
            max_records_per_trigger=args.per_trigger,
            master=args.master,
            state_shards=args.state_shards,
            state_workers=args.state_workers,
            # every service its own group: no names counted under "(other)"
            max_services=max(JobConfig.max_services, 2 * req["services"]),
        )
        timer = SinkTimer()
        with timer.installed():
            progress = list(jobs.pipeline.run_job(cfg, spark=spark).recentProgress)
        rows = [n for n, _ in timer.calls]
        rows_ms = [ms for n, ms in timer.calls if n]
    run = measure(req["shape"], name, progress, rows)
    lines = []
    if args.phases:
        stages = stages_by_batch(new_stages(spark, seen))
        for k, p in enumerate(steady(progress)):
            phases = {k: v for k, v in p.durationMs.items() if v}
            state = sum(op.memoryUsedBytes for op in p.stateOperators)
            ops = "; ".join(
                f"update {op.allUpdatesTimeMs} ms, commit {op.commitTimeMs} ms, "
                f"remove {op.allRemovalsTimeMs} ms"
                for op in p.stateOperators
            )
            sink = f", sink {rows_ms[k + 1]:.0f} ms" if k + 1 < len(rows_ms) else ""
            lines.append(
                f"    batch {p.batchId} {name}: {phases}, state {state / 1e6:.1f} MB ({ops}); "
                f"stages {stages.get(p.batchId, '-')}{sink}"
            )
    return run, lines


def serve(args: argparse.Namespace) -> None:
    """A contender's own process (`--serve NAME`): its SparkSession, a run per request line.

    Reads one JSON request per line on stdin and answers each with one JSON line on stdout;
    everything else it prints goes to stderr.
    """
    answer = sys.stdout
    sys.stdout = sys.stderr
    # each with its own JVM settings: the job's (C1 only), the built-ins HotSpot's defaults,
    # whose optimising compiler their generated code wants
    spark = build_session(
        args.master, shuffle_partitions=2, conf=[FULL_JIT] if args.serve == "baseline" else ()
    )
    spark.dataSource.register(EventDataSource)
    seen: set[int] = set()  # Spark stages already reported (--phases)
    for line in sys.stdin:
        run, lines = run_one(spark, args.serve, json.loads(line), args, seen)
        answer.write(json.dumps({"run": dataclasses.asdict(run), "lines": lines}) + "\n")
        answer.flush()
    spark.stop()


class Contender:
    """A contender's process (`serve`), started once and asked for one run at a time."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        argv = [sys.executable, __file__, "--serve", name, "--master", args.master]
        argv += ["--per-trigger", str(args.per_trigger), "--state-shards", str(args.state_shards)]
        if args.state_workers is not None:
            argv += ["--state-workers", str(args.state_workers)]
        if args.phases:
            argv.append("--phases")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, request: dict[str, Any]) -> tuple[Run, list[str]]:
        """One run, as `run_one` in the contender's process."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: its process ended (exit {self.proc.wait()})")
        got = json.loads(line)
        return Run(**got["run"]), got["lines"]

    def close(self) -> None:
        """End the process (its session stops when its stdin closes)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def machine_busy(interval_s: float = 0.5) -> float:
    """The machine's busy share of all its cores over `interval_s` (/proc/stat)."""

    def times() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = times()
    time.sleep(interval_s)
    busy1, total1 = times()
    return (busy1 - busy0) / max(total1 - total0, 1)


def wait_quiet(limit: float = 0.1, longest_s: float = 30.0) -> float:
    """Wait until the machine is at most `limit` busy (the other JVM's compiler catching up
    after its round); returns the seconds waited (at most `longest_s`)."""
    started = time.monotonic()
    while time.monotonic() - started < longest_s and machine_busy() > limit:
        pass
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default="10:10000,100:2000,1000:2000,2000:500")
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--per-trigger", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--contenders", default="baseline,tidegauge")
    ap.add_argument(
        "--state-shards", type=int, default=JobConfig.state_shards, help="the job's (default 4)"
    )
    ap.add_argument(
        "--state-workers",
        type=int,
        default=None,
        help="the job's processes for the state shards (default: one per core)",
    )
    ap.add_argument(
        "--phases",
        action="store_true",
        help="print each batch's phases (Spark's durationMs), state operator times and stages",
    )
    ap.add_argument("--serve", help=argparse.SUPPRESS)  # a contender's own process
    args = ap.parse_args()
    if args.serve:
        serve(args)
        return
    print(f"machine: {machine()}", flush=True)
    contenders = args.contenders.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="tg-groups-"))
    broker, redis_server = start_broker(), start_redis()
    runs: list[Run] = []
    running: list[Contender] = []
    try:
        running = [Contender(name, args) for name in contenders]
        db = 0
        for i, (services, rate) in enumerate(parse_shapes(args.shapes)):
            shape = f"{services}:{rate:g}"
            kafka = KafkaSettings(bootstrap=broker.address, topic=f"groups-{i}")
            t = time.monotonic()
            summary = produce_shape(kafka, services, rate, args.events)
            print(
                f"shape {shape}: produced {summary.records:,} records in "
                f"{time.monotonic() - t:.1f}s",
                flush=True,
            )
            for rnd in range(args.rounds):
                for contender in running:
                    name = contender.name
                    wait_quiet()
                    t = time.monotonic()
                    run, lines = contender.run(
                        {
                            "shape": shape,
                            "services": services,
                            "bootstrap": kafka.bootstrap,
                            "topic": kafka.topic,
                            "checkpoint": str(tmp / f"{i}-{name}-{rnd}"),
                            "redis": f"redis://{redis_server.address}/{db % 16}",
                        }
                    )
                    db += 1
                    for line in lines:
                        print(line, flush=True)
                    runs.append(run)
                    print(
                        f"  round {rnd} {name:<10} {run.batch_ms:,.0f} ms per batch of "
                        f"{run.records:,.0f} records, {run.groups:,.0f} groups: "
                        f"{run.us_per_group:,.0f} us per group "
                        f"({time.monotonic() - t:.0f} s in all)",
                        flush=True,
                    )
        best: dict[tuple[str, str], Run] = {}
        for r in runs:  # each (shape, contender)'s fastest round
            key = (r.shape, r.contender)
            if key not in best or r.batch_ms < best[key].batch_ms:
                best[key] = r
        print(table(list(best.values()), contenders))
    finally:
        for contender in running:
            contender.close()
        redis_server.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
