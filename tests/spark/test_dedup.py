"""De-duplication by event id, end to end, against an independent replay of the rule.

A seeded stream with 8 % duplicates (half of them sent to a random partition, a fifth of them
re-sent after the lateness, when their original's windows have closed) goes through the real
broker, the job (tumbling, hopping and session windows, de-duplication on by default) and Redis.
The expected windows come from the generator's ground truth with the rule of docs/time.md
replayed in tests/integration/helpers.py (`deduplicated`): counts, errors and late counts
exactly, duplicates per window exactly, distinct users within 3 %, percentiles as rank error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import redis

from tests.integration.helpers import batch_rows, deduplicated, load_truth, tidegauge
from tests.spark.helpers import LATENESS_MS, accepted_events, closed_sessions, rank_error
from tidegauge.core.store import Keys, read_batches, read_lateness, read_windows
from tidegauge.core.windows import WindowSpec

TUMBLING = WindowSpec.tumbling(10_000)
HOPPING = WindowSpec(30_000, 10_000)
SESSIONS = WindowSpec.session(20_000, 10_000)
SPECS = (TUMBLING, HOPPING, SESSIONS)


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, produce, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("dedup")
    topic = "dedup-events"
    url = module_redis_db().url
    truth_path = tmp / "truth.jsonl"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic)
    produce(
        topic,
        start_time="2026-03-01T00:00:00Z",
        count="20000",
        rate="200",
        seed="11",
        users="2000",
        error_rate="0.05",
        out_of_order_fraction="0.1",
        max_delay="8s",
        late_fraction="0.02",
        # late events and late retries come 40 s after their time: behind the job's 15 s
        # allowed lateness even with the watermark a batch (15 s of event time) behind
        lateness="40s",
        duplicate_fraction="0.08",
        duplicate_other_partition="0.5",
        duplicate_late_fraction="0.2",
        truth=str(truth_path),
    )
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window=["10s", "30s/10s"],
        session_gap="20s",
        allowed_lateness="15s",
        max_records_per_trigger="3000",
    )
    r = redis.Redis.from_url(url)
    truth = load_truth(truth_path)
    batches = batch_rows(truth, read_batches(r, Keys()))
    kept, dups = deduplicated(batches, SPECS, LATENESS_MS)
    return {"url": url, "client": r, "truth": truth, "batches": kept, "dups": dups}


def test_the_stream_has_every_kind_of_duplicate(run: dict[str, Any]) -> None:
    truth = run["truth"]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for t in truth:
        if t["kind"] in ("event", "duplicate"):
            by_id.setdefault(t["event_id"], []).append(t)
    pairs = [v for v in by_id.values() if len(v) == 2]
    assert len(pairs) >= 0.05 * len(by_id)
    assert sum(a["partition"] != b["partition"] for a, b in pairs) >= 300
    assert sum(a["partition"] == b["partition"] for a, b in pairs) >= 300
    # dropped as duplicates in some window, and counted late (after the horizon) elsewhere
    in_windows = [n for (spec, _, svc), n in run["dups"].items() if (spec, svc) == ("10000", "*")]
    assert sum(in_windows) > 500
    late_retries = [b for a, b in pairs if b["receive_ms"] - a["receive_ms"] > LATENESS_MS]
    assert len(late_retries) >= 100


@pytest.mark.parametrize("spec", [TUMBLING, HOPPING], ids=["tumbling-10s", "hopping-30s-10s"])
def test_windows_equal_the_deduplicated_truth(run: dict[str, Any], spec: WindowSpec) -> None:
    expected = accepted_events(run["batches"], spec)
    stored = {(w.window_start, w.service): w for w in read_windows(run["client"], Keys(), spec)}
    assert {k for k, w in stored.items() if w.count} == set(expected)
    checked = 0
    for key, events in expected.items():
        w = stored[key]
        assert w.count == len(events), key
        assert w.errors == sum(1 for t in events if (t["status"] or 0) >= 500), key
        users = {t["user_id"] for t in events if t["user_id"] is not None}
        assert abs(w.distinct_users - len(users)) <= max(0.03 * len(users), 1), key
        assert w.duplicates == run["dups"].get((spec.key, *key), 0), key
        lat = np.array([t["latency_ms"] for t in events if t["latency_ms"] is not None])
        assert w.latency_mean == pytest.approx(lat.mean(), rel=1e-9)
        if len(events) >= 1000:
            checked += 1
            assert rank_error(lat, w.p50, 0.5) <= 0.01, key  # type: ignore[arg-type]
            assert rank_error(lat, w.p99, 0.99) <= 0.01, key  # type: ignore[arg-type]
    assert checked >= 5
    shown = {k: w.duplicates for k, w in stored.items() if w.duplicates}
    assert shown == {k[1:]: n for k, n in run["dups"].items() if k[0] == spec.key}


def test_late_counts_include_duplicates_that_came_after_their_horizon(run: dict[str, Any]) -> None:
    watermark = 0
    late: dict[tuple[int, str], int] = {}
    late_retries = 0
    for rows in run["batches"]:
        for t in rows:
            if t["kind"] in ("event", "duplicate"):
                start = t["event_time"] - t["event_time"] % 10_000
                if start + 10_000 <= watermark:
                    late_retries += t["kind"] == "duplicate"
                    for svc in (t["service"], "*"):
                        late[(start, svc)] = late.get((start, svc), 0) + 1
        seen = [t["event_time"] for t in rows if t["kind"] in ("event", "duplicate", "heartbeat")]
        if seen:
            watermark = max(watermark, max(seen) - LATENESS_MS)
    assert late_retries >= 50, "too few retries came after their window closed"
    stored = read_windows(run["client"], Keys(), TUMBLING)
    assert {(w.window_start, w.service): w.late for w in stored if w.late} == late


def test_sessions_are_unchanged_by_duplicates(run: dict[str, Any]) -> None:
    expected = closed_sessions(run["batches"], SESSIONS.gap_ms, SESSIONS.size_ms)
    stored = {(w.window_start, w.service): w for w in read_windows(run["client"], Keys(), SESSIONS)}
    assert {k for k, w in stored.items() if w.count} == set(expected)
    for key, sessions in expected.items():
        assert stored[key].count == len(sessions), key


def test_duplicates_are_reported_per_batch_and_in_the_lateness_report(run: dict[str, Any]) -> None:
    r = run["client"]
    batches = read_batches(r, Keys())
    per_batch = sum(b.get("duplicates") or 0 for b in batches)
    dropped = sum(
        1 for rows in run["batches"] for t in rows if t["kind"] == "heartbeat" and t["event_id"]
    )
    assert per_batch == dropped > 0
    first = min(w.window_start for w in read_windows(r, Keys(), TUMBLING))
    last = max(w.window_end for w in read_windows(r, Keys(), TUMBLING))
    report = read_lateness(r, Keys(), first, last, spec=TUMBLING)
    assert report.duplicates == sum(
        n for (spec, _, svc), n in run["dups"].items() if spec == TUMBLING.key and svc == "*"
    )
