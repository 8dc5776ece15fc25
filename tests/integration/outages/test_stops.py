"""The job's processes killed or stopped by a supervisor; a fresh checkpoint after an older run."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests import procs
from tests.integration.fixtures import PersistentRedis, job_args, snapshot
from tests.integration.helpers import tidegauge
from tests.integration.outages.helpers import (
    Job,
    finished_like_the_reference,
    same_as_the_reference,
)
from tidegauge.core.store import Keys, read_batches, read_status


def test_python_workers_killed_mid_stream(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path, "--verbose")
    killed: set[int] = set()
    try:
        job.wait_for_batches(r, 2)
        deadline = time.monotonic() + 30
        # Workers on a core (running a task) until a task was lost: an idle worker's death costs
        # no task (Spark drops it from its pool), and the stream's batches are short. At most
        # three, fewer than a task's attempts, whichever task they ran.
        while "Lost task" not in job.output() and len(killed) < 3:
            assert time.monotonic() < deadline, f"no task lost to a killed worker\n{job.output()}"
            for w in procs.python_task_workers(procs.descendants(job.proc.pid)):
                st = procs.stat(w)
                if st is not None and st[0] == "R" and len(killed) < 3:
                    os.kill(w, signal.SIGKILL)
                    killed.add(w)
            time.sleep(0.01)
        job.wait_until_drained(r, reference, 180)
    finally:
        code = job.stop()
    out = job.output()
    assert code == 0, out
    assert "Lost task" in out, out  # a task did fail, and its retry carried the batch
    same_as_the_reference(reference, own_redis.url)


@pytest.mark.parametrize("how", ["process-group", "every-process"])
def test_a_supervisor_stopping_the_whole_job_is_a_clean_stop_and_a_restart_resumes(
    how: str, reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    """SIGTERM to the job's process group (`kill -- -PGID`, a terminal's or a container
    runtime's stop), or to every process of it at once, Spark's JVM and Python workers
    included (systemd's default KillMode=control-group): one stop line, exit 0, nothing left
    running, and the next start from the checkpoint ends exactly where an uninterrupted run
    does."""
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path)
    try:
        job.wait_for_batches(r, 2)
        pids = {job.proc.pid, *procs.descendants(job.proc.pid)}
        assert len(pids) >= 2, "no JVM under the job"
        if how == "process-group":
            os.killpg(job.proc.pid, signal.SIGTERM)
        else:
            for pid in procs.living(pids):
                with contextlib.suppress(ProcessLookupError):  # ended since it was listed
                    os.kill(pid, signal.SIGTERM)
        job.proc.wait(60)
    finally:
        code = job.stop()
    out = job.output()
    assert code == 0, out
    assert out.count("tidegauge job: stopped") == 1 and "failed" not in out, out
    procs.wait_until(lambda: not procs.living(pids), 30, "every process of the job to exit")
    finished_like_the_reference(reference, own_redis.url, tmp_path)


def test_the_jvm_and_workers_end_with_a_driver_killed_outright(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    """SIGKILL to the driver alone (the OOM killer, `kill -9 PID`): Spark's JVM, in a session
    of its own, and its Python workers must not outlive it; a restart then resumes."""
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path)
    try:
        job.wait_for_batches(r, 2)
        pids = procs.descendants(job.proc.pid)
        assert pids, "no JVM under the job"
        os.kill(job.proc.pid, signal.SIGKILL)
        job.proc.wait(10)
        procs.wait_until(lambda: not procs.living(pids), 30, "the JVM and workers to exit")
    finally:
        job.stop()
    finished_like_the_reference(reference, own_redis.url, tmp_path)


def test_a_fresh_checkpoint_takes_over_the_status_of_an_older_run(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    older = tmp_path / "older"
    tidegauge(
        *job_args(reference["broker"], reference["topic"], own_redis.url, older, "available-now")
    )
    old = read_status(r, Keys())
    assert old is not None and old.batch_id >= 5
    # the same stream again with a new checkpoint (a new query): batch ids start again at 0
    newer = tmp_path / "newer"
    tidegauge(
        *job_args(reference["broker"], reference["topic"], own_redis.url, newer, "available-now")
    )
    status = read_status(r, Keys())
    assert status is not None and status.query_id != old.query_id
    history = read_batches(r, Keys())
    assert {b["query_id"] for b in history} == {status.query_id}
    assert status.batch_id == history[-1]["batch_id"] == max(b["batch_id"] for b in history)
    assert status.offsets == reference["offsets"]
    assert snapshot(r) == reference["snapshot"]  # the windows: the same absolute values again
