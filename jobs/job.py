"""`tidegauge job`: Kafka -> parse -> watermark -> per-service windows in state -> Redis.

    tidegauge-kafka source        (jobs/kafka_source.py, offsets in the checkpoint)
      -> mapInArrow(parse)        (jobs/parse.py: event | heartbeat | dead, nothing dropped;
                                   optional clock-skew correction)
      -> withWatermark(event_time, allowed lateness)
      -> + proc_ms (the batch's timestamp), shard (heartbeats copied to every shard)
      -> groupBy(group, shard).applyInPandasWithState    (jobs/aggregate.py)
      -> foreachBatch: one Redis transaction per batch   (jobs/redis_sink.py)

A StreamingQueryListener writes the job's status after every batch (and every idle interval), so
the dashboard can tell a quiet stream from a dead job.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.state import GroupStateTimeout

from jobs.aggregate import OUTPUT_SCHEMA, STATE_SCHEMA, StateConfig, make_state_fn
from jobs.kafka_source import KafkaDataSource, true_end_offsets
from jobs.parse import KIND_DEAD, KIND_EVENT, KIND_HEARTBEAT, make_parser, parsed_schema
from jobs.redis_sink import (
    ArrivalUpdate,
    LateEvent,
    LateUpdate,
    StragglerUpdate,
    WindowUpdate,
    touch_status,
    write_batch,
    write_progress,
)
from jobs.spark import build_session, quiet_task_failures
from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings, redact_url
from tidegauge.core.durations import format_duration, parse_duration
from tidegauge.core.plugins import loaded_plugins
from tidegauge.core.store import DeadLetter, Keys, connect
from tidegauge.core.windows import WindowSpec, advance_watermark, primary_size

__all__ = ["add_arguments", "build_stream", "config_from_args", "run", "run_job", "start_query"]

log = logging.getLogger("tidegauge.job")


def build_stream(spark: SparkSession, cfg: JobConfig) -> DataFrame:
    """The streaming DataFrame whose micro-batches the sink writes (one row per result)."""
    spark.dataSource.register(KafkaDataSource)
    reader = (
        spark.readStream.format(KafkaDataSource.name())
        .option("bootstrap", cfg.kafka.bootstrap)
        .option("topic", cfg.kafka.topic)
        .option("startingOffsets", cfg.starting_offsets)
        .option("checkpoint", cfg.checkpoint)
        .option("controlRedis", cfg.redis.url)
        .option("controlKey", Keys(cfg.redis.prefix).control)
    )
    if cfg.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(cfg.max_records_per_trigger))
    if cfg.trigger == "available-now":
        reader = reader.option("endingOffsets", json.dumps(_current_end(cfg.kafka)))
    raw = reader.load()
    plugins = loaded_plugins()  # executors load the same ones (tidegauge/core/plugins.py)
    parser = make_parser(cfg.correct_clock_skew, plugins)
    parsed = raw.mapInArrow(parser, parsed_schema()[0])  # type: ignore[arg-type]
    watermarked = parsed.withWatermark("event_time", f"{cfg.allowed_lateness_ms} milliseconds")
    n = cfg.state_shards
    kind = F.col("kind")
    # current_timestamp() is the micro-batch's timestamp, fixed for the batch and restored from
    # the offset log on a replay: the processing time of every event of the batch.
    routed = watermarked.withColumn("proc_ms", F.unix_millis(F.current_timestamp())).withColumn(
        "shard",
        F.explode(
            F.when(kind == KIND_HEARTBEAT, F.sequence(F.lit(0), F.lit(n - 1)))
            .when(kind == KIND_EVENT, F.array(F.pmod(F.hash("service"), F.lit(n))))
            .otherwise(F.array(F.lit(0)))
        ),
    )
    routed = routed.withColumn(
        "group", F.when(kind == KIND_DEAD, F.lit(KIND_DEAD)).otherwise(F.lit(KIND_EVENT))
    )
    state_cfg = StateConfig(
        cfg.windows,
        allowed_lateness_ms=cfg.allowed_lateness_ms,
        late_events_max=cfg.late_events_max,
        shards=n,
        plugins=plugins,
    )
    return routed.groupBy("group", "shard").applyInPandasWithState(
        make_state_fn(state_cfg),  # type: ignore[arg-type]
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="update",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )


def _current_end(kafka: KafkaSettings) -> dict[str, int]:
    """Committed end offsets now: what `available-now` processes before it stops."""
    return true_end_offsets(kafka.bootstrap, kafka.topic)


class _BatchWriter:
    """`foreachBatch` callback (driver): collect the batch's small result, write it atomically."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.keys = Keys(cfg.redis.prefix)
        self.primary_ms = primary_size(cfg.windows)
        self._client: redis.Redis | None = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = connect(self.cfg.redis)
        return self._client

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        table = batch.toArrow()
        windows: list[WindowUpdate] = []
        dead: list[DeadLetter] = []
        dead_counts: dict[str, int] = {}
        late: list[LateUpdate] = []
        stragglers: list[StragglerUpdate] = []
        arrivals: list[ArrivalUpdate] = []
        late_events: list[LateEvent] = []
        for row in table.to_pylist():
            kind = row["kind"]
            if kind == "window":
                windows.append(
                    WindowUpdate(
                        row["spec"],
                        row["window_start"],
                        row["service"],
                        json.loads(row["metrics"]),
                        row["agg"],
                    )
                )
            elif kind == "late":
                late.append(
                    LateUpdate(
                        row["spec"], row["window_start"], row["service"], row["count"], row["agg"]
                    )
                )
            elif kind == "straggler":
                stragglers.append(
                    StragglerUpdate(row["spec"], row["window_start"], row["service"], row["count"])
                )
            elif kind == "arrivals":
                arrivals.append(
                    ArrivalUpdate(
                        row["spec"],
                        row["window_start"],
                        row["service"],
                        row["count"],
                        json.loads(row["metrics"]),
                    )
                )
            elif kind == "late_event":
                late_events.append(
                    LateEvent(
                        service=row["service"],
                        partition=row["partition"],
                        offset=row["offset"],
                        kafka_timestamp=row["kafka_ms"],
                        window_start=row["window_start"],
                        details=json.loads(row["metrics"]),
                        batch_id=batch_id,
                    )
                )
            elif kind == "dead":
                dead.append(
                    DeadLetter(
                        partition=row["partition"],
                        offset=row["offset"],
                        kafka_timestamp=row["kafka_ms"] or 0,
                        reason=row["reason"],
                        detail=row["detail"],
                        raw=row["raw"] or b"",
                        raw_size=row["raw_size"] or 0,
                        batch_id=batch_id,
                    )
                )
            elif kind == "dead_count":
                dead_counts[row["reason"]] = row["count"]
        _retry(
            lambda: write_batch(
                self._redis(),
                self.keys,
                batch_id,
                windows,
                dead,
                dead_counts,
                dead_letter_max=self.cfg.dead_letter_max,
                late=late,
                stragglers=stragglers,
                arrivals=arrivals,
                arrival_window_ms=self.primary_ms,
                late_events=late_events,
                late_events_max=self.cfg.late_events_max,
            ),
            what=f"writing batch {batch_id} to Redis",
        )
        if windows or dead or late:
            log.info(
                "batch %d: %d window updates, %d late rows, %d stragglers, %d dead letters",
                batch_id,
                len(windows),
                sum(w.count for w in late),
                sum(s.count for s in stragglers),
                len(dead),
            )


