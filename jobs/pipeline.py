"""The streaming query of `tidegauge job`: Kafka -> summaries -> watermark -> windows -> Redis.

    tidegauge-summaries source    (jobs/summary/read_task.py: the Kafka source of
    jobs/source/kafka_source.py,
                                   offsets in the checkpoint, whose read task parses each chunk
                                   with jobs/parse/parser.py (event | heartbeat | dead, nothing
                                   dropped; optional clock-skew correction) and summarises it
                                   per service against the batch's watermark,
                                   jobs/summary/summarise.py)
      -> withWatermark(event_time, allowed lateness)     (Spark keeps the watermark)
      -> foreachBatch, in the driver:
           the stateful step: each state group's summaries merged into its windows, with the
                              state the batch before left  (jobs/state/step.py, held.py)
           one Redis transaction per batch                 (jobs/sink/redis_sink.py)
           the state as of the batch, into the checkpoint  (jobs/state/held.py)
           the batch's freshness                           (tidegauge/core/freshness.py)

A batch is one Spark stage (the read tasks); what they hand the driver is small (one summary
per chunk and state shard), so no shuffle or state store is needed. A StreamingQueryListener
(jobs/sink/status.py) writes the job's status after every batch (and every idle interval), so
the dashboard can tell a quiet stream from a dead job. The command line is jobs/cli.py.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs.runtime.metrics import JobMetrics
from jobs.runtime.session import build_session
from jobs.runtime.stopping import collect
from jobs.runtime.warmup import warm_up
from jobs.sink.ahead import Ahead, read_ahead
from jobs.sink.catalog import CatalogPublisher
from jobs.sink.footprint import Fitted
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch
from jobs.sink.retry import retry
from jobs.sink.rollup import BatchTime
from jobs.sink.slices import split_rows
from jobs.sink.status import Committed, ProgressEvent, StatusListener, where_batches_run
from jobs.source.kafka_source import CLIENT_PREFIX, true_end_offsets
from jobs.source.offset_log import clock_of
from jobs.state.aggregate import make_state_fn
from jobs.state.held import StateLog
from jobs.state.migrate import migrate_spark_state
from jobs.state.rows import decode_table
from jobs.state.step import DecodedStates, StatePool, apply_state, default_state_workers
from jobs.summary.late_events import batch_members
from jobs.summary.read_task import SummaryDataSource, summary_source_options
from jobs.summary.schema import SUMMARY_SCHEMA
from jobs.summary.settings import ExecutorConfig
from jobs.summary.slots import record
from tidegauge.catalog.topic import CatalogError
from tidegauge.core.config import JobConfig, KafkaSettings, redact_url
from tidegauge.core.events import OVERFLOW_SERVICE
from tidegauge.core.freshness import freshness, merge_times
from tidegauge.core.plugins import loaded_plugins
from tidegauge.core.store import Keys, connect
from tidegauge.core.store.keys import ControlFields
from tidegauge.core.window_aggs import merge_encoded
from tidegauge.core.windows import WindowSpec, primary_size

__all__ = ["build_stream", "run_job", "start_query"]

#: Kafka partitions' ranges share a read task until it holds this many records: one task at
#: low rates (each costs ~80 ms of Python round trips however little it reads), one or more
#: partitions per task at high rates (jobs/source/kafka_source.py `group_ranges`).
MIN_RECORDS_PER_TASK = 10_000

#: How many recent batches' measurements the batch writer keeps for the status listener.
_COMMITTED_KEPT = 100

log = logging.getLogger("tidegauge.job")


def build_stream(spark: SparkSession, cfg: JobConfig) -> DataFrame:
    """The streaming DataFrame whose micro-batches the sink writes (one row per result)."""
    spark.dataSource.register(SummaryDataSource)
    options = summary_source_options(
        cfg.correct_clock_skew,
        cfg.windows,
        cfg.allowed_lateness_ms,
        cfg.late_events_max,
        cfg.dedup,
        cfg.state_shards,
        cfg.max_services,
        None if cfg.record_format.own else cfg.record_format.to_json(),
        cfg.dimensions,
        cfg.dimension_values,
        cfg.catalog_topic,
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
        # one wave of equal read tasks, one per core Spark has (jobs/source/kafka_source.py)
        .option("maxTasks", str(spark.sparkContext.defaultParallelism))
        .option("controlRedis", cfg.redis.url)
        .option("controlKey", Keys(cfg.redis.prefix).control)
        .option("controlField", ControlFields.PAUSE_UNTIL)
    )
    for key, value in cfg.kafka.options:  # client settings, one option each (redactable)
        reader = reader.option(CLIENT_PREFIX + key, value)
    if cfg.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(cfg.max_records_per_trigger))
    if cfg.trigger == "available-now":
        reader = reader.option("endingOffsets", json.dumps(_current_end(cfg.kafka)))
    summaries = reader.load()  # parsed and summarised in the read task (jobs/summary/summarise.py)
    # Spark keeps the watermark (the offset log has each batch's); the stateful step applies it
    # in the driver (jobs/state/step.py)
    return summaries.withWatermark("event_time", f"{cfg.allowed_lateness_ms} milliseconds")


def executor_config(cfg: JobConfig) -> ExecutorConfig:
    """What the state function is configured with (as the read tasks are, from one place)."""
    return ExecutorConfig(
        cfg.windows,
        allowed_lateness_ms=cfg.allowed_lateness_ms,
        late_events_max=cfg.late_events_max,
        shards=cfg.state_shards,
        plugins=loaded_plugins(),  # executors load the same ones (tidegauge/core/plugins.py)
        dedup=cfg.dedup,
        max_services=cfg.max_services,
        service_idle_ms=cfg.service_idle_ms,
        dimensions=cfg.dimensions,
        dimension_values=cfg.dimension_values,
    )


def _current_end(kafka: KafkaSettings) -> dict[str, int]:
    """Committed end offsets now: what `available-now` processes before it stops."""
    return true_end_offsets(kafka.bootstrap, kafka.topic, kafka.options)


class _BatchWriter:
    """`foreachBatch` callback (driver): collect the batch's small result, write it atomically."""

    def __init__(self, cfg: JobConfig, metrics: JobMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.keys = Keys(cfg.redis.prefix)
        self.primary_ms = primary_size(cfg.windows)
        self.primary_key = WindowSpec.tumbling(self.primary_ms).key
        executors = executor_config(cfg)
        self.state_fn = make_state_fn(executors)
        workers = (
            default_state_workers(cfg.state_shards)
            if cfg.state_workers is None
            else min(cfg.state_workers, cfg.state_shards)
        )
        self.pool = StatePool(executors, workers) if workers > 0 else None
        source = cfg.rollup_source_ms
        self.sink = SinkConfig(
            dead_letter_max=cfg.dead_letter_max,
            late_events_max=cfg.late_events_max,
            arrival_window_ms=self.primary_ms,
            # the retention tiers and the spec they roll up (jobs/sink/rollup.py)
            retention=cfg.retention.for_source(source),
            retention_size=cfg.retention_size,
            source=None if source is None else WindowSpec.tumbling(source),
            shards=cfg.state_shards,
            # the roll-ups' merges, half of them in the state worker that finished first
            merge=merge_encoded if self.pool is None else self.pool.merge_encoded,
        )
        self._client: redis.Redis | None = None
        #: The stores' retention, read and planned while the stateful step finishes.
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="tidegauge-sink-ahead")
        self.dims = tuple(d.name for d in cfg.dimensions)
        self.catalog = (
            CatalogPublisher(
                KafkaSettings(cfg.kafka.bootstrap, cfg.catalog_topic, cfg.kafka.options),
                cfg.checkpoint,
                self.keys,
            )
            if cfg.catalog_topic and cfg.checkpoint
            else None
        )
        self.kept = DecodedStates()  # of the groups this process runs itself
        self.state_log = StateLog(cfg.checkpoint)
        #: Batch id -> its records and their freshness, measured when the batch is committed;
        #: the status listener takes them into the batch's history entry.
        self.committed: dict[int, Committed] = {}

    def close(self) -> None:
        """Stop the state workers (once the query has stopped: no batch is running)."""
        self._ahead.shutdown(wait=True)
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = connect(self.cfg.redis)
        return self._client

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        summaries = collect(batch, batch_id)
        clock = clock_of(self.cfg.checkpoint, batch_id)
        at = BatchTime(batch_id, clock.watermark_ms, clock.timestamp_ms)
        started: list[Future[Ahead]] = []

        def read_early() -> None:
            # the retention work that needs no rows, on the core the first state worker to
            # finish leaves idle (jobs/sink/ahead.py)
            started.append(
                self._ahead.submit(
                    lambda: read_ahead(self._redis(), self.keys, at, self.sink, self.dims)
                )
            )

        state = self.state_log.before(batch_id)
        table = apply_state(
            self.state_fn,
            summaries,
            state,
            clock.watermark_ms,
            self.cfg.state_shards,
            self.pool,
            self.kept,
            on_idle=read_early,
        )
        (ahead,) = started
        rows, slices = split_rows(decode_table(table, batch_id))
        results = SinkBatch.of_rows(
            batch_id,
            rows,
            batch_members(rows.late_events, self.cfg.late_events_max, batch_id),
            at,
        )
        dims = {dim: SinkBatch.of_rows(batch_id, r, at=at) for dim, r in slices.items()}
        sink_started = time.monotonic()
        fitted: list[Fitted | None] = [None]
        # read before the batch's rows: taken by the first attempt only, unless it failed
        first: list[Ahead | None] = [None if ahead.exception() else ahead.result()]

        def write() -> None:
            early, first[0] = first[0], None
            fitted[0] = write_batch(self._redis(), self.keys, results, self.sink, dims, early)

        retries = retry(
            write,
            what=f"writing batch {batch_id}",
            budget_ms=self.cfg.sink_retry_ms,
            where=f"Redis at {redact_url(self.cfg.redis.url)}",
        )
        self.state_log.commit(batch_id, state)  # after the results: a redone batch redoes both
        if self.metrics is not None:
            self.metrics.committed(
                batch_id,
                time.monotonic() - sink_started,
                retries,
                [d.reason for d in rows.dead],
                rows.duplicate_events,
                sum(lt.count for lt in results.late if lt.spec == self.primary_key),
                state,
            )
            if fitted[0] is not None:
                self.metrics.retention(fitted[0])
        if self.catalog is not None:
            try:
                self.catalog.publish(self._redis(), batch_id)
            except (CatalogError, redis.RedisError) as e:  # the next batch tries again
                log.warning("publishing the catalog to Redis failed: %s", e)
        if rows.slots:  # what the shards track: the next batch's quotas (jobs/summary/slots.py)
            record(self.cfg.checkpoint, batch_id, self.cfg.state_shards, rows.slots)
        fresh = freshness(merge_times(rows.broker_times), round(time.time() * 1000), batch_id)
        self.committed[batch_id] = Committed(
            rows.records,
            None if fresh is None else fresh.to_dict(),
            rows.duplicate_events,
            rows.overflow_names,
            rows.overflow_events,
            where_batches_run(),
            len(rows.dead),
            len(state),
            sum(map(len, state.values())),
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
        windows, dead, late, stragglers = rows.windows, rows.dead, rows.late, rows.stragglers
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


def start_query(
    spark: SparkSession, cfg: JobConfig, metrics: JobMetrics | None = None
) -> tuple[StreamingQuery, StatusListener, Callable[[], None]]:
    """Start the streaming query and its status listener; returns at once.

    `metrics`: the Prometheus figures to keep up to date (jobs/runtime/metrics.py). The third
    value stops what the query's batches use (the state workers): call it once the query stopped.
    """
    warm_up(spark)  # Spark's Python planners started beside the query's start (once)
    batch_writer = _BatchWriter(cfg, metrics)
    listener = StatusListener(cfg, batch_writer.committed, metrics)
    spark.streams.addListener(listener)
    spark.conf.set(
        "spark.sql.streaming.noDataProgressEventInterval", str(max(cfg.trigger_interval_ms, 1000))
    )
    # a checkpoint whose state Spark's state store kept: carried into the state log, once
    migrate_spark_state(spark, cfg.checkpoint, cfg.state_shards)
    writer = (
        build_stream(spark, cfg)
        .writeStream.outputMode("update")
        .queryName("tidegauge")
        .foreachBatch(batch_writer)
        .option("checkpointLocation", cfg.checkpoint)
    )
    interval = 0 if cfg.trigger == "available-now" else cfg.trigger_interval_ms
    # The driver's objects so far (pyspark, py4j, pandas, pyarrow, the job's modules) live as
    # long as it does: out of the collector's full passes, which scanned them in ~200 ms every
    # few batches (gc callbacks, 1,000 services), a pause in the batch it fell in. Once per
    # process: a later query's start may find the last one's garbage, which would never go.
    if not gc.get_freeze_count():
        gc.freeze()
    query = writer.trigger(processingTime=f"{interval} milliseconds").start()
    listener.query_ids.add(str(query.id))
    return query, listener, batch_writer.close


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
    metrics = server = None
    if cfg.metrics_port is not None:
        metrics = JobMetrics(cfg.trigger_interval_ms)
        server = metrics.serve(cfg.metrics_host, cfg.metrics_port)
        log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, server.server_port)
    try:
        return _run(spark, cfg, stop, metrics)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _run(
    spark: SparkSession,
    cfg: JobConfig,
    stop: Callable[[], bool] | None,
    metrics: JobMetrics | None,
) -> StreamingQuery:
    query, listener, close = start_query(spark, cfg, metrics)
    try:
        if cfg.trigger == "available-now":
            # Offsets were capped at the topic's end when the query started (endingOffsets), so
            # "all available" is finite: process it in max-records batches, then stop.
            query.processAllAvailable()
        else:
            while query.isActive and not (stop and stop()):
                query.awaitTermination(1)
    finally:
        # The listener goes first: Spark delivers its events asynchronously, and one delivered
        # while this process exits fails in the JVM (py4j: "Received empty command"). The last
        # batches' progress, delivered or not, is then recorded from the query itself.
        spark.streams.removeListener(listener)
        if query.isActive:
            query.stop()
        for progress in query.recentProgress:
            listener.onQueryProgress(ProgressEvent(progress))
        listener.close()
        close()
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    return query
