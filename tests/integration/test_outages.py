"""Outages survived: Redis or the broker gone mid-stream, and the job ends where it would have.

Each test runs `tidegauge job` as a process, continuously (500 ms trigger, 400 records per
batch), over the seeded stream of tests/integration/test_job_replay.py, and breaks something
after a few batches: Redis stopped (SIGSTOP) for 60 s, Redis restarted with persistence on,
Redis gone for longer than `--sink-retry-for`, the broker stopped for 30 s, or (the topic
drained) for longer than the Kafka client's request timeout. Then the job must
have drained the topic and Redis must hold exactly what an uninterrupted run wrote
(`snapshot`), and the job's log must say what happened. docs/reliability.md lists these.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.local.services import free_port
from tests import procs
from tests.integration.fixtures import PersistentRedis, job_args, snapshot
from tests.integration.helpers import tidegauge
from tidegauge.core.store import Keys, read_batches, read_status

TOTAL = 3_000  # records of the stream (events, duplicates, malformed)


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


def _same_as_the_reference(reference: dict[str, Any], url: str) -> None:
    assert snapshot(redis.Redis.from_url(url)) == reference["snapshot"]


def _finished_like_the_reference(reference: dict[str, Any], url: str, workdir: Path) -> None:
    """Drain what is left with available-now from the same checkpoint, then compare."""
    tidegauge(
        *job_args(reference["broker"], reference["topic"], url, workdir / "cp", "available-now")
    )
    assert snapshot(redis.Redis.from_url(url)) == reference["snapshot"]


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
    _same_as_the_reference(reference, own_redis.url)


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
    _same_as_the_reference(reference, own_redis.url)


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
    _finished_like_the_reference(reference, own_redis.url, tmp_path)


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
    _same_as_the_reference(reference, own_redis.url)


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
    _same_as_the_reference(reference, own_redis.url)


def _python_workers() -> list[int]:
    """The Python worker processes Spark forked from the job's worker daemon for tasks."""
    daemons = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and b"jobs.runtime.worker_daemon" in _cmdline(p)
    ]
    # forked task workers carry the daemon's command line; the driver's source runner does not
    # (it is not a task: Spark has no retry for it)
    return [
        w
        for d in daemons
        for w in procs.children(d)
        if b"jobs.runtime.worker_daemon" in _cmdline(Path(f"/proc/{w}"))
    ]


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def test_python_workers_killed_mid_stream(
    reference: dict[str, Any], own_redis: PersistentRedis, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    job = Job(reference, own_redis.url, tmp_path, "--verbose")
    killed: set[int] = set()
    try:
        job.wait_for_batches(r, 2)
        deadline = time.monotonic() + 20
        while len(killed) < 3 and time.monotonic() < deadline:  # whatever task they ran
            for pid in _python_workers():
                if pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
            time.sleep(0.3)
        assert killed, "no Python worker to kill"
        job.wait_until_drained(r, reference, 180)
    finally:
        code = job.stop()
    out = job.output()
    assert code == 0, out
    assert "Lost task" in out, out  # a task did fail, and its retry carried the batch
    _same_as_the_reference(reference, own_redis.url)


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
    _finished_like_the_reference(reference, own_redis.url, tmp_path)


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
    _finished_like_the_reference(reference, own_redis.url, tmp_path)


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
