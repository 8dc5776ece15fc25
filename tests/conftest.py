"""Session-scoped real services: a Kafka-protocol broker, redis-server, one local SparkSession.

Every tier runs in CI: a service that cannot start is a test error, never a skip.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.local.services import Service, start_broker, start_redis
from tidegauge.core.config import KafkaSettings, RedisSettings
from tidegauge.traffic.topics import ensure_topic

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


class RedisDatabases:
    """The session redis-server's 16 databases, handed out flushed, one holder at a time.

    No test names a database number: a test takes one from here and gives it back when done,
    so module-scoped runs and per-test databases never share one.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self._free = list(range(16))

    def acquire(self) -> RedisSettings:
        if not self._free:
            raise RuntimeError("all 16 Redis databases are held: release some in teardown")
        settings = RedisSettings(url=f"redis://{self.address}/{self._free.pop(0)}")
        client = redis.Redis.from_url(settings.url)
        client.flushdb()
        client.close()
        return settings

    def release(self, settings: RedisSettings) -> None:
        self._free.append(int(settings.url.rsplit("/", 1)[1]))


@pytest.fixture(scope="session")
def redis_databases(redis_server: Service) -> RedisDatabases:
    return RedisDatabases(redis_server.address)


def _db_factory(databases: RedisDatabases) -> Iterator[Callable[[], RedisSettings]]:
    held: list[RedisSettings] = []

    def make() -> RedisSettings:
        held.append(databases.acquire())
        return held[-1]

    yield make
    for settings in held:
        databases.release(settings)


@pytest.fixture
def redis_db(redis_databases: RedisDatabases) -> Iterator[Callable[[], RedisSettings]]:
    """Factory: a flushed database of its own per call, for this test."""
    yield from _db_factory(redis_databases)


@pytest.fixture(scope="module")
def module_redis_db(redis_databases: RedisDatabases) -> Iterator[Callable[[], RedisSettings]]:
    """Factory: a flushed database of its own per call, for this test module."""
    yield from _db_factory(redis_databases)


@pytest.fixture
def redis_settings(redis_db: Callable[[], RedisSettings]) -> RedisSettings:
    """A flushed Redis database of its own for one test."""
    return redis_db()


@pytest.fixture
def redis_client(redis_settings: RedisSettings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_settings.url)
    yield client
    client.close()


#: The longest test files, longest first, as measured on CI's 2 cores (minutes in a comment).
#: `make test` hands whole files to its two workers in collection order (xdist's
#: `--no-loadscope-reorder`), each taking the next when it is done; a long file taken last
#: keeps one worker busy while the other idles, so these go first and the many short files
#: even out the end.
LONGEST_FIRST = (
    "integration/test_dashboard_browser.py",  # 5.6
    "integration/test_chaos.py",  # 5.0
    "integration/outages/test_stops.py",  # ~7 with its reference run
    "integration/outages/test_redis.py",  # ~5
    "integration/outages/test_broker.py",  # ~4
    "integration/test_redis_security.py",  # 3.5
    "integration/test_retention.py",  # 2.9
    "integration/test_job_replay.py",  # 2.9
    "integration/test_live_time.py",  # 2.7
    "integration/test_catalog_join.py",  # 2.3
    "integration/test_real_producers.py",  # 1.9
    "integration/test_access_logs.py",  # 1.7
    "integration/test_job_end_to_end.py",  # 1.7
    "integration/test_demo.py",  # 1.7
    "unit/tidegauge/traffic/test_generator.py",  # 1.7
    "integration/test_produce.py",  # 1.6
    "integration/test_metrics.py",  # 1.5
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder (tests/unit -> unit, ...); put the longest files first."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in ("unit", "accuracy", "spark", "integration"):
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def first(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).as_posix()
        return next((r for name, r in rank.items() if path.endswith("tests/" + name)), len(rank))

    items.sort(key=first)  # stable: the rest keep their order, each file's tests together


__all__ = ["Path"]


# --- the CLI as factories: `produce` and `job` with the suite's defaults -------------------------


def flags(**options: object) -> list[str]:
    """Keyword options as CLI flags: `allowed_lateness="20s"` -> `--allowed-lateness 20s`.

    True is a bare flag, False and None are left out, a list or tuple repeats the flag.
    """
    out: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list | tuple):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


@pytest.fixture(scope="session")
def produce(broker: Service) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`tidegauge produce` on the session broker: fast pace and quiet unless told otherwise."""
    from tests.integration.helpers import tidegauge

    def run(topic: str, *, env: dict[str, str] | None = None, **options: object) -> Any:
        options = {"pace": "fast", "quiet": True, **options}
        return tidegauge(
            "produce", *flags(bootstrap=broker.address, topic=topic, **options), env=env
        )

    return run


@pytest.fixture(scope="session")
def job(broker: Service) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`tidegauge job` on the session broker: available-now on local[2] unless told otherwise."""
    from tests.integration.helpers import tidegauge

    def run(
        topic: str,
        redis_url: str,
        checkpoint: object,
        *,
        env: dict[str, str] | None = None,
        check: bool = True,
        **options: object,
    ) -> Any:
        options = {"trigger": "available-now", "master": "local[2]", **options}
        args = flags(
            bootstrap=broker.address, topic=topic, redis=redis_url, checkpoint=checkpoint, **options
        )
        return tidegauge("job", *args, env=env, check=check)

    return run


# --- the spark tier: one local SparkSession, streaming queries in this process -------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every test of tests/spark (JVM started once)."""
    from jobs.runtime.session import build_session

    session = build_session("local[2]", app_name="tidegauge-tests", ui=False)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def job_in_process(spark: Any, broker: Service) -> Callable[..., Any]:
    """`tidegauge job`'s configuration from the same flags, run as a query of the shared session.

    For tests that need the job's results but not a job process of its own (the CLI's own
    behaviour is tested through `job`). Runs until available-now has drained the topic; the
    query is stopped in `run_job`'s finally, even when it fails.
    """
    import argparse

    from jobs.cli import add_arguments
    from jobs.pipeline import run_job
    from tidegauge.core.config import job_config_from_args

    def run(topic: str, redis_url: str, checkpoint: object, **options: object) -> Any:
        options = {"trigger": "available-now", **options}
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(
            flags(
                bootstrap=broker.address,
                topic=topic,
                redis=redis_url,
                checkpoint=checkpoint,
                **options,
            )
        )
        return run_job(job_config_from_args(args), spark)

    return run
