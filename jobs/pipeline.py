"""The streaming query of `tidegauge job`: Kafka -> summaries -> watermark -> windows -> Redis.

    tidegauge-summaries source    (jobs/event_source.py: the Kafka source of jobs/kafka_source.py,
                                   offsets in the checkpoint, whose read task parses each chunk
                                   with jobs/parse.py (event | heartbeat | dead, nothing
                                   dropped; optional clock-skew correction) and summarises it
                                   per service against the batch's watermark, jobs/deltas.py)
      -> withWatermark(event_time, allowed lateness)
      -> + shard (heartbeat summaries copied to every shard)
      -> groupBy(group, shard).applyInPandasWithState    (jobs/aggregate.py)
      -> foreachBatch: one Redis transaction per batch   (jobs/redis_sink.py), then the
                       batch's freshness (tidegauge/core/freshness.py)

A StreamingQueryListener (jobs/status.py) writes the job's status after every batch (and every
idle interval), so the dashboard can tell a quiet stream from a dead job. The command line is
jobs/cli.py.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupStateTimeout

from jobs.aggregate import StateConfig, make_state_fn
from jobs.deltas import KIND_DELTA, KIND_TIMES, SUMMARY_SCHEMA
from jobs.event_source import SummaryDataSource, summary_source_options
from jobs.kafka_source import CLIENT_PREFIX, true_end_offsets
from jobs.late_events import batch_members
from jobs.offset_log import clock_of
from jobs.parse import KIND_DEAD, KIND_EVENT, KIND_HEARTBEAT
from jobs.redis_sink import write_batch
from jobs.rollup import BatchTime
from jobs.rows import OUTPUT_SCHEMA, decode_rows
from jobs.spark import build_session
from jobs.state import STATE_SCHEMA
from jobs.status import Committed, ProgressEvent, StatusListener, where_batches_run
from tidegauge.core.config import JobConfig, KafkaSettings, redact_url
from tidegauge.core.durations import format_duration
from tidegauge.core.events import OVERFLOW_SERVICE
from tidegauge.core.freshness import freshness, merge_times
from tidegauge.core.plugins import loaded_plugins
from tidegauge.core.store import Keys, connect
from tidegauge.core.windows import WindowSpec, primary_size

__all__ = ["build_stream", "run_job", "start_query"]

#: Kafka partitions' ranges share a read task until it holds this many records: one task at
#: low rates (each costs ~80 ms of Python round trips however little it reads), one or more
#: partitions per task at high rates (jobs/kafka_source.py `group_ranges`).
MIN_RECORDS_PER_TASK = 10_000

#: How many recent batches' measurements the batch writer keeps for the status listener.
_COMMITTED_KEPT = 100

log = logging.getLogger("tidegauge.job")


def build_stream(spark: SparkSession, cfg: JobConfig) -> DataFrame:
    """The streaming DataFrame whose micro-batches the sink writes (one row per result)."""
    spark.dataSource.register(SummaryDataSource)
    plugins = loaded_plugins()  # executors load the same ones (tidegauge/core/plugins.py)
    options = summary_source_options(
        cfg.correct_clock_skew,
        cfg.windows,
        cfg.allowed_lateness_ms,
        cfg.late_events_max,
        cfg.dedup,
    )
    reader = (
        spark.readStream.format(SummaryDataSource.name())
        .schema(SUMMARY_SCHEMA)
        .options(**options)
        .option("bootstrap", cfg.kafka.bootstrap)
        .option("topic", cfg.kafka.topic)
        .option("startingOffsets", cfg.starting_offsets)
        .option("checkpoint", cfg.checkpoint)
        .option("minRecordsPerTask", str(MIN_RECORDS_PER_TASK))
        # one wave of equal read tasks, one per core Spark has (jobs/kafka_source.py)
        .option("maxTasks", str(spark.sparkContext.defaultParallelism))
        .option("controlRedis", cfg.redis.url)
        .option("controlKey", Keys(cfg.redis.prefix).control)
    )
    for key, value in cfg.kafka.options:  # client settings, one option each (redactable)
        reader = reader.option(CLIENT_PREFIX + key, value)
    if cfg.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(cfg.max_records_per_trigger))
    if cfg.trigger == "available-now":
        reader = reader.option("endingOffsets", json.dumps(_current_end(cfg.kafka)))
    summaries = reader.load()  # parsed and summarised in the read task (jobs/deltas.py)
    watermarked = summaries.withWatermark("event_time", f"{cfg.allowed_lateness_ms} milliseconds")
    n = cfg.state_shards
    kind = F.col("kind")
    routed = watermarked.withColumn(
        "shard",
        F.explode(
            F.when(kind == KIND_HEARTBEAT, F.sequence(F.lit(0), F.lit(n - 1)))
            .when(kind == KIND_DELTA, F.array(F.pmod(F.hash("service"), F.lit(n))))
            .otherwise(F.array(F.lit(0)))
        ),
    )
    routed = routed.withColumn(
        "group",
        F.when(kind.isin(KIND_DEAD, KIND_TIMES), F.lit(KIND_DEAD)).otherwise(F.lit(KIND_EVENT)),
    )
    state_cfg = StateConfig(
        cfg.windows,
        allowed_lateness_ms=cfg.allowed_lateness_ms,
        late_events_max=cfg.late_events_max,
        shards=n,
        plugins=plugins,
        dedup=cfg.dedup,
        max_services=cfg.max_services,
        service_idle_ms=cfg.service_idle_ms,
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
    return true_end_offsets(kafka.bootstrap, kafka.topic, kafka.options)


class _BatchWriter:
    """`foreachBatch` callback (driver): collect the batch's small result, write it atomically."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.keys = Keys(cfg.redis.prefix)
        self.primary_ms = primary_size(cfg.windows)
        source = cfg.rollup_source_ms
        #: The retention tiers and the spec they roll up (jobs/rollup.py).
        self.retention = cfg.retention.for_source(source)
        self.source = None if source is None else WindowSpec.tumbling(source)
        self._client: redis.Redis | None = None
        #: Batch id -> its records and their freshness, measured when the batch is committed;
        #: the status listener takes them into the batch's history entry.
        self.committed: dict[int, Committed] = {}

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = connect(self.cfg.redis)
        return self._client

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = decode_rows(batch.toArrow().to_pylist(), batch_id)
        late_members = batch_members(rows.late_events, self.cfg.late_events_max, batch_id)
        windows, dead, late, stragglers = rows.windows, rows.dead, rows.late, rows.stragglers
        clock = clock_of(self.cfg.checkpoint, batch_id)
        at = BatchTime(batch_id, clock.watermark_ms, clock.timestamp_ms)
        _retry(
            lambda: write_batch(
                self._redis(),
                self.keys,
                batch_id,
                windows,
                dead,
                rows.dead_counts,
                dead_letter_max=self.cfg.dead_letter_max,
                late=late,
                stragglers=stragglers,
                duplicates=rows.duplicates,
                arrivals=rows.arrivals,
                arrival_window_ms=self.primary_ms,
                late_events=late_members,
                late_events_max=self.cfg.late_events_max,
                retention=self.retention,
                source=self.source,
                at=at,
            ),
            what=f"writing batch {batch_id}",
            budget_ms=self.cfg.sink_retry_ms,
            where=f"Redis at {redact_url(self.cfg.redis.url)}",
        )
        fresh = freshness(merge_times(rows.broker_times), round(time.time() * 1000), batch_id)
        self.committed[batch_id] = Committed(
            rows.records,
            None if fresh is None else fresh.to_dict(),
            rows.duplicate_events,
            rows.overflow_names,
            rows.overflow_events,
            where_batches_run(),
            len(rows.dead),
        )
        if rows.overflow_names:
            log.warning(
                "batch %d: %d service names over --max-services %d; their %d events count "
                "under %r (docs/events.md)",
                batch_id,
                rows.overflow_names,
                self.cfg.max_services,
                rows.overflow_events,
                OVERFLOW_SERVICE,
            )
        for old in [b for b in self.committed if b < batch_id - _COMMITTED_KEPT]:
            del self.committed[old]  # the listener has long written these
        if windows or dead or late:
            log.info(
                "batch %d: %d window updates, %d late rows, %d stragglers, %d duplicates, "
                "%d dead letters",
                batch_id,
                len(windows),
                sum(w.count for w in late),
                sum(s.count for s in stragglers),
                rows.duplicate_events,
                len(dead),
            )


