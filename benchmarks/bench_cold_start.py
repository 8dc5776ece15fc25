"""A fresh job beside a warm one: how far a new process's first batches are from warm speed.

    .venv/bin/python benchmarks/bench_cold_start.py [--services 20] [--rate 1333]
        [--events 400000] [--per-trigger 100000] [--fresh 2] [--master local[2]]

What a user meets after a deploy or a restart: the job is a new process (a new JVM, new Python
workers, new state workers, nothing compiled yet), and its first batches are the ones a team
waits on. The topic is a `bench_groups.py` shape (`--events` seeded events of `--services`
equal services at `--rate` events per second of event time: the defaults are its "20 services
over 5 minutes"). Starts its own broker (Tansu) and redis-server, then:

  * fresh, `--fresh` times: `python -m cli.main job ... --trigger available-now
    --starting-offsets earliest --max-records-per-trigger N` as a user starts it, a new process
    each time, on a new checkpoint and Redis database, until it drains the topic and exits. Its
    batches come from the job's own history in Redis (`read_batches`: records and
    `batch_duration_ms`): the first batch, and all of them (records / summed batch durations).
    Also the process's wall time from its start to its exit (the JVM's start included);
  * warm: the same job in this process's SparkSession (`jobs.pipeline.run_job`, as
    `bench_job.py` runs it), twice; the second run's batches after its first (its JVM, JIT and
    workers warm) give the warm speed.

Target (not asserted): a fresh job's batches, its first one included, within 1.5x of the warm
speed (warm records/s / fresh records/s <= 1.5). Prints the machine, a line per run and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from benchmarks.bench_freshness import job_argv, start_job  # noqa: E402
from benchmarks.bench_groups import produce_shape  # noqa: E402
from benchmarks.bench_job import machine, throughput  # noqa: E402
from cli.local.services import start_broker, start_redis  # noqa: E402
from jobs.pipeline import run_job  # noqa: E402
from jobs.runtime.session import build_session  # noqa: E402
from jobs.summary.read_task import EventDataSource  # noqa: E402
from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings  # noqa: E402
from tidegauge.core.store import Keys, read_batches  # noqa: E402

PREFIX = "tg"  # bench_freshness.job_argv's --redis-prefix


def fresh_run(
    kafka: KafkaSettings, url: str, tmp: Path, n: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One `tidegauge job` process draining the topic: its batches' figures and its wall time."""
    argv = job_argv(
        kafka,
        url,
        tmp / f"fresh-{n}",
        "available-now",
        args.master,
        "earliest",
        args.services,
        [f"--max-records-per-trigger={args.per_trigger}"],
    )
    started = time.monotonic()
    job = start_job(argv, tmp / f"fresh-{n}.log")
    try:
        job.proc.wait(args.timeout)
    except Exception:
        job.stop()
        raise
    wall = time.monotonic() - started
    if job.proc.returncode != 0:
        raise SystemExit(job.exit_text())
    batches = [
        b
        for b in read_batches(redis.Redis.from_url(url), Keys(PREFIX))
        if int(b.get("input_rows") or 0)
    ]
    if not batches:
        raise SystemExit(f"fresh run {n}: the job wrote no batch with records")
    records = [int(b["input_rows"]) for b in batches]
    ms = [float(b["batch_duration_ms"]) for b in batches]
    return {
        "first_ms": ms[0],
        "first_rate": records[0] / ms[0] * 1000,
        "rate": sum(records) / sum(ms) * 1000,
        "later_rate": sum(records[1:]) / sum(ms[1:]) * 1000 if len(ms) > 1 else float("nan"),
        "batches": len(batches),
        "records": sum(records),
        "wall_s": wall,
        "first_phases": ", ".join(
            f"{k} {v:,}"
            for k, v in sorted(batches[0]["durations_ms"].items(), key=lambda kv: -kv[1])[:4]
        ),
    }


def warm_rate(
    kafka: KafkaSettings, redis_address: str, tmp: Path, args: argparse.Namespace
) -> float:
    """The job's records/s in a warm SparkSession: the second of two runs, after its first batch."""
    spark = build_session(args.master)
    spark.dataSource.register(EventDataSource)
    try:
        rates = []
        for rnd in range(2):
            cfg = JobConfig(
                kafka=kafka,
                redis=RedisSettings(url=f"redis://{redis_address}/{10 + rnd}"),
                checkpoint=str(tmp / f"warm-{rnd}"),
                trigger="available-now",
                max_records_per_trigger=args.per_trigger,
                master=args.master,
                max_services=max(JobConfig.max_services, 2 * args.services),
            )
            _, overall, steady = throughput(list(run_job(cfg, spark=spark).recentProgress))
            print(
                f"warm run {rnd}: {overall:,.0f} records/s over all batches, "
                f"{steady:,.0f} without the first",
                flush=True,
            )
            rates.append(steady)
        return rates[-1]
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=20)
    ap.add_argument("--rate", type=float, default=1333.0, help="events per s of event time")
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--per-trigger", type=int, default=100_000)
    ap.add_argument("--fresh", type=int, default=2, help="fresh processes to run (default 2)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a fresh run may take")
    args = ap.parse_args()
    print(f"machine: {machine()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="tg-cold-"))
    broker, redis_server = start_broker(), start_redis()
    try:
        kafka = KafkaSettings(bootstrap=broker.address, topic="cold")
        t = time.monotonic()
        summary = produce_shape(kafka, args.services, args.rate, args.events)
        print(
            f"{args.services} services at {args.rate:g}/s of event time: produced "
            f"{summary.records:,} records in {time.monotonic() - t:.1f}s",
            flush=True,
        )
        fresh = []
        for n in range(args.fresh):
            f = fresh_run(kafka, f"redis://{redis_server.address}/{n}", tmp, n, args)
            print(
                f"fresh run {n}: {f['records']:,.0f} records in {f['batches']:.0f} batches; "
                f"first batch {f['first_ms']:,.0f} ms ({f['first_rate']:,.0f} records/s), "
                f"the rest {f['later_rate']:,.0f}, all {f['rate']:,.0f} records/s; "
                f"process start to exit {f['wall_s']:.1f}s; the first batch's phases (ms): "
                f"{f['first_phases']}",
                flush=True,
            )
            fresh.append(f)
        warm = warm_rate(kafka, redis_server.address, tmp, args)
        rate = statistics.median(f["rate"] for f in fresh)
        first = statistics.median(f["first_rate"] for f in fresh)
        print(
            f"warm {warm:,.0f} records/s; fresh (median of {len(fresh)}): all batches "
            f"{rate:,.0f} records/s, first batch {first:,.0f}\n"
            f"warm / fresh: all batches {warm / rate:.2f}x, first batch {warm / first:.2f}x "
            "(target <= 1.5x)"
        )
    finally:
        redis_server.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
