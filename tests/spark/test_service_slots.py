"""`--max-services` is the job's limit, not each state shard's share of it.

Exactly 1,000 services (the default limit) and the default 4 state shards, through the real
broker, the job and Redis, 1,000 records a batch: each of the first three rounds of events names
every service once, in its own 10 s window, and a fourth round adds 200 new names. Names do not
hash evenly onto the shards, so in the first batch a shard with more than its 250 slots sends
its last names to "(other)"; from the second batch on, the free slots the other shards left are
its, and every one of the 1,000 services is counted under its own name. The 200 names beyond
the limit count under "(other)", and the job never tracks more than 1,000.

The ground truth is computed here from the names alone: Spark's hash places each name in its
shard (jobs/summary/shards.py, checked against Spark in test_shards.py) and each shard admits
its names in Kafka order.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from jobs.summary.shards import shard_of
from tests.integration.helpers import send_events
from tidegauge.core.events import OVERFLOW_SERVICE, Event
from tidegauge.core.store import ALL_SERVICES, Keys, read_batches, read_windows
from tidegauge.core.windows import WindowSpec

T0 = 1_780_000_000_000  # on a 10 s boundary
WINDOW_MS = 10_000
LIMIT, SHARDS = 1_000, 4
NAMES = [f"svc-{i:04d}" for i in range(LIMIT)]
EXTRA = [f"new-{i:03d}" for i in range(200)]


def stream() -> list[Event]:
    """Rounds 0-2: every service once, in window k; round 3: them and 200 new names."""
    out = []
    for k in range(4):
        names = NAMES + EXTRA if k == 3 else NAMES
        for i, name in enumerate(names):
            out.append(Event(f"e{k}-{i}", T0 + k * WINDOW_MS + i * 4, name, latency_ms=1.0))
    return out


def first_batch_overflow() -> list[str]:
    """The names a new job's first batch (all 1,000, in this order) counts under (other)."""
    seen: Counter[int] = Counter()
    over = []
    for name in NAMES:
        shard = shard_of(name, SHARDS)
        seen[shard] += 1
        if seen[shard] > LIMIT // SHARDS:
            over.append(name)
    return over


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("slots")
    topic = "exactly-the-limit"
    url = module_redis_db().url
    send_events(broker.address, topic, stream())
    job_in_process(
        topic,
        url,
        str(tmp / "checkpoint"),
        window="10s",
        max_services=str(LIMIT),
        state_shards=str(SHARDS),
        max_records_per_trigger="1000",
    )
    r = redis.Redis.from_url(url)
    rows = read_windows(r, Keys(), WindowSpec.tumbling(WINDOW_MS))
    by_window: dict[int, dict[str, int]] = {}
    for row in rows:
        by_window.setdefault(row.window_start - T0, {})[row.service] = row.count
    return {"windows": by_window, "batches": read_batches(r, Keys())}


def test_names_hash_unevenly_so_a_shard_overflows_in_the_first_batch() -> None:
    over = first_batch_overflow()
    assert 0 < len(over) < 100  # the case worth testing: without quotas these stay in (other)


def test_the_first_batch_counts_a_full_shards_last_names_under_other(run: dict[str, Any]) -> None:
    over = set(first_batch_overflow())
    want = {name: 1 for name in NAMES if name not in over}
    want[OVERFLOW_SERVICE] = len(over)
    want[ALL_SERVICES] = LIMIT
    assert run["windows"][0] == want


@pytest.mark.parametrize("k", [1, 2])
def test_from_the_second_batch_every_service_has_its_own_name(run: dict[str, Any], k: int) -> None:
    got = run["windows"][k * WINDOW_MS]
    assert got.get(OVERFLOW_SERVICE, 0) == 0
    assert {s: n for s, n in got.items() if s != OVERFLOW_SERVICE} == {
        **dict.fromkeys(NAMES, 1),
        ALL_SERVICES: LIMIT,
    }


def test_names_beyond_the_limit_count_under_other(run: dict[str, Any]) -> None:
    got = run["windows"][3 * WINDOW_MS]
    assert got == {**dict.fromkeys(NAMES, 1), OVERFLOW_SERVICE: len(EXTRA), ALL_SERVICES: 1200}


def test_the_status_counts_overflowed_names_by_batch(run: dict[str, Any]) -> None:
    overflow = [(b.get("overflow") or {}).get("names", 0) for b in run["batches"]]
    assert overflow == [len(first_batch_overflow()), 0, 0, 0, len(EXTRA)]
