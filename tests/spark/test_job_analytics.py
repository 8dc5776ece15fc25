"""Windowed analytics end to end: counts, errors, percentiles, distinct users, ranges, hopping.

One seeded stream goes through the real broker, the job (tumbling 10s and hopping 30s/10s windows
at once, run as a query of the test session's local Spark) and Redis. Expected answers are computed
here from the generator's ground truth and the job's recorded batch boundaries with the watermark
rule spelled out in helpers.py: counts exactly, percentiles as rank error against exact numpy
quantiles, distinct users within 3 %, range queries equal to merging the stored windows, hopping
windows equal to a direct computation over the same accepted events.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import redis

from tests.integration.helpers import batch_rows, load_truth, tidegauge
from tests.spark.helpers import accepted_events, closed_sessions, rank_error
from tidegauge.core.store import Keys, read_batches, read_range, read_windows
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

TUMBLING = WindowSpec.tumbling(10_000)
HOPPING = WindowSpec(30_000, 10_000)
SESSIONS = WindowSpec.session(20_000, 10_000)


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, produce, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("analytics")
    topic = "analytics-events"
    url = module_redis_db().url
    truth_path = tmp / "truth.jsonl"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic)
    produce(
        topic,
        start_time="2026-02-01T00:00:00Z",
        count="40000",
        rate="200",
        seed="3",
        users="3000",
        error_rate="0.03",
        out_of_order_fraction="0.1",
        max_delay="8s",
        late_fraction="0.02",
        lateness="15s",
        malformed_fraction="0.002",
        duplicate_fraction="0.01",
        truth=str(truth_path),
    )
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window=["10s", "30s/10s"],
        session_gap="20s",
        allowed_lateness="15s",
        max_records_per_trigger="5000",
        no_dedup=True,  # the truth here counts duplicates as events (see test_dedup.py)
    )
    r = redis.Redis.from_url(url)
    rows = batch_rows(load_truth(truth_path), read_batches(r, Keys()))
    return {"url": url, "client": r, "batches": rows}


@pytest.mark.parametrize("spec", [TUMBLING, HOPPING], ids=["tumbling-10s", "hopping-30s-10s"])
def test_every_window_matches_a_direct_computation(run: dict[str, Any], spec: WindowSpec) -> None:
    expected = accepted_events(run["batches"], spec)
    stored = {(w.window_start, w.service): w for w in read_windows(run["client"], Keys(), spec)}
    with_counts = {k for k, w in stored.items() if w.count}
    assert with_counts == set(expected)
    checked_percentiles = 0
    for key, events in expected.items():
        w = stored[key]
        assert w.kind == spec.kind and w.window_end - w.window_start == spec.size_ms
        assert w.count == len(events), key
        assert w.errors == sum(1 for t in events if (t["status"] or 0) >= 500), key
        assert w.error_rate == pytest.approx(w.errors / w.count)
        lat = np.array([t["latency_ms"] for t in events if t["latency_ms"] is not None])
        assert w.latency_count == len(lat)
        assert w.latency_mean == pytest.approx(lat.mean(), rel=1e-9)
        users = {t["user_id"] for t in events if t["user_id"] is not None}
        assert abs(w.distinct_users - len(users)) <= max(0.03 * len(users), 1), key
        if len(events) >= 1000:
            checked_percentiles += 1
            assert w.p50 is not None and w.p99 is not None
            assert rank_error(lat, w.p50, 0.5) <= 0.01, key
            assert rank_error(lat, w.p99, 0.99) <= 0.01, key
            assert w.p50 <= w.p90 <= w.p95 <= w.p99 <= w.p999  # type: ignore[operator]
    assert checked_percentiles >= 15


def test_range_query_equals_merging_its_windows(run: dict[str, Any]) -> None:
    r, url = run["client"], run["url"]
    windows = [w for w in read_windows(r, Keys(), TUMBLING, service="api") if w.count]
    since, until = windows[3].window_start, windows[12].window_end
    inside = [w for w in windows if w.window_start >= since and w.window_end <= until]
    keys = Keys()
    merged = WindowAgg.merged(
        WindowAgg.from_bytes(r.hget(keys.window_aggs(TUMBLING.key, w.window_start), "api"))
        for w in inside
    )
    expected = merged.metrics(until - since)
    shown = json.loads(
        tidegauge(
            "query",
            "range",
            "--redis",
            url,
            "--from",
            str(since),
            "--to",
            str(until),
            "--service",
            "api",
            "--json",
        ).stdout
    )
    assert shown["windows"] == len(inside)
    assert shown["count"] == sum(w.count for w in inside) == expected["count"]
    for name in ("p50", "p90", "p99", "p999", "distinct_users", "errors", "latency_mean"):
        assert shown[name] == pytest.approx(expected[name]), name
    # "*" over the whole stream: distinct users of the merged sketch, not a sum of windows.
    everything = read_range(r, keys, windows[0].window_start, windows[-1].window_end)
    per_window = sum(w.distinct_users for w in read_windows(r, keys, TUMBLING, service="*"))
    assert everything.metrics["distinct_users"] < per_window


def test_sessions_match_a_direct_computation(run: dict[str, Any]) -> None:
    expected = closed_sessions(run["batches"], SESSIONS.gap_ms, SESSIONS.size_ms)
    stored = {(w.window_start, w.service): w for w in read_windows(run["client"], Keys(), SESSIONS)}
    assert sum(len(v) for k, v in expected.items() if k[1] == "*") > 500
    assert {k for k, w in stored.items() if w.count} == set(expected)
    for key, sessions in expected.items():
        w = stored[key]
        assert w.kind == "session"
        assert w.count == len(sessions), key
        lengths = np.array([length for _, length in sessions], dtype=float)
        assert w.latency_mean == pytest.approx(lengths.mean()), key
        users = {u for u, _ in sessions}
        assert abs(w.distinct_users - len(users)) <= max(0.03 * len(users), 1), key
        if len(sessions) >= 200:
            assert rank_error(lengths, w.p50, 0.5) <= 0.01, key  # type: ignore[arg-type]
