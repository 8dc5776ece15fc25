"""Burn-rate rules over windows of exact SLO counts: an outage pages once, provisional then
confirmed; a two-minute blip pages no one; a slow leak opens a ticket (the SRE workbook's cases).

    errors:  0.0% ........ 10% for 30 min ........ 0.0% ...   (outage)
             0.0% ........ 10% for 2 min ......... 0.0% ...   (blip)
             0.15% for 3 days .................................. (leak: burn 1.5)
"""

from __future__ import annotations

import numpy as np

from tidegauge.alerts.rules import advance, evaluate
from tidegauge.alerts.slo import burn_points, slo_rules
from tidegauge.catalog.entry import CatalogEntry, Slo
from tidegauge.core.store.records import WindowRow

W = 10_000
HOUR = 3_600_000
T0 = 1_800_000_000_000
PER_WINDOW = 1_000  # events per 10 s window


def _rows(errors: list[int], closed_until: int) -> list[WindowRow]:
    """A service's 10 s windows from T0: `errors[i]` bad of PER_WINDOW events in window i."""
    return [
        WindowRow(
            T0 + i * W,
            T0 + (i + 1) * W,
            "checkout",
            PER_WINDOW,
            PER_WINDOW / 10,
            closed=T0 + (i + 1) * W <= closed_until,
            extra={"slo_availability_events": PER_WINDOW, "slo_errors": e},
        )
        for i, e in enumerate(errors)
    ]


def _rules() -> dict[str, object]:
    entry = CatalogEntry(team="payments", slo=Slo(availability=99.9))  # 0.1 %: 1 in 1,000
    return {r.slo.burn_rule: r for r in slo_rules({"checkout": entry})}  # type: ignore[union-attr]


def _series(minutes: int, bad_from: int, bad_minutes: int, bad: int, base: int = 0) -> list[int]:
    out = [base] * (minutes * 6)
    for i in range(bad_from * 6, (bad_from + bad_minutes) * 6):
        out[i] = bad
    return out


def test_the_rules_of_a_catalogued_slo_and_their_labels() -> None:
    rules = _rules()
    assert sorted(rules) == ["budget leak", "fast burn", "slow burn"]
    fast = rules["fast burn"]
    assert fast.labels == {  # type: ignore[attr-defined]
        "alertname": "SLO fast burn",
        "service": "checkout",
        "severity": "page",
        "slo": "availability 99.9%",
        "team": "payments",
    }
    assert fast.describe() == (  # type: ignore[attr-defined]
        "checkout availability 99.9% over 720h: burn >= 14.4 over 1h and 5m"
    )


def test_an_outage_pages_once_provisional_then_confirmed() -> None:
    fast = _rules()["fast burn"]
    errors = _series(180, bad_from=120, bad_minutes=30, bad=100)  # 10 %: burn 100
    end = T0 + len(errors) * W
    # the outage's newest windows still open: provisional
    early = _rows(errors[: 135 * 6], closed_until=T0 + 128 * 60_000)
    found = evaluate(fast, burn_points(fast, early, early, None))  # type: ignore[arg-type]
    assert [f.state for f in found] == ["provisional"]
    assert found[0].labels["severity"] == "page"
    known, changed = advance([], found, fast, T0, 1)  # type: ignore[arg-type]
    assert [f.state for f in changed] == ["provisional"]
    # every window closed: the same firing, confirmed; one more notice, not a new firing
    rows = _rows(errors, closed_until=end)
    found = evaluate(fast, burn_points(fast, rows, rows, None))  # type: ignore[arg-type]
    assert len(found) == 1 and found[0].state == "confirmed"
    known, changed = advance(known, found, fast, T0, 2)  # type: ignore[arg-type]
    assert [(f.state, f.id) for f in changed] == [("confirmed", known[0].id)]
    # it fired once the hour's burn passed 14.4: ~8.6 min into the outage; and stopped when
    # the 5-minute window no longer burned, within 5 minutes of the outage's end
    start_min = (found[0].start - T0) / 60_000
    end_min = (found[0].end - T0) / 60_000
    assert 128 <= start_min <= 129.5 and 150 <= end_min <= 155


def test_a_two_minute_blip_pages_no_one() -> None:
    rules = _rules()
    errors = _series(180, bad_from=120, bad_minutes=2, bad=100)
    rows = _rows(errors, closed_until=T0 + len(errors) * W)
    for name in ("fast burn", "slow burn"):
        rule = rules[name]
        points = burn_points(rule, rows, rows, None)  # type: ignore[arg-type]
        assert max(p.value or 0 for p in points) > 0  # the blip was seen
        assert evaluate(rule, points) == [], name  # type: ignore[arg-type]


def test_a_slow_leak_opens_a_ticket_and_pages_no_one() -> None:
    rules = _rules()
    minutes = 3 * 24 * 60 + 60
    # 1.5 bad per 1,000 events (0.15 %): a burn of 1.5, every window
    errors = list(np.where(np.arange(minutes * 6) % 2 == 0, 1, 2))
    rows = _rows(errors, closed_until=T0 + len(errors) * W)
    newest_hour = rows[-360:]
    fired = {
        name: evaluate(rule, burn_points(rule, newest_hour, rows, None))  # type: ignore[arg-type]
        for name, rule in rules.items()
    }
    assert fired["fast burn"] == [] and fired["slow burn"] == []
    (ticket,) = fired["budget leak"]
    assert ticket.labels["severity"] == "ticket" and ticket.state == "confirmed"
    assert ticket.peak >= 1.5 / 1.0 * 0.99  # the burn over its rate


def test_an_slo_notice_is_also_an_alertmanager_webhook_body() -> None:
    from tidegauge.alerts.store import notice

    fast = _rules()["fast burn"]
    errors = _series(180, bad_from=120, bad_minutes=30, bad=100)
    rows = _rows(errors, closed_until=T0 + len(errors) * W)
    (firing,) = evaluate(fast, burn_points(fast, rows, rows, None))  # type: ignore[arg-type]
    body = notice(firing, 5)
    assert body["kind"] == "tidegauge.alert" and body["firing"]["labels"] == fast.labels  # type: ignore[attr-defined]
    assert body["status"] == "firing" and body["commonLabels"]["severity"] == "page"
    (alert,) = body["alerts"]
    assert alert["labels"] == {**fast.labels, "state": "confirmed"}  # type: ignore[attr-defined]
    assert alert["startsAt"].endswith("Z") and alert["endsAt"] == "0001-01-01T00:00:00Z"
    from dataclasses import replace

    gone = notice(replace(firing, state="retracted"), 6)
    assert gone["status"] == "resolved" and gone["alerts"][0]["endsAt"] != alert["endsAt"]
    # a rule without labels is told as before
    assert "alerts" not in notice(replace(firing, labels={}), 7)
