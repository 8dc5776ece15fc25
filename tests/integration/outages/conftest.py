"""The outages' fixtures: the stream, what an uninterrupted run leaves, a Redis of its own."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.local.services import free_port
from tests.integration.fixtures import PersistentRedis, job_args, snapshot
from tests.integration.helpers import tidegauge
from tests.integration.outages.helpers import TOTAL
from tidegauge.core.store import Keys, read_status


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[PersistentRedis]:
    r = PersistentRedis(free_port(), tmp_path)
    r.start()
    try:
        yield r
    finally:
        if r.proc is not None and r.proc.poll() is None:
            r.signal(signal.SIGCONT)
        r.stop()


@pytest.fixture(scope="module")
def reference(broker, module_redis_db, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The stream, and what an uninterrupted run leaves in Redis."""
    tmp = tmp_path_factory.mktemp("outages")
    topic = "outage-events"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic)
    tidegauge(
        "produce",
        *("--bootstrap", broker.address, "--topic", topic, "--pace", "fast"),
        *("--start-time", "2026-03-01T12:00:00Z", "--count", str(TOTAL), "--rate", "50"),
        *("--seed", "11", "--out-of-order-fraction", "0.1", "--max-delay", "6s"),
        *("--late-fraction", "0.05", "--lateness", "15s", "--malformed-fraction", "0.02"),
        *("--duplicate-fraction", "0.02", "--quiet"),
    )
    url = module_redis_db().url
    tidegauge(*job_args(broker.address, topic, url, tmp / "reference", "available-now"))
    client = redis.Redis.from_url(url)
    status = read_status(client, Keys())
    assert status is not None
    return {
        "broker": broker.address,
        "topic": topic,
        "snapshot": snapshot(client),
        "offsets": status.offsets,
        "watermark": status.watermark,
    }
