"""The job's Prometheus endpoint: what an ops team's own monitoring scrapes (`--metrics-port`).

`/metrics` (Prometheus text, `prometheus-client`) has the job's figures, updated when a batch
is committed and when Spark reports its progress; `/healthz` answers 200 while the process
runs; `/readyz` answers 200 while the job reports (a batch or an idle interval) within
`READY_WITHIN_REPORTS` of its report interval, else 503, so a stalled job shows as not ready.
The names and their meaning are in docs/deploy.md, with a scrape configuration and alert
rules for the pipeline itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from jobs.sink.footprint import Fitted
from tidegauge.core.metrics_http import MetricsServer, serve_metrics
from tidegauge.core.retention import format_span

__all__ = ["JobMetrics", "READY_WITHIN_REPORTS"]

#: Reports (batches or idle intervals) the job may miss before /readyz says it is not ready.
READY_WITHIN_REPORTS = 3
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class JobMetrics:
    """The job's metrics in a registry of their own, and the HTTP server that exposes them."""

    def __init__(self, report_interval_ms: int) -> None:
        self.registry = CollectorRegistry()
        self.report_interval_ms = max(report_interval_ms, 1_000)
        self.last_report_s: float | None = None
        # Batches already counted: a batch written again after a failure, or a progress event
        # delivered again (the job replays the last ones when it stops), counts once.
        self._committed_upto = -1
        self._progress_upto = -1
        r = self.registry
        self.batches = Counter("tidegauge_batches", "Micro-batches committed", registry=r)
        self.batch_seconds = Histogram(
            "tidegauge_batch_duration_seconds",
            "Duration of a micro-batch, Spark's planning to the sink's commit",
            buckets=_SECONDS,
            registry=r,
        )
        self.records = Counter(
            "tidegauge_input_records",
            "Kafka records read (events, heartbeats, dead letters)",
            registry=r,
        )
        self.lag = Gauge(
            "tidegauge_consumer_lag_records",
            "Records between the last batch's end and the topic's end, per partition",
            ["partition"],
            registry=r,
        )
        self.watermark_delay = Gauge(
            "tidegauge_watermark_delay_seconds",
            "Wall-clock time minus the event-time watermark after the last batch",
            registry=r,
        )
        self.freshness = Gauge(
            "tidegauge_freshness_seconds",
            "The last batch's records: broker timestamp to committed in Redis (p50, p99, max)",
            ["quantile"],
            registry=r,
        )
        self.dead = Counter(
            "tidegauge_dead_letters",
            "Records that broke the contract, by reason",
            ["reason"],
            registry=r,
        )
        self.duplicates = Counter(
            "tidegauge_duplicates", "Events dropped as duplicates of counted ones", registry=r
        )
        self.late = Counter(
            "tidegauge_late_events",
            "Events behind the watermark (counted as late, not in their window), primary windows",
            registry=r,
        )
        self.state_groups = Gauge(
            "tidegauge_state_groups", "State groups the job held after the last batch", registry=r
        )
        self.state_bytes = Gauge(
            "tidegauge_state_bytes", "Bytes of the state held after the last batch", registry=r
        )
        self.redis_seconds = Histogram(
            "tidegauge_redis_write_seconds",
            "Writing one batch to Redis, retries included",
            buckets=_SECONDS,
            registry=r,
        )
        self.redis_retries = Counter(
            "tidegauge_redis_retries", "Failed attempts to write a batch to Redis", registry=r
        )
        self.last_batch = Gauge(
            "tidegauge_last_batch_timestamp_seconds",
            "When the last batch was committed (Unix time)",
            registry=r,
        )
        self.last_report = Gauge(
            "tidegauge_last_report_timestamp_seconds",
            "When the job last reported, a batch or an idle interval (Unix time)",
            registry=r,
        )

        self.retention_seconds = Gauge(
            "tidegauge_retention_seconds",
            "How long each tier keeps its windows, in force (--retention fitted to "
            "--retention-size)",
            ["tier"],
            registry=r,
        )
        self.projected_bytes = Gauge(
            "tidegauge_store_projected_bytes",
            "What the job's stores hold once every tier is full, under the retention in force",
            registry=r,
        )
        self.retention_size = Gauge(
            "tidegauge_retention_size_bytes", "The byte budget (--retention-size)", registry=r
        )

    # --- what the job tells it ------------------------------------------------------------

    def committed(
        self,
        batch_id: int,
        sink_seconds: float,
        retries: int,
        dead_reasons: Iterable[str],
        duplicates: int,
        late: int,
        state: Mapping[Any, bytes] | None = None,
    ) -> None:
        """A batch the batch writer has written to Redis, and the state it left."""
        if batch_id <= self._committed_upto:
            return
        self._committed_upto = batch_id
        self.redis_seconds.observe(sink_seconds)
        if retries:
            self.redis_retries.inc(retries)
        for reason in dead_reasons:
            self.dead.labels(reason).inc()
        if duplicates:
            self.duplicates.inc(duplicates)
        if late:
            self.late.inc(late)
        if state is not None:
            self.state_groups.set(len(state))
            self.state_bytes.set(sum(map(len, state.values())))

    def retention(self, fitted: Fitted) -> None:
        """The retention in force after a batch (a byte budget set)."""
        kept = fitted.retention
        if kept.raw_ttl_ms is not None:
            self.retention_seconds.labels("raw").set(kept.raw_ttl_ms / 1000)
        for tier in kept.tiers:
            self.retention_seconds.labels(format_span(tier.size_ms)).set(tier.ttl_ms / 1000)
        self.projected_bytes.set(fitted.projected_bytes)
        self.retention_size.set(fitted.budget)

    def progress(self, summary: Mapping[str, Any], progress: Mapping[str, Any]) -> None:
        """Spark's progress of a batch (`progress_summary` and the raw progress JSON)."""
        now = time.time()
        self._reported(now)
        if not summary.get("input_rows") and not progress.get("numInputRows"):
            return  # a batch with nothing to read: only a report
        batch_id = int(summary.get("batch_id", -1))
        if batch_id <= self._progress_upto:
            return
        self._progress_upto = batch_id
        self.batches.inc()
        self.last_batch.set(now)
        self.batch_seconds.observe(float(summary.get("batch_duration_ms") or 0) / 1000)
        self.records.inc(int(summary.get("input_rows") or 0))
        watermark = summary.get("watermark") or 0
        if watermark:
            self.watermark_delay.set(max(0.0, now - watermark / 1000))
        fresh = summary.get("freshness")
        if fresh:
            for label, key in (("0.5", "p50_ms"), ("0.99", "p99_ms"), ("1", "max_ms")):
                self.freshness.labels(label).set(fresh[key] / 1000)
        ends = summary.get("topic_end_offsets") or {}
        for partition, end in ends.items():
            done = (summary.get("offsets") or {}).get(partition, 0)
            self.lag.labels(partition).set(max(0, int(end) - int(done)))

    def idle(self) -> None:
        """The job reported without a batch: nothing new on the topic."""
        self._reported(time.time())

    def _reported(self, now: float) -> None:
        self.last_report_s = now
        self.last_report.set(now)

    def ready(self, now: float | None = None) -> bool:
        """Whether the job has reported recently (`READY_WITHIN_REPORTS` intervals)."""
        if self.last_report_s is None:
            return False
        window = READY_WITHIN_REPORTS * self.report_interval_ms / 1000
        return (time.time() if now is None else now) - self.last_report_s <= window

    # --- serving ---------------------------------------------------------------------------

    def serve(self, host: str, port: int) -> MetricsServer:
        """Start the HTTP server in a daemon thread; the caller closes it when the job ends."""
        return serve_metrics(self.registry, self.ready, host, port, "no report from the job lately")
