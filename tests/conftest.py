"""Session-scoped real services: a Kafka-protocol broker, redis-server, one local SparkSession.

Every tier runs in CI: a service that cannot start is a test error, never a skip.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tidegauge.core.config import KafkaSettings, RedisSettings
from tidegauge.core.topics import ensure_topic
from tidegauge.local.services import Service, start_broker, start_redis

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start_broker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log")
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start_redis(log_path=tmp_path_factory.mktemp("redis") / "redis.log")
    yield svc
    svc.stop()


_topic_ids = itertools.count()


@pytest.fixture
def topic_factory(broker: Service, request: pytest.FixtureRequest) -> Callable[..., KafkaSettings]:
    """Make a fresh topic (3 partitions by default) on the session broker."""

    def make(partitions: int = 3) -> KafkaSettings:
        name = f"t{next(_topic_ids)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
        kafka = KafkaSettings(bootstrap=broker.address, topic=name)
        ensure_topic(kafka, partitions)
        return kafka

    return make


_db_ids = itertools.count(1)


@pytest.fixture
def redis_settings(redis_server: Service) -> Iterator[RedisSettings]:
    """A flushed Redis database of its own for one test."""
    db = next(_db_ids) % 16
    settings = RedisSettings(url=f"redis://{redis_server.address}/{db}")
    client = redis.Redis.from_url(settings.url)
    client.flushdb()
    yield settings
    client.close()


@pytest.fixture
def redis_client(redis_settings: RedisSettings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_settings.url)
    yield client
    client.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder: tests/unit -> unit, tests/spark -> spark, and so on."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in ("unit", "accuracy", "spark", "integration"):
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


__all__ = ["Path"]
