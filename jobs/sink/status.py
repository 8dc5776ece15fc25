"""The job's status in Redis: a summary of every batch's progress, written by a query listener.

`progress_summary` is pure (a `StreamingQueryProgress` as a dict in, the stored summary out);
`StatusListener` writes it after every batch and refreshes the status on idle triggers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import redis
from pyspark.sql.streaming import StreamingQueryListener

from jobs.source.kafka_source import true_end_offsets
from tidegauge.core.config import JobConfig
from tidegauge.core.store import Keys, connect
from tidegauge.core.windows import advance_watermark

__all__ = [
    "Committed",
    "ProgressEvent",
    "StatusListener",
    "progress_summary",
    "touch_status",
    "write_progress",
]


class ProgressObserver(Protocol):
    """What else hears of each batch's progress (the job's metrics, jobs/runtime/metrics.py)."""

    def progress(self, summary: Mapping[str, Any], progress: Mapping[str, Any]) -> None:
        """A batch's `progress_summary` and Spark's progress JSON."""

    def idle(self) -> None:
        """The job reported without a batch."""


log = logging.getLogger("tidegauge.job")


def _iso_ms(text: str | None) -> int | None:
    if not text:
        return None
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def progress_summary(
    progress: Mapping[str, Any], allowed_lateness_ms: int, records: int | None = None
) -> dict[str, Any]:
    """The status document for one StreamingQueryProgress, given as its JSON dict (pure).

    Reads the JSON form because PySpark's SourceProgress objects turn offsets into Python reprs.
    `records` is how many Kafka records the batch read, when the batch writer counted them: the
    job's source yields summary rows (jobs/summary/summarise.py), so Spark's row counts are not
    records; the input and processing rates are scaled by the same ratio.
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
    rows = int(progress.get("numInputRows", 0))
    scale = 1.0
    if records is not None:
        scale = records / rows if rows else 0.0
        rows = records
    return {
        "batch_id": progress["batchId"],
        "batch_time": _iso_ms(progress.get("timestamp")) or 0,
        "status_time": round(time.time() * 1000),
        "watermark": after,
        "watermark_in_force": in_force,
        "max_event_time": seen_max,
        "input_rows": rows,
        "input_rows_per_s": _finite(progress.get("inputRowsPerSecond")) * scale,
        "processed_rows_per_s": _finite(progress.get("processedRowsPerSecond")) * scale,
        "batch_duration_ms": progress.get("batchDuration", 0),
        "durations_ms": progress.get("durationMs") or {},
        "start_offsets": offsets(src.get("startOffset")),
        "offsets": offsets(src.get("endOffset")),
        "latest_offsets": offsets(src.get("latestOffset")),
        # Spark's own count of rows its stateful operators dropped as late (docs/time.md: 0 for
        # this job, which counts late rows itself instead of letting Spark drop them).
        "spark_rows_dropped_by_watermark": sum(
            op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", [])
        ),
        "query_id": str(progress.get("id")),
        # A new run id per start of the job (same query id when it resumes a checkpoint): the
        # dashboard marks where the job was (re)started (dashboard/health.py `job_starts`).
        "run_id": str(progress.get("runId")),
    }


def _finite(x: Any) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return 0.0
    return f if f == f and f not in (float("inf"), float("-inf")) else 0.0


@dataclass(frozen=True)
class Committed:
    """What the batch writer measured of a batch it committed, for the batch's status entry."""

    #: Kafka records the batch read (events, heartbeats, dead letters).
    records: int
    #: `Freshness.to_dict()` of its records; None when none had a broker timestamp.
    freshness: dict[str, int] | None
    #: Events it dropped as duplicates of events already counted (jobs/panes/dedup.py).
    duplicates: int = 0
    #: Service names beyond `--max-services` it counted under OVERFLOW_SERVICE, and their events.
    overflow_names: int = 0
    overflow_events: int = 0
    #: Where it ran (`where_batches_run`), taken when it committed: the listener may see the
    #: progress event later, or again (replayed), after executors came or went.
    spark: dict[str, Any] | None = None
    #: Malformed records it sent to the dead-letter store.
    dead_letters: int = 0
    #: The state it held after the batch (jobs/state/held.py): groups, and their bytes.
    state_groups: int = 0
    state_bytes: int = 0


