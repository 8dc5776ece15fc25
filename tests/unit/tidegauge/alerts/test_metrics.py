"""`tidegauge alerts`' own figures (tidegauge/alerts/metrics.py): evaluations, state changes
by rule, failures, and readiness from the last evaluation."""

from __future__ import annotations

from tidegauge.alerts.metrics import READY_WITHIN_INTERVALS, AlertMetrics
from tidegauge.alerts.rules import Firing


def firing(rule: str, state: str) -> Firing:
    return Firing(
        rule="p99 > 800 for 3",
        rule_name=rule,
        service="api",
        start=0,
        end=10_000,
        state=state,
        peak=900.0,
        windows=3,
        closed=3,  # type: ignore[arg-type]
    )


def test_evaluations_and_state_changes_by_rule() -> None:
    m = AlertMetrics(2.0, rules=2)
    m.evaluated([firing("slow", "provisional")], now=100.0)
    m.evaluated([firing("slow", "confirmed"), firing("errors", "provisional")], now=102.0)
    m.evaluated([], now=104.0)
    m.failed()
    value = m.registry.get_sample_value
    assert value("tidegauge_alerts_evaluations_total") == 3
    assert value("tidegauge_alerts_evaluation_errors_total") == 1
    assert value("tidegauge_alert_state_changes_total", {"rule": "slow", "state": "confirmed"}) == 1
    assert (
        value("tidegauge_alert_state_changes_total", {"rule": "errors", "state": "provisional"})
        == 1
    )
    assert value("tidegauge_alerts_last_evaluation_timestamp_seconds") == 104.0
    assert value("tidegauge_alert_rules") == 2


def test_ready_while_it_evaluates() -> None:
    m = AlertMetrics(2.0, rules=1)
    assert not m.ready(now=0.0)
    m.evaluated([], now=10.0)
    limit = 10.0 + READY_WITHIN_INTERVALS * 2.0
    assert m.ready(now=limit) and not m.ready(now=limit + 0.1)
