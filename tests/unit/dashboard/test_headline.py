"""The top row's figures (dashboard/headline.py), against ground truth computed here."""

from __future__ import annotations

import pytest

from dashboard.headline import headline
from dashboard.times import format_age
from tests.unit.dashboard.fixtures import T, W
from tests.unit.dashboard.fixtures import plain_row as row
from tests.unit.dashboard.fixtures import reporting_status as status

pytestmark = pytest.mark.unit


def test_headline_uses_the_newest_complete_window_and_range_totals() -> None:
    rows = [
        row(T, "*", 100, error_rate=0.01, p99=80.0, distinct_users=40, late=3, stragglers=1),
        row(T + W, "*", 200, error_rate=0.02, p99=90.0, distinct_users=50, late=2),
        row(T + 2 * W, "*", 20, error_rate=0.5, p99=999.0, distinct_users=5),  # still filling
        row(T + W, "api", 150, late=2),
    ]
    batches = [{"max_event_time": T + 2 * W + 3000}, {"max_event_time": None}]
    now = T + 100_000 + 2500
    h = {x.label: x.value for x in headline(status(), rows, batches, now, 15 * 60_000)}
    assert h["Events/s"] == "20.0"  # window [T+10s, T+20s) ends before the max event time
    assert h["Error rate"] == "2.00 %"
    assert h["p99 latency"] == "90.0 ms"
    assert h["Distinct users"] == "50"
    assert h["Late events"] == "5"  # `*` rows only: the api row is part of them
    assert h["Stragglers"] == "1"
    assert h["Watermark delay"] == format_age(now - (T + 50_000))
    assert h["Last batch age"] == "2.5s"


def test_headline_without_anything_yet_shows_dashes() -> None:
    h = {x.label: x.value for x in headline(None, [], [], T, 60_000)}
    assert h["Events/s"] == "–" and h["Watermark delay"] == "–" and h["Last batch age"] == "–"
    assert h["Freshness p99"] == "–"
    assert h["Late events"] == "0"


def test_headline_freshness_is_the_p99_of_the_latest_batch_with_records() -> None:
    commit = T + 99_000
    fresh = {
        "batch_id": 6,
        "commit_time": commit,
        "records": 3000,
        "p50_ms": 120,
        "p99_ms": 1_480,
        "max_ms": 62_250,
    }
    now = commit + 2_000
    # the job's last batch (#7) had no records: the figure is that of batch #6
    heads = headline(status(freshness=fresh), [], [], now, 60_000)
    h = next(x for x in heads if x.label == "Freshness p99")
    assert h.value == "1.4s"  # 1,480 ms in the row's 0.1 s steps (rounded down, like the ages)
    assert "broker timestamp → committed to Redis" in h.help
    assert "batch #6 (3,000 records, committed 2.0s ago)" in h.help
    assert "p50 120ms, p99 1s480ms, max 1m2s250ms" in h.help
    # the job's three figures come last (the app puts them on a line of their own)
    assert [x.label for x in heads][-3:] == ["Watermark delay", "Freshness p99", "Last batch age"]
    assert len(heads) == 9


def test_headline_freshness_before_any_batch_with_records() -> None:
    h = next(x for x in headline(status(), [], [], T, 60_000) if x.label == "Freshness p99")
    assert h.value == "–" and h.help == "no batch with records yet"
