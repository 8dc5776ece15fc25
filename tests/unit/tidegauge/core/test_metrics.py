"""The built-in metrics (tidegauge/core/metrics.py): the fields they report, fraction_at_least.

A window's result fields are what the registered metrics report for its `WindowAgg`
(`WindowAgg.metrics`); `fraction_at_least` answers the lateness what-if from an overdue digest.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from sketches.tdigest import TDigest
from tests.unit.tidegauge.core.fixtures import NAN, agg_of, exact_values, f64, i64, users
from tidegauge.core.metrics import PERCENTILES, fraction_at_least
from tidegauge.core.window_agg import WindowAgg

METRIC_KEYS = {
    "peak_events",  # sliding windows only (None elsewhere): test_sliding.py
    "peak_start",
    "peak_errors",
    "peak_errors_start",
    "lateness_p50",
    "lateness_p99",
    "lateness_max",
    "count",
    "events_per_s",
    "errors",
    "error_rate",
    "latency_count",
    "latency_mean",
    "distinct_users",
    "p50",
    "p90",
    "p95",
    "p99",
    "p999",
}


# --- metrics --------------------------------------------------------------------------------


def test_metrics_fields_and_values() -> None:
    # 5 events in a 10 s window; latencies kept exactly (a handful of values are singletons)
    a = agg_of(
        f64(10.0, 20.0, NAN, 40.0, 50.0),
        i64(200, 500, 200, 503, -1),
        users("alice", "bob", "alice", None, "carol"),
    )
    m = a.metrics(10_000)
    assert set(m) == METRIC_KEYS
    assert set(PERCENTILES) == {"p50", "p90", "p95", "p99", "p999"}
    assert m["count"] == 5
    assert m["events_per_s"] == 0.5
    assert m["errors"] == 2
    assert m["error_rate"] == 0.4
    assert m["latency_count"] == 4
    assert m["latency_mean"] == 30.0
    assert m["distinct_users"] == 3
    # the percentiles are the digest's, in order, inside [min, max]
    expected = a.latency.quantile(np.array(list(PERCENTILES.values())))
    assert [m[k] for k in PERCENTILES] == pytest.approx(list(expected))
    values = [m[k] for k in PERCENTILES]
    assert values == sorted(values)
    assert 10.0 <= values[0] and values[-1] <= 50.0
    # the sink stores metrics as JSON: plain, finite numbers (or null)
    back = json.loads(json.dumps(m, allow_nan=False))
    assert back == m
    assert all(type(m[k]) is int for k in ("count", "errors", "latency_count", "distinct_users"))


@pytest.mark.parametrize(
    ("duration_ms", "events_per_s"),
    [(1_000, 30.0), (10_000, 3.0), (30_000, 1.0), (60_000, 0.5), (7, 30 * 1000 / 7)],
)
def test_events_per_second_is_count_over_the_duration(
    duration_ms: int, events_per_s: float
) -> None:
    a = agg_of(np.full(30, 5.0), np.full(30, 200), None)
    assert a.metrics(duration_ms)["events_per_s"] == pytest.approx(events_per_s)


def test_metrics_without_latencies_has_no_percentiles() -> None:
    m = agg_of(f64(NAN, NAN, NAN), i64(200, 500, 200), users("u1", "u2", "u1")).metrics(10_000)
    assert m["count"] == 3 and m["errors"] == 1 and m["distinct_users"] == 2
    assert m["latency_count"] == 0
    assert m["latency_mean"] is None
    assert {k: m[k] for k in PERCENTILES} == dict.fromkeys(PERCENTILES)
    json.dumps(m, allow_nan=False)


def test_metrics_of_an_empty_aggregate() -> None:
    m = WindowAgg().metrics(10_000)
    assert m == {
        "count": 0,
        "events_per_s": 0.0,
        "errors": 0,
        "error_rate": 0.0,  # not 0/0
        "latency_count": 0,
        "latency_mean": None,
        "distinct_users": 0,
        **dict.fromkeys(PERCENTILES),
        "lateness_p50": None,
        "lateness_p99": None,
        "lateness_max": None,
        **dict.fromkeys(("peak_events", "peak_start", "peak_errors", "peak_errors_start")),
    }


def test_one_latency_is_every_percentile() -> None:
    m = agg_of(f64(42.0), i64(200), users("u")).metrics(10_000)
    assert [m[k] for k in PERCENTILES] == [42.0] * len(PERCENTILES)
    assert m["latency_mean"] == 42.0


# --- fraction_at_least ----------------------------------------------------------------------
#
# `lateness` = arrival (broker time) - event time; `overdue` = frontier - window end, by how much
# the event-time frontier had passed the event's window when it arrived. With allowed lateness L
# an event would have been late exactly when overdue >= L:
#
#   window [0, 10s)         frontier at arrival = 25s     -> overdue 15s
#   ----[=========)---------------|------->  late with L <= 15s, accepted with L > 15s


@pytest.mark.parametrize(
    "values",
    [
        [0],
        [5, 5, 5],
        [0, 0, 1, 2, 2, 3, 10, 10, 10, 11],
        [-7, -1, 0, 0, 4, 9, 30_000, 30_001, 59_999],  # overdue can be negative (hopping panes)
        [1, 100, 10_000, 1_000_000],
        list(range(0, 250_000, 10_000)),  # 25 values: the largest set kept exactly
    ],
    ids=["one", "equal", "duplicates", "negative", "spread", "25-values"],
)
@pytest.mark.parametrize("extra", [0, 3])
def test_fraction_at_least_is_exact_for_few_integer_values(values: list[int], extra: int) -> None:
    # `total` counts events whose overdue is unknown or absent too (`extra` of them)
    d = TDigest()
    d.update(np.array(values, dtype=np.float64))
    exact_values(d)
    total = len(values) + extra
    lo, hi = min(values), max(values)
    thresholds = {lo - 2, lo - 1, hi, hi + 1, hi + 2, 0, 1}
    thresholds |= {v + k for v in values for k in (-1, 0, 1)}  # at, just below, just above
    for threshold in sorted(thresholds):
        expected = sum(v >= threshold for v in values) / total
        got = fraction_at_least(d, threshold, total)
        assert got == pytest.approx(expected, abs=1e-12), threshold


def test_fraction_at_least_over_random_small_sets() -> None:
    rng = np.random.default_rng(12)
    for _ in range(100):
        values = rng.integers(-5, 60, int(rng.integers(1, 26)))
        d = TDigest()
        for part in np.array_split(values, 3):  # fed in batches, as a pane is
            d.update(part.astype(np.float64))
        total = len(values) + int(rng.integers(0, 5))
        for threshold in range(-7, 63):
            expected = int(np.count_nonzero(values >= threshold)) / total
            assert fraction_at_least(d, threshold, total) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("values", "threshold", "total"),
    [([], 0, 10), ([], 5, 0), ([3, 4], 0, 0), ([3, 4], 0, -1)],
    ids=["empty-digest", "empty-and-no-total", "no-total", "negative-total"],
)
def test_fraction_at_least_of_nothing_is_zero(
    values: list[int], threshold: int, total: int
) -> None:
    d = TDigest()
    d.update(np.array(values, dtype=np.float64))
    assert fraction_at_least(d, threshold, total) == 0.0


def test_fraction_at_least_on_many_values_is_within_the_sketch_tolerance() -> None:
    rng = np.random.default_rng(13)
    values = rng.integers(0, 120_000, 50_000).astype(np.float64)
    d = TDigest()
    d.update(values)
    for threshold in (0, 1_000, 30_000, 60_000, 119_000):
        expected = float(np.count_nonzero(values >= threshold)) / len(values)
        assert fraction_at_least(d, threshold, len(values)) == pytest.approx(expected, abs=0.01)