def where_batches_run() -> dict[str, Any] | None:
    """The master, its executors now (0 in local mode) and their cores; None without Spark."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return None
    try:
        # the driver is one of them; (`getExecutorIds` would log a warning per call locally)
        executors = len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1
        return {"master": sc.master, "executors": executors, "cores": sc.defaultParallelism}
    except Exception as e:  # informational: never fail a batch for it
        log.debug("could not read the executors: %s", e)
        return None


@dataclass(frozen=True)
class ProgressEvent:
    """A progress event as the listener receives it, for replaying `recentProgress` into it."""

    progress: Any


@dataclass(frozen=True)
class _JsonProgress:
    """A progress as its JSON text: all the listener reads of a `StreamingQueryProgress`."""

    json: str


@dataclass(frozen=True)
class _IdleEvent:
    id: str


class _JsonCallbacks:
    """The JVM's listener callbacks, handing each progress over as its JSON text.

    PySpark's own callback object rebuilds a progress field by field over Py4J before calling
    the listener, ~100-200 ms of driver CPU per batch (py-spy), competing with the batch writer;
    one `json()` call fetches everything the status needs.
    """

    def __init__(self, listener: StatusListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (the JVM interface's names)
        """Nothing to record until the first batch."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        """A batch finished."""
        self.listener.onQueryProgress(ProgressEvent(_JsonProgress(jevent.progress().json())))

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        """No new data this trigger."""
        self.listener.onQueryIdle(_IdleEvent(str(jevent.id().toString())))

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        """Nothing to record."""

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class StatusListener(StreamingQueryListener):
    """Driver-side listener: job status to Redis after every batch and every idle interval."""

    def __init__(
        self,
        cfg: JobConfig,
        committed: dict[int, Committed] | None = None,
        metrics: ProgressObserver | None = None,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.keys = Keys(cfg.redis.prefix)
        self.client = connect(cfg.redis)
        self.query_ids: set[str] = set()
        #: Batch id -> what the batch writer measured when it committed the batch.
        self.committed = {} if committed is None else committed
        #: The topic's end offsets and when they were asked for (epoch ms), or None.
        self._topic_end: tuple[int, dict[str, int]] | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        #: Held while the watcher is made and started: a `close` in between would join a thread
        #: not yet started (Spark calls `topic_end` from its listener thread).
        self._watcher_lock = threading.Lock()

    def topic_end(self) -> tuple[int, dict[str, int]] | None:
        """Where the topic ended when last asked, and when (epoch ms); None before an answer.

        A batch's `latest_offsets` are its planned end, which a rate limit caps: only the
        topic's own end tells how far behind a catching-up job is (dashboard/job_status.py
        `catch_up`). A thread asks Kafka every `TOPIC_END_EVERY_MS`, so a slow or unreachable
        broker never holds up the status of a batch.
        """
        with self._watcher_lock:
            if self._watcher is None and not self._stop.is_set():
                self._watcher = threading.Thread(
                    target=self._watch_topic_end, name="tidegauge-topic-end", daemon=True
                )
                self._watcher.start()
        return self._topic_end

    def _watch_topic_end(self) -> None:
        kafka = self.cfg.kafka
        warned = False
        while not self._stop.is_set():
            try:
                ends = true_end_offsets(kafka.bootstrap, kafka.topic, kafka.options)
                self._topic_end = (
                    round(time.time() * 1000),
                    {str(p): int(v) for p, v in ends.items()},
                )
                warned = False
            except Exception as e:  # informational: never stop the query for it
                if not warned:
                    log.warning("could not read the topic's end offsets: %s", e)
                    warned = True
            self._stop.wait(TOPIC_END_EVERY_MS / 1000)

    def close(self) -> None:
        """Stop asking Kafka where the topic ends (waits a moment for an answer in flight)."""
        self._stop.set()
        with self._watcher_lock:  # a watcher being started is started when this returns
            watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=2)

    @property
    def _jlistener(self) -> Any:
        """The JVM side `addListener` registers: JSON callbacks instead of PySpark's own."""
        if getattr(self, "_jlistener_obj", None) is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "no SparkContext"
            self._jlistener_obj = jvm.PythonStreamingQueryListenerWrapper(_JsonCallbacks(self))
        return self._jlistener_obj

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to record until the first batch."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """Write the status of the batch that just finished."""
        p = json.loads(event.progress.json)
        if self.query_ids and str(p.get("id")) not in self.query_ids:
            return
        try:
            # get, not pop: run_job replays the last progress events into the listener, and
            # a replayed event must write the same history entry (the writer prunes old ones).
            done = self.committed.get(int(p["batchId"]))
            summary = progress_summary(
                p, self.cfg.allowed_lateness_ms, None if done is None else done.records
            )
            # How often the job reports (a batch per trigger, else an idle event at least every
            # second): the dashboard calls the job stale after 3 of these without a word.
            summary["report_interval_ms"] = max(self.cfg.trigger_interval_ms, 1000)
            summary["allowed_lateness_ms"] = self.cfg.allowed_lateness_ms
            summary["freshness"] = None if done is None else done.freshness
            summary["duplicates"] = None if done is None else done.duplicates
            summary["dead_letters"] = None if done is None else done.dead_letters
            summary["state_groups"] = None if done is None else done.state_groups
            summary["state_bytes"] = None if done is None else done.state_bytes
            summary["spark"] = where_batches_run() if done is None else done.spark
            summary["overflow"] = (
                None
                if done is None
                else {"names": done.overflow_names, "events": done.overflow_events}
            )
            end = self.topic_end()
            if end is not None:
                summary["topic_end_time"], summary["topic_end_offsets"] = end
            if self.metrics is not None:
                self.metrics.progress(summary, p)
            write_progress(self.client, self.keys, summary)
        except redis.RedisError as e:  # status is informational; never kill the query for it
            log.warning("could not write status: %s", e)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """No new data: say we are alive, so a quiet stream does not look like a dead job."""
        if self.query_ids and str(event.id) not in self.query_ids:
            return
        if self.metrics is not None:
            self.metrics.idle()
        try:
            touch_status(self.client, self.keys, round(time.time() * 1000))
        except redis.RedisError as e:
            log.warning("could not write status: %s", e)

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """Nothing to record; stop asking where the topic ends."""
        self._stop.set()


#: How many per-batch summaries the `batches` sorted set keeps.
BATCH_HISTORY = 2000

#: How often (ms) the status listener asks Kafka where the topic ends.
TOPIC_END_EVERY_MS = 5_000


def write_progress(r: redis.Redis, keys: Keys, summary: Mapping[str, Any]) -> None:
    """Record one batch's progress as the job status and in the batch history (idempotent).

    `summary` holds batch_id, batch_time, watermark, input_rows, offsets (end), start_offsets,
    latest_offsets, batch_duration_ms, query_id, plus anything else worth keeping.
    """
    batch_id = int(summary["batch_id"])
    status = {
        "batch_id": batch_id,
        "batch_time": int(summary["batch_time"]),
        "status_time": int(summary.get("status_time") or summary["batch_time"]),
        "watermark": int(summary["watermark"]),
        "input_rows": int(summary["input_rows"]),
        "offsets": json.dumps(summary["offsets"], sort_keys=True),
        "latest_offsets": json.dumps(summary["latest_offsets"], sort_keys=True),
        "batch_duration_ms": int(summary["batch_duration_ms"]),
        "query_id": str(summary["query_id"]),
    }
    for name in ("report_interval_ms", "allowed_lateness_ms"):
        if summary.get(name) is not None:
            status[name] = int(summary[name])
    if summary.get("freshness"):  # kept from the last batch with records while the stream is quiet
        status["freshness"] = json.dumps(summary["freshness"], sort_keys=True)
    if summary.get("spark"):
        status["spark"] = json.dumps(summary["spark"], sort_keys=True)
    with r.pipeline(transaction=True) as tx:
        # Status only moves forward: a late progress event for an older batch must not win.
        # A query of another id (a job started with a new checkpoint) takes over: its batch ids
        # start again at 0, and the history of the query it replaces is dropped with it.
        tx.watch(keys.status)
        current, owner = tx.hmget(keys.status, ["batch_id", "query_id"])
        takeover = owner is not None and _text(owner) != status["query_id"]
        tx.multi()
        if takeover:
            tx.delete(keys.status, keys.batches)
        if takeover or current is None or int(current) <= batch_id:
            tx.hset(keys.status, mapping=status)  # type: ignore[arg-type]
        _add_history(tx, keys, batch_id, summary)
        try:
            tx.execute()
        except redis.WatchError:  # another writer moved the status meanwhile; keep history
            tx2 = r.pipeline(transaction=True)
            _add_history(tx2, keys, batch_id, summary)
            tx2.execute()


def _add_history(tx: Any, keys: Keys, batch_id: int, summary: Mapping[str, Any]) -> None:
    tx.zremrangebyscore(keys.batches, batch_id, batch_id)
    tx.zadd(keys.batches, {json.dumps(dict(summary), sort_keys=True): batch_id})
    tx.zremrangebyrank(keys.batches, 0, -(BATCH_HISTORY + 1))


def touch_status(r: redis.Redis, keys: Keys, now_ms: int) -> None:
    """Record that the job is alive while idle (only once a status exists)."""
    if r.hexists(keys.status, "batch_id"):
        r.hset(keys.status, "status_time", str(now_ms))


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
