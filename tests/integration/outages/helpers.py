"""The outages' job: `tidegauge job` in a process of its own; checks against the reference."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.fixtures import job_args, snapshot
from tests.integration.helpers import tidegauge
from tidegauge.core.store import Keys, read_batches, read_status

TOTAL = 3_000  # records of the stream (events, duplicates, malformed)


class Job:
    """`tidegauge job` running continuously in a process of its own, its output in a file."""

    def __init__(self, reference: dict[str, Any], url: str, workdir: Path, *extra: str) -> None:
        self.log = workdir / "job.log"
        args = job_args(reference["broker"], reference["topic"], url, workdir / "cp", "500ms")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args, *extra],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_batches(self, r: redis.Redis, n: int, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                if len([b for b in read_batches(r, Keys()) if b["input_rows"]]) >= n:
                    return
            except redis.RedisError:
                pass
            time.sleep(0.2)
        pytest.fail(f"fewer than {n} batches in {timeout_s}s:\n{self.output()}")

    def wait_until_drained(
        self, r: redis.Redis, reference: dict[str, Any], timeout_s: float
    ) -> None:
        """Until the job has read the whole topic and its watermark is where the reference's is."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                status = read_status(r, Keys())
                if (
                    status is not None
                    and status.offsets == reference["offsets"]
                    and status.watermark == reference["watermark"]
                ):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.3)
        pytest.fail(f"the job did not drain the topic in {timeout_s}s:\n{self.output()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            # the job alone, as `docker stop` or `kill` would: it stops its query and the JVM
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def same_as_the_reference(reference: dict[str, Any], url: str) -> None:
    assert snapshot(redis.Redis.from_url(url)) == reference["snapshot"]


def finished_like_the_reference(reference: dict[str, Any], url: str, workdir: Path) -> None:
    """Drain what is left with available-now from the same checkpoint, then compare."""
    tidegauge(
        *job_args(reference["broker"], reference["topic"], url, workdir / "cp", "available-now")
    )
    assert snapshot(redis.Redis.from_url(url)) == reference["snapshot"]
