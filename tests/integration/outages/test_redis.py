"""Redis stopped, restarted with persistence, or gone for longer than the retry budget."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import redis

from tests.integration.fixtures import PersistentRedis
from tests.integration.outages.helpers import (
    Job,
    finished_like_the_reference,
    same_as_the_reference,
)


def test_redis_stopped_for_60s_mid_stream(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path)
    try:
        job.wait_for_batches(r, 2)
        own_redis.signal(signal.SIGSTOP)
        time.sleep(60)
        own_redis.signal(signal.SIGCONT)
        job.wait_until_drained(r, reference, 180)
    finally:
        code = job.stop()
    assert code == 0, job.output()
    out = job.output()
    assert "unreachable" in out and "retrying with back-off for up to 10m" in out, out
    assert "reachable again after" in out, out
    same_as_the_reference(reference, own_redis.url)


def test_redis_restarted_with_persistence_mid_stream(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path)
    try:
        job.wait_for_batches(r, 2)
        own_redis.stop()
        time.sleep(10)
        own_redis.start()  # same port, same append-only file
        job.wait_until_drained(r, reference, 180)
    finally:
        code = job.stop()
    assert code == 0, job.output()
    assert "reachable again after" in job.output()
    same_as_the_reference(reference, own_redis.url)


def test_redis_gone_longer_than_the_retry_budget_stops_the_job_and_a_restart_resumes(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path, "--sink-retry-for", "8s")
    try:
        job.wait_for_batches(r, 2)
        own_redis.signal(signal.SIGSTOP)
        job.proc.wait(120)
    finally:
        own_redis.signal(signal.SIGCONT)
        code = job.stop()
    out = job.output()
    assert code == 1, out
    failed = [line for line in out.splitlines() if line.startswith("tidegauge job: failed:")]
    assert len(failed) == 1, out
    assert f"Redis at {own_redis.url}" in failed[0] and "--sink-retry-for 8s" in failed[0]
    assert "a restart resumes from the checkpoint" in failed[0]
    assert "Traceback" not in out
    finished_like_the_reference(reference, own_redis.url, tmp_path)
