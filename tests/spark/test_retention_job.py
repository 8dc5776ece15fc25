"""Retention tiers through the real job: a stream outlives its raw windows and is still answered.

Four minutes of event time (out-of-order and late events) go through the broker, the job with
`--retention 1m,20s:10m` and a real Redis: raw 10 s windows are kept one minute of event time,
then live on as 20 s roll-ups. After the run the raw windows of the first minutes are gone, and
`tidegauge query range` over the whole stream still equals the ground truth (replayed with the
job's own batch boundaries), late events included; `query windows` says which tiers answered.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from tests.integration.helpers import batch_rows, expected_windows, load_truth, tidegauge
from tidegauge.core.store import Keys, read_batches, read_lateness
from tidegauge.core.store.tiers import read_retention

WINDOW_MS = 10_000
LATENESS_MS = 10_000
START = "2026-03-01T00:00:00Z"
T0 = 1_772_323_200_000  # START in ms


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, produce, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("retention-job")
    topic = "retention-job"
    url = module_redis_db().url
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "2")
    produce(
        topic,
        start_time=START,
        count="2400",
        rate="10",
        seed="3",
        out_of_order_fraction="0.1",
        max_delay="5s",
        late_fraction="0.05",
        lateness="10s",
        duplicate_fraction="0",
        heartbeat_interval="1s",
        truth=str(tmp / "truth.jsonl"),
    )
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window="10s",
        allowed_lateness="10s",
        retention="1m,20s:10m",
        starting_offsets="earliest",
        max_records_per_trigger="200",
    )
    r = redis.Redis.from_url(url)
    batches = read_batches(r, Keys())
    accepted, late = expected_windows(
        batch_rows(load_truth(tmp / "truth.jsonl"), batches), WINDOW_MS, LATENESS_MS
    )
    return {"url": url, "client": r, "accepted": accepted, "late": late}


def test_the_raw_windows_of_the_first_minutes_are_gone(run: dict[str, Any]) -> None:
    r: redis.Redis = run["client"]
    stored = read_retention(r, Keys())
    assert stored is not None and stored.retention.text() == "1m,20s:10m"
    raw = [int(s) for s in r.zrange(Keys().window_index(str(WINDOW_MS)), 0, -1)]
    assert raw and min(raw) + WINDOW_MS > stored.watermark_ms - 60_000
    assert min(raw) >= T0 + 150_000  # four minutes streamed, the first 2.5 only as roll-ups
    assert r.zcard(Keys().window_index("r20000")) >= 7


def test_a_range_over_the_whole_stream_equals_the_truth(run: dict[str, Any]) -> None:
    out = tidegauge(
        "query",
        "range",
        "--redis",
        run["url"],
        "--from",
        START,
        "--to",
        "2026-03-01T00:03:30Z",  # the last 10 s: a raw window, its roll-up not inside
        "--json",
    ).stdout
    got = json.loads(out)
    assert got["covered_from"] == T0
    assert set(got["pieces"]) == {"r20000", str(WINDOW_MS)}
    want = sum(
        n
        for (start, svc), n in run["accepted"].items()
        if svc == "*" and got["covered_from"] <= start < got["covered_to"]
    )
    assert got["count"] == want > 1000
    assert "× 20s" in got["resolution"] and "× 10s" in got["resolution"]


def test_late_events_are_counted_across_the_tiers(run: dict[str, Any]) -> None:
    r: redis.Redis = run["client"]
    got = read_lateness(r, Keys(), T0, T0 + 300_000, "*")
    want = sum(n for (_, svc), n in run["late"].items() if svc == "*")
    assert got.late == want > 10
    assert set(got.spec.split("+")) == {"r20000", str(WINDOW_MS)}


def test_query_windows_says_which_tiers_answered(run: dict[str, Any]) -> None:
    out = tidegauge("query", "windows", "--redis", run["url"], "--service", "*").stdout
    lines = out.strip().splitlines()
    assert lines[0].startswith("window_start (UTC)")
    assert lines[-1].startswith("resolution: 20s roll-ups to 2026-03-01T00:0")
    assert lines[-1].endswith(", then 10s windows")
