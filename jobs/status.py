"""The job's status in Redis: a summary of every batch's progress, written by a query listener.

`progress_summary` is pure (a `StreamingQueryProgress` as a dict in, the stored summary out);
`StatusListener` writes it after every batch and refreshes the status on idle triggers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from pyspark.sql.streaming import StreamingQueryListener

from jobs.redis_sink import (
    touch_status,
    write_progress,
)
from tidegauge.core.config import JobConfig
from tidegauge.core.store import Keys, connect
from tidegauge.core.windows import advance_watermark

__all__ = ["Committed", "ProgressEvent", "StatusListener", "progress_summary"]

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
    job's source yields summary rows (jobs/deltas.py), so Spark's row counts are not records;
    the input and processing rates are scaled by the same ratio.
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
        "state_rows": sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators", [])),
        # Spark's own count of rows its stateful operators dropped as late (docs/time.md: 0 for
        # this job, which counts late rows itself instead of letting Spark drop them).
        "spark_rows_dropped_by_watermark": sum(
            op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", [])
        ),
        "query_id": str(progress.get("id")),
        # A new run id per start of the job (same query id when it resumes a checkpoint): the
        # dashboard marks where the job was (re)started (dashboard/frames.py `job_starts`).
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
    #: Events it dropped as duplicates of events already counted (jobs/dedup.py).
    duplicates: int = 0
    #: Service names beyond `--max-services` it counted under OVERFLOW_SERVICE, and their events.
    overflow_names: int = 0
    overflow_events: int = 0
    #: Where it ran (`where_batches_run`), taken when it committed: the listener may see the
    #: progress event later, or again (replayed), after executors came or went.
    spark: dict[str, Any] | None = None
    #: Malformed records it sent to the dead-letter store.
    dead_letters: int = 0


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

    def __init__(self, cfg: JobConfig, committed: dict[int, Committed] | None = None) -> None:
        self.cfg = cfg
        self.keys = Keys(cfg.redis.prefix)
        self.client = connect(cfg.redis)
        self.query_ids: set[str] = set()
        #: Batch id -> what the batch writer measured when it committed the batch.
        self.committed = {} if committed is None else committed

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
            summary["spark"] = where_batches_run() if done is None else done.spark
            summary["overflow"] = (
                None
                if done is None
                else {"names": done.overflow_names, "events": done.overflow_events}
            )
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