#: What to do when Redis refuses writes at its `maxmemory` (docs/redis.md, "Retention").
FULL_REDIS = (
    "Redis is full: it refuses writes at its maxmemory. Raise maxmemory, or keep less with a "
    "shorter --retention (what each tier takes: docs/redis.md), with maxmemory-policy "
    "noeviction; the job retries meanwhile"
)


class SinkError(RuntimeError):
    """Redis stayed unreachable for the job's whole `--sink-retry-for`: the job stops."""


#: Longest wait between two attempts, and how often a long outage is logged again.
_MAX_DELAY_S = 5.0
_LOG_EVERY_S = 30.0


def _retry(fn: Callable[[], None], what: str, budget_ms: int, where: str = "Redis") -> None:
    """Retry transient Redis failures with back-off; give up (failing the batch) after budget_ms.

    The batch's writes are idempotent (absolute values, per-batch fields), so an attempt that
    reached Redis before its reply was lost does no harm when it is made again.
    """
    started = time.monotonic()
    deadline = started + budget_ms / 1000
    delay, logged, was_full = 0.2, 0.0, False
    while True:
        try:
            fn()
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
            full = isinstance(e, redis.OutOfMemoryError)
            if isinstance(e, redis.ResponseError) and not full:
                raise
            state = "full" if full else "unreachable"
            was_full = full
            why = f"{e}; {FULL_REDIS}" if full else str(e)
            waited = time.monotonic() - started
            if time.monotonic() + delay > deadline:
                raise SinkError(
                    f"{where} {state} for {format_duration(round(waited * 1000))} while "
                    f"{what} ({why}); gave up after --sink-retry-for "
                    f"{format_duration(budget_ms)}. Nothing of the batch is lost: a restart "
                    "resumes from the checkpoint"
                ) from e
            if not logged:
                log.warning(
                    "%s failed: %s %s (%s); retrying with back-off for up to %s (--sink-retry-for)",
                    what,
                    where,
                    state,
                    why,
                    format_duration(budget_ms),
                )
                logged = waited
            elif waited - logged >= _LOG_EVERY_S:
                log.warning("%s: %s still %s after %.0fs (%s)", what, where, state, waited, e)
                logged = waited
            time.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY_S)
            continue
        if logged:
            log.warning(
                "%s: %s %s again after %.0fs; written",
                what,
                where,
                "writable" if was_full else "reachable",
                time.monotonic() - started,
            )
        return


def start_query(spark: SparkSession, cfg: JobConfig) -> tuple[StreamingQuery, StatusListener]:
    """Start the streaming query and its status listener; returns at once."""
    batch_writer = _BatchWriter(cfg)
    listener = StatusListener(cfg, batch_writer.committed)
    spark.streams.addListener(listener)
    spark.conf.set(
        "spark.sql.streaming.noDataProgressEventInterval", str(max(cfg.trigger_interval_ms, 1000))
    )
    # The stateful step's partitions are fixed in a new checkpoint from this setting: set it
    # per query, so a shared session runs every job as `tidegauge job` would.
    spark.conf.set("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
    writer = (
        build_stream(spark, cfg)
        .writeStream.outputMode("update")
        .queryName("tidegauge")
        .foreachBatch(batch_writer)
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
    spark = spark or build_session(
        cfg.master,
        shuffle_partitions=cfg.shuffle_partitions,
        conf=cfg.spark_conf,
        checkpoint=cfg.checkpoint,
    )
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
            listener.onQueryProgress(ProgressEvent(progress))
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    return query
