"""Job throughput: the sketch job vs a baseline of Spark built-ins, same Kafka input, one run.

    .venv/bin/python benchmarks/bench_job.py [--events 300000] [--per-trigger 50000] [--rounds 2]
        [--duplicate-fraction 0.0] [--contenders baseline,tidegauge,tidegauge-sliding,...]
        [--detail] [--stages]

Starts its own broker (Tansu) and redis-server, produces `--events` seeded events once, then runs
in one SparkSession (with HotSpot's default compilers, which the built-ins want: the job alone
stops at C1), alternating for `--rounds`:
  * baseline: the same Kafka source and parse step (jobs/summary/read_task.py), then
    groupBy(window(event_time, 10s), service).agg(count, percentile_approx(latency, 5 quantiles),
    approx_count_distinct(user_id)) with the same watermark, results collected to the driver;
    its read tasks as the job's: one per core (`maxTasks`);
  * tidegauge: `jobs.pipeline.run_job` (t-digest + HLL per pane in state, Redis sink, status),
    de-duplicating by event id as by default; tidegauge-no-dedup: the same with `--no-dedup`.
Both drain the topic in `available-now` mode with the same max records per trigger. Throughput is
Kafka records / sum of batch durations, without the first batch (Python worker start-up), and also
including it. `--stages` adds where a batch's time goes inside Spark (its UI's REST API): the
read stage and the aggregation stage of each contender. Prints the machine and the figures;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_broker, start_redis  # noqa: E402
from jobs.parse.parser import PARSED_SCHEMA  # noqa: E402
from jobs.pipeline import _current_end, run_job  # noqa: E402
from jobs.runtime.session import FULL_JIT, build_session  # noqa: E402
from jobs.summary.read_task import EventDataSource  # noqa: E402
from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings  # noqa: E402
from tidegauge.core.windows import WindowSpec  # noqa: E402
from tidegauge.traffic.config import GeneratorConfig  # noqa: E402
from tidegauge.traffic.producer import produce  # noqa: E402
from tidegauge.traffic.topics import ensure_topic  # noqa: E402


def machine() -> str:
    return describe(("pyspark", "numpy", "kafka-python"))


def records_of(progress: Any) -> int:
    """Kafka records a batch read: its source's end - start offsets, summed over partitions.

    Not `numInputRows`: the job's source yields summary rows, a few per service and chunk
    (jobs/summary/summarise.py), while the baseline's yields a row per record. The topic has no
    transactions, so every offset is a record.
    """
    src = (json.loads(progress.json).get("sources") or [{}])[0]
    start, end = src.get("startOffset") or {}, src.get("endOffset") or {}
    if isinstance(start, str):
        start = json.loads(start)
    if isinstance(end, str):
        end = json.loads(end)
    return sum(int(v) - int(start.get(p, 0)) for p, v in (end or {}).items())


def throughput(progress: list[Any]) -> tuple[int, float, float]:
    """(records, records/s over all batches, records/s without the first data batch)."""
    data = [(p, records_of(p)) for p in progress]
    data = [(p, n) for p, n in data if n]
    rows = sum(n for _, n in data)
    total = sum(p.batchDuration for p in progress) / 1000
    steady = data[1:]
    steady_rows = sum(n for _, n in steady)
    steady_s = sum(p.batchDuration for p, _ in steady) / 1000
    return rows, rows / total if total else 0.0, steady_rows / steady_s if steady_s else 0.0


def print_batches(name: str, progress: list[Any]) -> None:
    """One line per batch with records: how long it took and where (Spark's durationMs)."""
    for p in progress:
        n = records_of(p)
        if not n:
            continue
        d = json.loads(p.json).get("durationMs") or {}
        phases = " ".join(
            f"{k}={v}"
            for k, v in sorted(d.items(), key=lambda kv: -kv[1])
            if k != "triggerExecution"
        )
        print(f"  {name} batch {p.batchId}: {n:,} records in {p.batchDuration} ms ({phases})")


def new_stages(spark: Any, seen: set[int]) -> list[dict[str, Any]]:
    """Completed stages not reported before, from Spark's REST API (the UI must be on)."""
    from urllib.request import urlopen

    ctx = spark.sparkContext
    url = f"{ctx.uiWebUrl}/api/v1/applications/{ctx.applicationId}/stages?status=complete"
    with urlopen(url, timeout=30) as f:  # noqa: S310 (the session's own UI)
        stages = [st for st in json.load(f) if st["stageId"] not in seen]
    seen.update(st["stageId"] for st in stages)
    return sorted(stages, key=lambda st: st["stageId"])


def _batch_of(stage: dict[str, Any]) -> int | None:
    """The micro-batch a stage ran for: Spark's job description ends in "batch = N"."""
    text = stage.get("description") or ""
    at = text.rfind("batch = ")
    return int(text[at + 8 :].split()[0]) if at >= 0 else None


def _wall_s(stage: dict[str, Any]) -> float:
    fmt = "%Y-%m-%dT%H:%M:%S.%f%Z"
    start, end = stage.get("submissionTime"), stage.get("completionTime")
    if not start or not end:
        return float("nan")
    return (datetime.strptime(end, fmt) - datetime.strptime(start, fmt)).total_seconds()


def print_stages(name: str, stages: list[dict[str, Any]]) -> None:
    """Per stage role, medians over the batches after the first.

    Roles: read (the source's stage, writing the shuffle) and aggregate (reading it).
    """
    roles: dict[str, list[dict[str, Any]]] = {"read": [], "aggregate": []}
    for st in stages:
        batch = _batch_of(st)
        if not batch or not st["numTasks"]:
            continue
        if st.get("shuffleReadBytes", 0):
            roles["aggregate"].append(st)
        elif st.get("shuffleWriteBytes", 0):
            roles["read"].append(st)  # (not the sink's collect of a small result)
    mid = statistics.median
    for role, sts in roles.items():
        if sts:
            print(
                f"  {name} {role} stage, median of {len(sts)} batches: "
                f"{mid(st['numTasks'] for st in sts):.0f} tasks, "
                f"wall {mid(_wall_s(st) for st in sts):.2f} s, "
                f"task time {mid(st['executorRunTime'] for st in sts) / 1000:.2f} s, "
                f"shuffle write {mid(st.get('shuffleWriteBytes', 0) for st in sts) / 1e6:.1f} MB"
            )


def run_baseline(
    spark: Any,
    kafka: KafkaSettings,
    per_trigger: int,
    checkpoint: str,
    on_rows: Callable[[int], None] | None = None,
) -> list[Any]:
    """Spark's built-ins over the same source; `on_rows` hears each batch's output row count."""
    events = (
        spark.readStream.format(EventDataSource.name())
        .schema(PARSED_SCHEMA)
        .option("bootstrap", kafka.bootstrap)
        .option("topic", kafka.topic)
        .option("maxRecordsPerTrigger", str(per_trigger))
        .option("endingOffsets", json.dumps(_current_end(kafka)))
        .option("checkpoint", checkpoint)
        .option("minRecordsPerTask", "10000")
        # the job's own setting: one wave of equal read tasks, one per core
        .option("maxTasks", str(spark.sparkContext.defaultParallelism))
        .load()
        .where("kind = 'event'")
    )
    agg = (
        events.withWatermark("event_time", "30 seconds")
        .groupBy(F.window("event_time", "10 seconds"), "service")
        .agg(
            F.count("*").alias("count"),
            F.percentile_approx("latency_ms", [0.5, 0.9, 0.95, 0.99, 0.999]).alias("latency"),
            F.approx_count_distinct("user_id").alias("users"),
        )
    )
    query = (
        agg.writeStream.outputMode("update")
        .foreachBatch(lambda df, _: (on_rows or (lambda n: None))(len(df.collect())))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    query.processAllAvailable()
    query.stop()
    return list(query.recentProgress)


#: Contenders with windows of their own (the others: the job's default, 10 s tumbling).
CONTENDER_WINDOWS = {
    "tidegauge-sliding": (WindowSpec.tumbling(10_000), WindowSpec.sliding(60_000, 10_000)),
    "tidegauge-sliding-1ms": (WindowSpec.tumbling(10_000), WindowSpec.sliding(60_000, 10_000, 1)),
    "tidegauge-hopping": (WindowSpec.tumbling(10_000), WindowSpec(60_000, 10_000)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--per-trigger", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run on a Spark standalone cluster of this many workers started here "
        "(cli/local/cluster.py) instead of --master",
    )
    ap.add_argument("--worker-cores", type=int, default=1, help="cores per worker (1)")
    ap.add_argument("--partitions", type=int, default=3, help="Kafka partitions (3)")
    ap.add_argument("--duplicate-fraction", type=float, default=0.0, help="events sent twice")
    ap.add_argument(
        "--contenders",
        default="baseline,tidegauge",
        help="comma-separated: baseline, tidegauge, tidegauge-no-dedup, tidegauge-hopping "
        "(+ 60s/10s), tidegauge-sliding (+ 60s/sliding), tidegauge-sliding-1ms (@1ms)",
    )
    ap.add_argument(
        "--detail", action="store_true", help="print each batch: records, duration, its phases"
    )
    ap.add_argument(
        "--stages",
        action="store_true",
        help="Spark's UI on: print each contender's read and aggregation stages (median of "
        "the batches after the first: wall time, task time, shuffle bytes)",
    )
    args = ap.parse_args()
    print(f"machine: {machine()}")
    tmp = Path(tempfile.mkdtemp(prefix="tg-bench-"))
    broker, redis_server = start_broker(), start_redis()
    cluster = None
    if args.workers:
        from cli.local.cluster import start_cluster

        cluster = start_cluster(args.workers, tmp / "spark", cores=args.worker_cores)
        args.master = cluster.url
        print(f"cluster: {args.workers} worker(s) of {args.worker_cores} core(s) at {cluster.url}")
    try:
        kafka = KafkaSettings(bootstrap=broker.address, topic="bench")
        ensure_topic(kafka, args.partitions)
        t = time.monotonic()
        gen = GeneratorConfig(
            seed=1,
            rate=2000.0,
            count=args.events,
            pace="fast",
            start_time_ms=1_780_000_000_000,
            out_of_order_fraction=0.05,
            heartbeat_interval_ms=1000,
            duplicate_fraction=args.duplicate_fraction,
            duplicate_other_partition=0.5,
        )
        summary = produce(gen, kafka)
        print(f"produced {summary.records:,} records in {time.monotonic() - t:.1f}s")
        # HotSpot's default compilers for the session both contenders share: the built-ins'
        # generated code wants C2, where the job alone stops at C1 (jobs/runtime/session.py)
        spark = build_session(args.master, shuffle_partitions=2, ui=args.stages, conf=[FULL_JIT])
        seen_stages: set[int] = set()
        spark.dataSource.register(EventDataSource)
        contenders = args.contenders.split(",")
        results: dict[str, list[tuple[int, float, float]]] = {name: [] for name in contenders}
        for rnd in range(args.rounds):
            for name in contenders:
                ck = str(tmp / f"{name}-{rnd}")
                # Each with its own best setting: Spark's default (whole-stage code generation
                # on) for the per-row built-ins, Tidegauge's (off: its JVM sees summaries only).
                spark.conf.set(
                    "spark.sql.codegen.wholeStage", "true" if name == "baseline" else "false"
                )
                if name == "baseline":
                    progress = run_baseline(spark, kafka, args.per_trigger, ck)
                else:
                    cfg = JobConfig(
                        kafka=kafka,
                        redis=RedisSettings(url=f"redis://{redis_server.address}/{rnd}"),
                        checkpoint=ck,
                        trigger="available-now",
                        max_records_per_trigger=args.per_trigger,
                        master=args.master,
                        shuffle_partitions=2,
                        dedup=name != "tidegauge-no-dedup",
                        windows=CONTENDER_WINDOWS.get(name, JobConfig.windows),
                    )
                    progress = list(run_job(cfg, spark=spark).recentProgress)
                if args.detail:
                    print_batches(name, progress)
                if args.stages:
                    print_stages(name, new_stages(spark, seen_stages))
                rows, overall, steady = throughput(progress)
                results[name].append((rows, overall, steady))
                print(
                    f"round {rnd} {name:<18} rows {rows:,}  {overall:,.0f} rows/s overall, "
                    f"{steady:,.0f} rows/s without the first batch"
                )
        best = {k: max(v, key=lambda x: x[2])[2] for k, v in results.items()}
        print("best steady: " + ", ".join(f"{k} {v:,.0f} rows/s" for k, v in best.items()))
        if "baseline" in best and "tidegauge" in best:
            print(f"ratio tidegauge / baseline {best['tidegauge'] / best['baseline']:.2f}")
        spark.stop()
    finally:
        redis_server.stop()
        broker.stop()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
