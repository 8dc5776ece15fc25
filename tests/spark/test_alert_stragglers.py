"""Alerts over a window the job revises: stragglers push it over, under, over; then it closes.

The same story as tests/integration/test_alerts.py, but the store is written by the real job
(broker, local Spark session, sink) instead of by its sink code directly: events go to a
one-partition topic in four rounds, the job drains each round (available-now, one checkpoint),
and `tidegauge alerts --once` (a real process) evaluates after each. Window 2 stays open through
rounds 1-3 (30 s of allowed lateness), so its fast and slow stragglers revise its p99 in place;
round 4 moves the watermark past it. The evaluator must say provisional, retracted, confirmed,
each once, for one firing, and the job must count every straggler it accepted.
"""

from __future__ import annotations

import json
from itertools import count
from typing import Any

import pytest
import redis
from kafka import KafkaProducer

from tests.integration.helpers import tidegauge
from tidegauge.core.events import Event, encode_event
from tidegauge.core.store import Keys, read_windows
from tidegauge.core.windows import WindowSpec

W = 10_000
T0 = 1_780_000_020_000  # on a 10 s boundary
RULE = "p99 > 800 for 3 on api"
_ids = count()


def events(window: int, n: int, latency: float, offset_ms: int = 1_000) -> list[Event]:
    """`n` requests of "api" inside window `window`, spread over 8 s from `offset_ms` in."""
    start = T0 + window * W + offset_ms
    return [
        Event(f"e{next(_ids)}", start + (i * 8_000) // n, "api", f"u{i % 50}", latency, 200)
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def story(  # type: ignore[no-untyped-def]
    broker, module_redis_db, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("alert-stragglers")
    topic = "alert-stragglers"
    url = module_redis_db().url
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "1")
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=20)
    rounds = [
        # windows 0-2 slow; a fast event at 35 s leaves the watermark (35 s - 30 s) in window 0
        events(0, 100, 900.0) + events(1, 100, 950.0) + events(2, 100, 900.0)
        + events(3, 10, 100.0, offset_ms=5_000),
        events(2, 19_900, 100.0),  # fast stragglers: window 2's p99 falls to 100 ms
        events(2, 400, 2_000.0),  # slow stragglers: over again while still open
        events(7, 10, 100.0),  # event time 71 s: the watermark (41 s) closes window 2
    ]  # fmt: skip
    said = []
    for batch in rounds:
        for e in batch:
            producer.send(topic, encode_event(e), timestamp_ms=e.event_time)
        producer.flush()
        job_in_process(topic, url, str(tmp / "checkpoint"), window="10s", allowed_lateness="30s")
        said.append(tidegauge("alerts", "--once", "--rule", RULE, "--redis", url).stdout)
    producer.close()
    return {"url": url, "said": said, "rounds": rounds}


def test_the_evaluator_follows_the_revisions_forward_only(story: dict[str, Any]) -> None:
    said = story["said"]
    assert "PROVISIONAL" in said[0]
    assert "RETRACTED" in said[1]
    assert not any(s in said[2] for s in ("PROVISIONAL", "RETRACTED", "CONFIRMED"))  # no flap
    assert "CONFIRMED" in said[3]
    notices = json.loads(tidegauge("query", "alerts", "--json", "--redis", story["url"]).stdout)[
        "notices"
    ]
    assert [n["state"] for n in notices] == ["confirmed", "retracted", "provisional"]
    assert len({n["firing"]["id"] for n in notices}) == 1
    firing = notices[0]["firing"]
    assert (firing["start"], firing["end"], firing["windows"]) == (T0, T0 + 3 * W, 3)
    assert firing["peak"] >= 1_900  # window 2's p99 after the slow stragglers


def test_the_job_accepted_every_straggler_into_window_2(story: dict[str, Any]) -> None:
    r = redis.Redis.from_url(story["url"])
    rows = {(w.window_start, w.service): w for w in read_windows(r, Keys(), WindowSpec.tumbling(W))}
    window2 = rows[(T0 + 2 * W, "api")]
    assert window2.count == 100 + 19_900 + 400
    assert window2.stragglers == 19_900 + 400
    assert window2.late == 0
