"""Clock-skew correction, end to end: devices with wrong clocks, with and without the fix.

A seeded stream where 40 % of the users' devices have clocks off by up to two minutes goes
through a real broker into two jobs (same topic, separate Redis databases and checkpoints):
one plain, one with `--correct-clock-skew`. The test rebuilds, from the ground truth and the
job's recorded batch boundaries, the correction the job must apply (per device: the median of
broker receive time - device send time over its records of that partition and batch), and
asserts the corrected job's window counts equal it exactly, the plain job's equal the raw event
times, and that the correction puts >= 99 % of events in the window of their true time while
the raw times manage < 90 %.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from statistics import median_low

import pytest
import redis

from tests.integration.helpers import batch_rows, load_truth, tidegauge
from tidegauge.core.store import Keys, read_batches

WINDOW = 10_000


def _window(t: int) -> int:
    return t - t % WINDOW


@pytest.fixture(scope="module")
def skewed(  # type: ignore[no-untyped-def]
    broker, module_redis_db, produce, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict:
    tmp = tmp_path_factory.mktemp("skew")
    topic = "skewed-events"
    truth_path = tmp / "truth.jsonl"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    produce(
        topic,
        start_time="2026-02-01T00:00:00Z",
        count="4000",
        rate="50",
        seed="11",
        users="300",
        zipf="0.5",
        scenario="skewed-clocks",
        skew_fraction="0.4",
        max_skew="2m",
        out_of_order_fraction="0",
        truth=str(truth_path),
    )
    runs = {}
    for correct in (True, False):
        url = module_redis_db().url
        job_in_process(
            topic,
            url,
            tmp / f"ckpt-{correct}",
            window="10s",
            allowed_lateness="5m",
            max_records_per_trigger=1000,
            correct_clock_skew=correct,
        )
        runs[correct] = url
    return {"truth": load_truth(truth_path), "runs": runs}


def _counts(url: str) -> dict[tuple[int, str], int]:
    rows = json.loads(tidegauge("query", "windows", "--redis", url, "--json").stdout)
    return {(r["window_start"], r["service"]): r["count"] for r in rows if r["count"]}


def _corrected(truth: list[dict], batches: list[dict]) -> dict[int, int]:
    """seq -> corrected event time, rebuilt the way the job must do it."""
    out = {}
    for rows in batch_rows(truth, batches):
        by_part: dict[int, list[dict]] = defaultdict(list)
        for t in rows:
            if t["kind"] == "event":
                by_part[t["partition"]].append(t)
        for events in by_part.values():
            per_device: dict[str, list[int]] = defaultdict(list)
            for t in events:
                if t["user_id"] is not None:
                    per_device[t["user_id"]].append(t["receive_ms"] - t["sent_time"])
            for t in events:
                own = t["receive_ms"] - t["sent_time"]
                offset = own if t["user_id"] is None else median_low(per_device[t["user_id"]])
                out[t["seq"]] = t["event_time"] + offset
    return out


def test_correction_puts_events_in_their_true_windows(skewed: dict) -> None:
    truth = skewed["truth"]
    events = [t for t in truth if t["kind"] == "event"]
    skewed_events = [t for t in events if t["skew_ms"]]
    assert len(skewed_events) > len(events) * 0.25, "the stream must carry enough skew"

    r = redis.Redis.from_url(skewed["runs"][True])
    corrected = _corrected(truth, read_batches(r, Keys()))
    assert len(corrected) == len(events)
    right = sum(_window(corrected[t["seq"]]) == _window(t["true_time"]) for t in events)
    raw_right = sum(_window(t["event_time"]) == _window(t["true_time"]) for t in events)
    assert right / len(events) >= 0.99
    assert raw_right / len(events) < 0.90

    expected: Counter[tuple[int, str]] = Counter()
    raw: Counter[tuple[int, str]] = Counter()
    for t in events:
        for svc in (t["service"], "*"):
            expected[(_window(corrected[t["seq"]]), svc)] += 1
            raw[(_window(t["event_time"]), svc)] += 1
    assert _counts(skewed["runs"][True]) == dict(expected)
    assert _counts(skewed["runs"][False]) == dict(raw)
