"""A backlog read in capped batches loses nothing to lateness, however unevenly keys fill the
partitions.

Keys spread records over partitions unevenly (here 60 / 30 / 10 %); each partition's log covers
the same two minutes of event time. The job reads the backlog with `--max-records-per-trigger`
a sixth of it and a tight `--allowed-lateness 5s`. Each batch takes the same fraction of
every partition (jobs/source/kafka_source.py `split_limit`), so the partitions move through
event time together, the watermark never passes records still unread, and every window holds
every event: none is late. (Equal shares per partition ran the emptiest one through its whole
span first, and its watermark made most of the fuller ones' records late.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from tests.integration.helpers import send_events
from tidegauge.core.events import Event
from tidegauge.core.store import ALL_SERVICES, Keys, read_batches, read_late_counters, read_windows
from tidegauge.core.windows import WindowSpec

T0 = 1_780_000_000_000  # on a 10 s boundary
WINDOW_MS = 10_000
EVENTS = 12_000
SPAN_MS = 120_000
#: Partition of event i: six in ten to partition 0, three to 1, one to 2.
PARTITION = [0, 0, 0, 0, 0, 0, 1, 1, 1, 2]


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("capped")
    topic = "uneven-backlog"
    url = module_redis_db().url
    events = [
        Event(f"e{i}", T0 + i * SPAN_MS // EVENTS, f"svc-{i % 7}", latency_ms=1.0)
        for i in range(EVENTS)
    ]
    send_events(broker.address, topic, events, 3, lambda i: PARTITION[i % 10])
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window="10s",
        allowed_lateness="5s",
        max_records_per_trigger=str(EVENTS // 6),
    )
    r = redis.Redis.from_url(url)
    return {
        "events": events,
        "rows": read_windows(r, Keys(), WindowSpec.tumbling(WINDOW_MS)),
        "batches": read_batches(r, Keys()),
        "late": read_late_counters(r, Keys()),
    }


def test_the_backlog_took_several_capped_batches(run: dict[str, Any]) -> None:
    taken = [int(b["input_rows"]) for b in run["batches"] if int(b["input_rows"])]
    assert len(taken) >= 6


def test_no_event_of_a_capped_backlog_is_late(run: dict[str, Any]) -> None:
    assert run["late"].tidegauge == 0


def test_every_window_holds_every_event(run: dict[str, Any]) -> None:
    want = Counter(e.event_time - e.event_time % WINDOW_MS for e in run["events"])
    got = {r.window_start: r.count for r in run["rows"] if r.service == ALL_SERVICES}
    assert got == dict(want)
