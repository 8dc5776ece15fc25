"""The broker stopped mid-stream, and for longer than the Kafka client's request timeout."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import redis

from tests.integration.fixtures import PersistentRedis
from tests.integration.outages.helpers import Job, same_as_the_reference


def test_broker_stopped_for_30s_mid_stream(
    reference: dict[str, Any],
    broker,
    own_redis: PersistentRedis,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path)
    try:
        job.wait_for_batches(r, 2)
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(30)
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        job.wait_until_drained(r, reference, 180)
    finally:
        code = job.stop()
    assert code == 0, job.output()
    same_as_the_reference(reference, own_redis.url)


def test_a_broker_pause_longer_than_the_request_timeout_is_waited_out(
    reference: dict[str, Any],
    broker,
    own_redis: PersistentRedis,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """The topic drained, only the planner asks the broker (for the next batch's offsets); its
    requests time out (5 s here) while the broker is stopped, and are asked again."""
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path, "--kafka-option", "request_timeout_ms=5000")
    try:
        job.wait_until_drained(r, reference, 180)
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(14)  # nearly three request timeouts
            assert job.proc.poll() is None, job.output()
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        time.sleep(3)
        assert job.proc.poll() is None, job.output()
    finally:
        code = job.stop()
    assert code == 0, job.output()
    same_as_the_reference(reference, own_redis.url)
