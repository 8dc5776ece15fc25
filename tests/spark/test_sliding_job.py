"""Sliding windows end to end, against a brute-force count of every interval from the truth.

A seeded stream with out-of-order, late and malformed events and heartbeats goes through the
real broker (3 partitions), the job (10 s tumbling plus 30 s sliding at the default 100 ms and
25 s sliding at 1 ms, whose rows end on the 10 s grid and start 5 s off it; many small
batches) and Redis. The expected answers come from the generator's ground truth and the
job's recorded batch boundaries alone: the watermark rule replayed batch by batch, then, for
every stored sliding row, service and `*`:

- its peak: every interval of its length ending on its resolution's grid inside its step,
  counted directly over the events that arrived while the row was open (the busiest one, the
  earliest of ties; errors likewise);
- its rolling count: the events of [end - size, end) that arrived while it was open;
- its late events and stragglers: by the rule of every other window kind, per window.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import redis

from tests.integration.helpers import batch_rows, load_truth, tidegauge
from tidegauge.core.store import Keys, read_batches, read_windows
from tidegauge.core.windows import WindowSpec

LATENESS_MS = 10_000
STEP = 10_000
SLIDING = (WindowSpec.sliding(30_000, STEP, 100), WindowSpec.sliding(25_000, STEP, 1))


@pytest.fixture(scope="module")
def run(  # type: ignore[no-untyped-def]
    broker, module_redis_db, produce, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sliding")
    topic = "sliding-events"
    url = module_redis_db().url
    truth_path = tmp / "truth.jsonl"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    produce(
        topic,
        start_time="2026-04-01T00:00:00Z",
        count="5000",
        rate="80",
        seed="17",
        users="300",
        error_rate="0.1",
        out_of_order_fraction="0.2",
        max_delay="6s",
        late_fraction="0.04",
        # behind the job's 10 s allowed lateness even with the watermark a batch (5 s) behind
        lateness="20s",
        malformed_fraction="0.01",
        heartbeat_interval="1s",
        truth=str(truth_path),
    )
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window=["10s", "30s/sliding", "25s/sliding@1ms"],
        allowed_lateness="10s",
        max_records_per_trigger="400",
    )
    r = redis.Redis.from_url(url)
    truth = load_truth(truth_path)
    return {"url": url, "client": r, "batches": batch_rows(truth, read_batches(r, Keys()))}


def _arrivals(batches: list[list[dict[str, Any]]]) -> dict[str, np.ndarray]:
    """Every event with the watermark in force for its batch (the rule replayed)."""
    times, services, errors, marks = [], [], [], []
    watermark = 0
    for rows in batches:
        seen = [t["event_time"] for t in rows if t["kind"] in ("event", "heartbeat")]
        for t in rows:
            if t["kind"] == "event":
                times.append(t["event_time"])
                services.append(t["service"])
                errors.append((t["status"] or 0) >= 500)
                marks.append(watermark)
        if seen:
            watermark = max(watermark, max(seen) - LATENESS_MS)
    return {
        "t": np.array(times, np.int64),
        "service": np.array(services, object),
        "error": np.array(errors, bool),
        "wm": np.array(marks, np.int64),
    }


def _busiest(times: np.ndarray, spec: WindowSpec, end: int) -> tuple[int, int]:
    """(events, start) of the busiest interval ending on the grid in (end - step, end]."""
    ends = np.arange(end - spec.slide_ms + spec.resolution_ms, end + 1, spec.resolution_ms)
    ts = np.sort(times)
    counts = np.searchsorted(ts, ends, "left") - np.searchsorted(ts, ends - spec.size_ms, "left")
    best = int(np.argmax(counts))
    return int(counts[best]), int(ends[best] - spec.size_ms)


def test_the_stream_is_out_of_order_with_late_events(run: dict[str, Any]) -> None:
    ev = _arrivals(run["batches"])
    assert len(run["batches"]) >= 10 and len(ev["t"]) > 4_500
    behind = ev["t"] + LATENESS_MS <= ev["wm"]  # later than any window could wait
    assert behind.sum() > 50 and ev["error"].sum() > 300


@pytest.mark.parametrize("spec", SLIDING, ids=lambda s: s.key)
def test_every_row_equals_a_count_of_every_interval(run: dict[str, Any], spec: WindowSpec) -> None:
    ev = _arrivals(run["batches"])
    rows = read_windows(run["client"], Keys(), spec)
    assert len(rows) > 30
    assert {row.kind for row in rows} == {"sliding"}
    assert sum(row.service == "*" for row in rows) > 5  # the sink's merge of every service
    checked = 0
    for row in rows:
        end = row.window_end
        assert end - row.window_start == spec.size_ms and end % STEP == 0
        mine = ev["service"] == row.service if row.service != "*" else np.ones(len(ev["t"]), bool)
        open_ = mine & (ev["wm"] < end)
        reach = open_ & (ev["t"] >= end - spec.size_ms - STEP) & (ev["t"] < end)
        events = _busiest(ev["t"][reach], spec, end)
        errors = _busiest(ev["t"][reach & ev["error"]], spec, end)
        got = (row.peak_events, row.peak_start, row.peak_errors, row.peak_errors_start)
        assert got == (*events, *errors), (row.service, row.window_start)
        inside = mine & (ev["t"] >= row.window_start) & (ev["t"] < end)
        assert row.count == int((inside & (ev["wm"] < end)).sum())
        assert row.late == int((inside & (ev["wm"] >= end)).sum())
        frontier = np.where(ev["wm"] > 0, ev["wm"] + LATENESS_MS, np.iinfo(np.int64).min)
        assert row.stragglers == int((inside & (ev["wm"] < end) & (end <= frontier)).sum())
        checked += row.peak_events > 0
    assert checked > 30


def test_the_busiest_interval_holds_at_least_the_rolling_one_and_is_queryable(
    run: dict[str, Any],
) -> None:
    spec = SLIDING[0]
    rows = read_windows(run["client"], Keys(), spec)
    # the interval ending at the row's end is one of those its peak is the busiest of
    assert all((row.peak_events or 0) >= row.count for row in rows)
    out = json.loads(
        tidegauge(
            "query", "windows", "--window", "30s/sliding", "--json", "--redis", run["url"]
        ).stdout
    )
    assert {o["spec"] for o in out} == {spec.key}
    assert all("peak_events" in o for o in out)
    # over a range: the busiest interval ending inside it, from the rows whose step it holds
    stars = sorted((row for row in rows if row.service == "*"), key=lambda row: row.window_end)
    since, until = stars[2].window_end - STEP, stars[-3].window_end
    inside = [row for row in stars if since <= row.window_end - STEP and row.window_end <= until]
    best = max(inside, key=lambda row: (row.peak_events, -row.peak_start))  # type: ignore[operator]
    got = json.loads(
        tidegauge(
            "query", "range", "--window", "30s/sliding", "--from", str(since), "--to",
            str(until), "--json", "--redis", run["url"],
        ).stdout
    )  # fmt: skip
    assert (got["peak_events"], got["peak_start"]) == (best.peak_events, best.peak_start)
    assert got["peak_rows"] == len(inside) and got["count"] > 0
    shown = tidegauge(
        "query", "range", "--window", "30s/sliding", "--from", str(since), "--to", str(until),
        "--redis", run["url"],
    ).stdout  # fmt: skip
    assert f"peak_events     {best.peak_events}" in shown