def _retry(fn: Callable[[], None], what: str, timeout_s: float = 60.0) -> None:
    """Retry transient Redis failures with backoff; give up (and fail the batch) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        try:
            fn()
            return
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if time.monotonic() + delay > deadline:
                raise RuntimeError(f"{what}: Redis unreachable for {timeout_s:.0f}s: {e}") from e
            log.warning("%s failed (%s); retrying in %.1fs", what, e, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _iso_ms(text: str | None) -> int | None:
    if not text:
        return None
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def progress_summary(progress: Mapping[str, Any], allowed_lateness_ms: int) -> dict[str, Any]:
    """The status document for one StreamingQueryProgress, given as its JSON dict (pure).

    Reads the JSON form because PySpark's SourceProgress objects turn offsets into Python reprs.
    """
    sources = progress.get("sources") or [{}]
    src = sources[0]

    def offsets(value: Any) -> dict[str, int]:
        return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}

    event_time = progress.get("eventTime") or {}
    in_force = _iso_ms(event_time.get("watermark")) or 0
    seen_max = _iso_ms(event_time.get("max"))
    # The watermark after this batch is what the next batch will use.
    after = advance_watermark(in_force, [] if seen_max is None else [seen_max], allowed_lateness_ms)
    return {
        "batch_id": progress["batchId"],
        "batch_time": _iso_ms(progress.get("timestamp")) or 0,
        "status_time": round(time.time() * 1000),
        "watermark": after,
        "watermark_in_force": in_force,
        "max_event_time": seen_max,
        "input_rows": progress.get("numInputRows", 0),
        "input_rows_per_s": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_s": _finite(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": progress.get("batchDuration", 0),
        "durations_ms": progress.get("durationMs") or {},
        "start_offsets": offsets(src.get("startOffset")),
        "offsets": offsets(src.get("endOffset")),
        "latest_offsets": offsets(src.get("latestOffset")),
        "state_rows": sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators", [])),
        # Spark's own count of rows its stateful operators dropped as late (docs/time.md: 0 for
        # this job, which counts late rows itself instead of letting Spark drop them).
        "spark_rows_dropped_by_watermark": sum(
            op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", [])
        ),
        "query_id": str(progress.get("id")),
    }


def _finite(x: Any) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return 0.0
    return f if f == f and f not in (float("inf"), float("-inf")) else 0.0


@dataclass(frozen=True)
class _ProgressEvent:
    progress: Any


class _StatusListener(StreamingQueryListener):
    """Driver-side listener: job status to Redis after every batch and every idle interval."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.keys = Keys(cfg.redis.prefix)
        self.client = connect(cfg.redis)
        self.query_ids: set[str] = set()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to record until the first batch."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """Write the status of the batch that just finished."""
        p = json.loads(event.progress.json)
        if self.query_ids and str(p.get("id")) not in self.query_ids:
            return
        try:
            summary = progress_summary(p, self.cfg.allowed_lateness_ms)
            # How often the job reports (a batch per trigger, else an idle event at least every
            # second): the dashboard calls the job stale after 3 of these without a word.
            summary["report_interval_ms"] = max(self.cfg.trigger_interval_ms, 1000)
            summary["allowed_lateness_ms"] = self.cfg.allowed_lateness_ms
            write_progress(self.client, self.keys, summary)
        except redis.RedisError as e:  # status is informational; never kill the query for it
            log.warning("could not write status: %s", e)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """No new data: say we are alive, so a quiet stream does not look like a dead job."""
        if self.query_ids and str(event.id) not in self.query_ids:
            return
        try:
            touch_status(self.client, self.keys, round(time.time() * 1000))
        except redis.RedisError as e:
            log.warning("could not write status: %s", e)

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """Nothing to record."""


def start_query(spark: SparkSession, cfg: JobConfig) -> tuple[StreamingQuery, _StatusListener]:
    """Start the streaming query and its status listener; returns at once."""
    listener = _StatusListener(cfg)
    spark.streams.addListener(listener)
    spark.conf.set(
        "spark.sql.streaming.noDataProgressEventInterval", str(max(cfg.trigger_interval_ms, 1000))
    )
    writer = (
        build_stream(spark, cfg)
        .writeStream.outputMode("update")
        .queryName("tidegauge")
        .foreachBatch(_BatchWriter(cfg))
        .option("checkpointLocation", cfg.checkpoint)
    )
    interval = 0 if cfg.trigger == "available-now" else cfg.trigger_interval_ms
    query = writer.trigger(processingTime=f"{interval} milliseconds").start()
    listener.query_ids.add(str(query.id))
    return query, listener


def run_job(
    cfg: JobConfig, spark: SparkSession | None = None, stop: Callable[[], bool] | None = None
) -> StreamingQuery:
    """Run the job until `available-now` has drained the topic, `stop()` says so, or it fails."""
    spark = spark or build_session(cfg.master, shuffle_partitions=cfg.shuffle_partitions)
    query, listener = start_query(spark, cfg)
    try:
        if cfg.trigger == "available-now":
            # Offsets were capped at the topic's end when the query started (endingOffsets), so
            # "all available" is finite: process it in max-records batches, then stop.
            query.processAllAvailable()
        else:
            while query.isActive and not (stop and stop()):
                query.awaitTermination(1)
    finally:
        if query.isActive:
            query.stop()
        # Listener events are delivered asynchronously; make sure the last batches are recorded.
        spark.streams.removeListener(listener)
        for progress in query.recentProgress:
            listener.onQueryProgress(_ProgressEvent(progress))
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    return query


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge job` (names are part of the contract with the acceptance tests)."""
    p.add_argument("--bootstrap", help="Kafka HOST:PORT (env TIDEGAUGE_KAFKA_BOOTSTRAP)")
    p.add_argument("--topic", help="topic to read (env TIDEGAUGE_TOPIC, default events)")
    p.add_argument("--redis", help="Redis URL (env TIDEGAUGE_REDIS_URL)")
    p.add_argument("--redis-prefix", default="tg", help="key prefix in Redis (default tg)")
    p.add_argument("--checkpoint", required=True, help="directory for Spark offsets and state")
    p.add_argument(
        "--window",
        action="append",
        metavar="SIZE[/SLIDE]",
        help="event-time window: 10s tumbling, 60s/10s hopping; repeat for several (default 10s)",
    )
    p.add_argument("--slide", help="slide of the (single) --window: makes it hopping")
    p.add_argument(
        "--session-gap",
        help="also track per-user sessions closed after this much silence (e.g. 30s); "
        "sessions are reported per smallest tumbling window of their last event",
    )
    p.add_argument("--allowed-lateness", default="30s", help="watermark delay (default 30s)")
    p.add_argument(
        "--trigger",
        default="1s",
        help="processing-time interval (default 1s) or available-now (drain the topic, exit)",
    )
    p.add_argument("--starting-offsets", choices=["earliest", "latest"], default="earliest")
    p.add_argument("--max-records-per-trigger", type=int, default=None)
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument(
        "--dead-letter-max", type=int, default=100_000, help="dead letters kept (newest)"
    )
    p.add_argument(
        "--late-events-max",
        type=int,
        default=10_000,
        help="late events kept in the late store (newest by broker time), and at most this many "
        "per state shard and batch (default 10000)",
    )
    p.add_argument(
        "--correct-clock-skew",
        action="store_true",
        help="estimate each device's clock offset (broker receive time - sent_time) and move "
        "event times onto the broker's clock before windowing (off by default; docs/time.md)",
    )
    p.add_argument(
        "--state-shards",
        type=int,
        default=4,
        help="groups the services are hashed onto in Spark state (default 4; fixed for a "
        "checkpoint)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log every batch")


