"""The cardinality guard: 20,000 service names, at most `--max-services` tracked at once.

A producer that puts a request id into `service` (20,000 distinct names among 30,000 events, and
20 real services) goes through the real broker, the job with `--max-services 1000` and Redis.
Then: no window holds more than 1,000 named services; the real services, seen first, are exact;
every name that kept its own row is exact; the rest sit under "(other)", so every window's
services add up to the window's true count and "*" is exact; the status history counts the
names and events that overflowed, and `tidegauge query status` says so.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import redis

from tests.integration.helpers import send_events, tidegauge
from tidegauge.core.events import OVERFLOW_SERVICE, Event
from tidegauge.core.store import ALL_SERVICES, Keys, read_batches, read_windows
from tidegauge.core.windows import WindowSpec

T0 = 1_780_000_000_000  # 2026-05-28T20:26:40Z, on a 10 s boundary
WINDOW_MS = 10_000
MAX_SERVICES = 1_000
REAL = [f"svc-{i:02d}" for i in range(20)]


def stream() -> list[Event]:
    """30,000 events in event-time order over 60 s: every third of a real service (the first
    60 events name all 20), the others each with a name of its own."""
    out = []
    for i in range(30_000):
        name = REAL[(i // 3) % len(REAL)] if i % 3 == 0 else f"req-{i:05d}"
        out.append(Event(f"e{i}", T0 + i * 2, name, latency_ms=float(i % 50), status=200))
    return out


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("cardinality")
    topic = "many-names"
    url = module_redis_db().url
    # one partition: the stream is in event-time order, so no event is late
    events = stream()
    send_events(broker.address, topic, events)
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window="10s",
        allowed_lateness="5s",
        max_services=str(MAX_SERVICES),
        max_records_per_trigger="5000",
    )
    r = redis.Redis.from_url(url)
    rows = read_windows(r, Keys(), WindowSpec.tumbling(WINDOW_MS))
    return {"url": url, "client": r, "events": events, "rows": rows}


def truth(events: list[Event]) -> Counter[tuple[int, str]]:
    return Counter((e.event_time - e.event_time % WINDOW_MS, e.service) for e in events)


def test_stream_has_20000_names(run: dict[str, Any]) -> None:
    assert len({e.service for e in run["events"]}) == 20_000 + len(REAL)


def test_no_window_tracks_more_than_max_services(run: dict[str, Any]) -> None:
    named: Counter[int] = Counter()
    for row in run["rows"]:
        if row.service not in (ALL_SERVICES, OVERFLOW_SERVICE):
            named[row.window_start] += 1
    assert named and max(named.values()) <= MAX_SERVICES
    # names hold their slots while they are idle for less than an hour: the first 1,000 of
    # the run, and no others, have rows of their own
    distinct = {r.service for r in run["rows"]} - {ALL_SERVICES, OVERFLOW_SERVICE}
    assert set(REAL) <= distinct and len(distinct) <= MAX_SERVICES
    assert any(row.service == OVERFLOW_SERVICE and row.count > 0 for row in run["rows"])


def test_windows_add_up_and_named_services_are_exact(run: dict[str, Any]) -> None:
    want = truth(run["events"])
    per_window: Counter[int] = Counter()
    for (start, _), n in want.items():
        per_window[start] += n
    got_total: Counter[int] = Counter()
    for row in run["rows"]:
        if row.service == ALL_SERVICES:
            assert row.count == per_window[row.window_start]
        else:
            got_total[row.window_start] += row.count
        if row.service not in (ALL_SERVICES, OVERFLOW_SERVICE):
            assert row.count == want[(row.window_start, row.service)], row.service
    assert got_total == per_window
    for start in per_window:
        for name in REAL:  # seen before the shards filled up: never overflowed
            assert any(
                r.window_start == start and r.service == name and r.count == want[(start, name)]
                for r in run["rows"]
            ), (start, name)


def test_status_counts_what_overflowed(run: dict[str, Any]) -> None:
    batches = read_batches(run["client"], Keys())
    overflow = [b["overflow"] for b in batches if b.get("overflow")]
    other = sum(r.count for r in run["rows"] if r.service == OVERFLOW_SERVICE)
    assert other > 10_000
    assert sum(o["events"] for o in overflow) == other
    assert max(o["names"] for o in overflow) > 1_000
    text = tidegauge("query", "status", "--redis", run["url"]).stdout
    assert "service names over --max-services:" in text and "none" not in text
    doc = json.loads(tidegauge("query", "status", "--redis", run["url"], "--json").stdout)
    assert doc["overflow"]["events"] == other


def test_the_overflow_name_is_reserved() -> None:
    from tidegauge.core.events import Rejected, parse_record

    got = parse_record(
        json.dumps({"event_id": "e", "event_time": T0, "service": "(other)"}).encode()
    )
    assert isinstance(got, Rejected) and got.reason.value == "invalid_value"
