"""`tidegauge alerts --metrics-port`: the evaluator's own figures for Prometheus.

Evaluations and the ones Redis failed, each rule's state changes (provisional, confirmed,
retracted) as they are announced, and when it last evaluated; `/readyz` is 503 once three
intervals pass without an evaluation (Redis gone, the process stuck). Served by
tidegauge/core/metrics_http.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from tidegauge.alerts.rules import Firing
from tidegauge.core.metrics_http import MetricsServer, serve_metrics

__all__ = ["AlertMetrics"]

#: Intervals without an evaluation before /readyz says not ready.
READY_WITHIN_INTERVALS = 3


class AlertMetrics:
    """The evaluator's metrics in a registry of their own."""

    def __init__(self, interval_s: float, rules: int) -> None:
        self.registry = CollectorRegistry()
        self.interval_s = interval_s
        self.last_s: float | None = None
        r = self.registry
        self.evaluations = Counter(
            "tidegauge_alerts_evaluations", "Evaluations of every rule", registry=r
        )
        self.errors = Counter(
            "tidegauge_alerts_evaluation_errors", "Evaluations Redis failed", registry=r
        )
        self.changes = Counter(
            "tidegauge_alert_state_changes",
            "Firings announced, by rule and the state they entered",
            ["rule", "state"],
            registry=r,
        )
        self.last = Gauge(
            "tidegauge_alerts_last_evaluation_timestamp_seconds",
            "When every rule was last evaluated (Unix time)",
            registry=r,
        )
        Gauge("tidegauge_alert_rules", "Rules evaluated", registry=r).set(rules)

    def evaluated(self, firings: Iterable[Firing], now: float | None = None) -> None:
        """One evaluation of every rule and the state changes it announced."""
        self.last_s = time.time() if now is None else now
        self.last.set(self.last_s)
        self.evaluations.inc()
        for f in firings:
            self.changes.labels(f.rule_name, f.state).inc()

    def failed(self) -> None:
        """An evaluation Redis failed."""
        self.errors.inc()

    def ready(self, now: float | None = None) -> bool:
        """Whether it evaluated within the last `READY_WITHIN_INTERVALS` intervals."""
        if self.last_s is None:
            return False
        window = READY_WITHIN_INTERVALS * max(self.interval_s, 1.0)
        return (time.time() if now is None else now) - self.last_s <= window

    def serve(self, host: str, port: int) -> MetricsServer:
        """Start the HTTP server in a daemon thread."""
        return serve_metrics(self.registry, self.ready, host, port, "no evaluation lately")