def _window_specs(
    texts: list[str], slide: str | None, session_gap: str | None
) -> tuple[WindowSpec, ...]:
    specs = [WindowSpec.parse(t) for t in texts]
    if slide is not None:
        if len(specs) != 1 or specs[0].kind != "tumbling":
            raise ValueError("--slide goes with exactly one --window SIZE (or write SIZE/SLIDE)")
        specs = [WindowSpec(specs[0].size_ms, parse_duration(slide))]
    if session_gap is not None:
        gap = parse_duration(session_gap)
        if gap <= 0:
            raise ValueError("--session-gap must be positive")
        bucket = min((s.size_ms for s in specs if s.kind == "tumbling"), default=specs[0].slide_ms)
        specs.append(WindowSpec.session(gap, bucket))
    return tuple(specs)


def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Build the one validated JobConfig from flags (and environment for connection settings)."""
    available_now = args.trigger.strip().lower() in ("available-now", "availablenow", "once")
    return JobConfig(
        kafka=KafkaSettings.from_env(bootstrap=args.bootstrap, topic=args.topic),
        redis=RedisSettings.from_env(url=args.redis, prefix=args.redis_prefix),
        checkpoint=args.checkpoint,
        windows=_window_specs(args.window or ["10s"], args.slide, args.session_gap),
        allowed_lateness_ms=parse_duration(args.allowed_lateness),
        trigger="available-now" if available_now else "processing-time",
        trigger_interval_ms=1000 if available_now else parse_duration(args.trigger),
        starting_offsets=args.starting_offsets,
        max_records_per_trigger=args.max_records_per_trigger,
        master=args.master,
        shuffle_partitions=args.shuffle_partitions,
        dead_letter_max=args.dead_letter_max,
        correct_clock_skew=args.correct_clock_skew,
        late_events_max=args.late_events_max,
        state_shards=args.state_shards,
    )


def _window_text(w: WindowSpec) -> str:
    if w.kind == "session":
        return f"sessions (gap {format_duration(w.gap_ms)})"
    if w.kind == "tumbling":
        return format_duration(w.size_ms)
    return f"{format_duration(w.size_ms)}/{format_duration(w.slide_ms)}"


def failure_reason(text: str) -> str:
    """The one line worth printing of a failed query's text (Spark wraps errors in tracebacks).

    A `SourceError` raised on an executor (an undecodable batch, an offset gone) is found in the
    Python traceback Spark embeds and returned alone; anything else is the text's first line.
    """
    found = re.findall(r"SourceError: (.+)", text)
    if found:
        return str(found[-1]).strip()
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def _trigger_text(cfg: JobConfig) -> str:
    if cfg.trigger == "available-now":
        return cfg.trigger
    return format_duration(cfg.trigger_interval_ms)


def run(args: argparse.Namespace) -> int:
    """CLI entry: validate, connect, run until done or Ctrl-C/SIGTERM."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    log.setLevel(logging.INFO)
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not args.verbose:
        # py4j logs a failed foreachBatch call's traceback; the query's failure says it once.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    try:
        cfg = config_from_args(args)
    except ValueError as e:
        print(f"tidegauge job: {e}", file=sys.stderr)
        return 2
    try:
        connect(cfg.redis).ping()
    except redis.RedisError as e:
        print(
            f"tidegauge job: cannot reach Redis at {redact_url(cfg.redis.url)}: {e}",
            file=sys.stderr,
        )
        return 1
    stopping = {"flag": False}

    def _stop(signum: int, frame: Any) -> None:
        stopping["flag"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(
        f"tidegauge job: {cfg.kafka.topic}@{cfg.kafka.bootstrap} -> {redact_url(cfg.redis.url)}; "
        f"windows {', '.join(_window_text(w) for w in cfg.windows)}, allowed lateness "
        f"{format_duration(cfg.allowed_lateness_ms)}, trigger "
        f"{_trigger_text(cfg)}"
        f"{', clock-skew correction on' if cfg.correct_clock_skew else ''}",
        flush=True,
    )
    started = time.monotonic()
    try:
        spark = build_session(cfg.master, shuffle_partitions=cfg.shuffle_partitions)
        if not args.verbose:
            quiet_task_failures(spark)
        query = run_job(cfg, spark, stop=lambda: stopping["flag"])
    except Exception as e:  # a clear one-line reason, not a JVM stack trace
        print(f"tidegauge job: failed: {failure_reason(str(e))}", file=sys.stderr)
        return 1
    last = query.lastProgress
    rows = sum(p.numInputRows for p in query.recentProgress)
    wm = last.eventTime.get("watermark") if last else None
    print(
        f"tidegauge job: stopped after {time.monotonic() - started:.1f}s; last batch "
        f"{last.batchId if last else '-'}, {rows} rows in recent batches, watermark {wm or '-'}",
        flush=True,
    )
    return 0
