"""The worker daemon forks from the driver's zygote (jobs/runtime/zygote.py), or runs itself.

Real processes, no Spark: a zygote as the driver starts it, and the daemon started the way
Spark's worker factory starts it (`python -m jobs.runtime.worker_daemon pyspark.worker` with
Spark's environment, the port read from its stdout, its end told by closing its stdin). That
the daemon's workers see Spark's environment is tests/spark/test_python_workers.py's.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.runtime import zygote
from tests import procs

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not zygote.available(), reason="needs os.pidfd_open and SCM_RIGHTS"),
]

ROOT = Path(__file__).resolve().parents[4]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in zygote.STARTUP_ENV}
    env.update({"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", **extra})
    return env


@pytest.fixture
def a_zygote(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    path = str(tmp_path / "socket")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.runtime.zygote", path],
        stdin=subprocess.PIPE,
        stderr=(tmp_path / "zygote.err").open("wb"),
        env=_env(),
        cwd=ROOT,
    )
    procs.wait_until(lambda: Path(path).exists(), 30, "the zygote's socket")
    yield proc, path
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _daemon(path: str, **extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """The daemon as Spark starts it, and the port it wrote."""
    env = _env(SPARK_REUSE_WORKER="1", **{zygote.ENV: path}, **extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.runtime.worker_daemon", "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    (port,) = struct.unpack("!i", proc.stdout.read(4))
    return proc, port


def _serving(port: int) -> int:
    """The pid of the process listening on the loopback `port` (the daemon proper)."""
    inode = next(
        line.split()[9]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if line.split()[1] == f"0100007F:{port:04X}"
    )
    for pid in procs.descendants(1):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
            except OSError:
                continue
    raise AssertionError(f"nothing listens on port {port}")


def test_the_daemon_is_a_child_of_the_zygote_in_the_launchers_directory_and_ends_with_stdin(
    a_zygote: tuple[subprocess.Popen[bytes], str],
) -> None:
    z, path = a_zygote
    launcher, port = _daemon(path)
    daemon = _serving(port)
    assert procs.stat(daemon) is not None and procs.stat(daemon)[1] == z.pid  # type: ignore[index]
    assert os.readlink(f"/proc/{daemon}/cwd") == str(ROOT)
    # Spark's end for a daemon: its stdin closes; the launcher ends with the daemon
    assert launcher.stdin is not None
    launcher.stdin.close()
    assert launcher.wait(30) == 0
    procs.wait_until(lambda: not procs.alive(daemon), 30, "the daemon to end")
    assert z.poll() is None  # the zygote serves the next one


def test_sigterm_to_the_launcher_ends_the_daemon(
    a_zygote: tuple[subprocess.Popen[bytes], str],
) -> None:
    _, path = a_zygote
    launcher, port = _daemon(path)
    daemon = _serving(port)
    assert daemon != launcher.pid
    launcher.send_signal(signal.SIGTERM)  # how Spark's worker factory stops a daemon
    procs.wait_until(lambda: not procs.alive(daemon), 30, "the daemon to end")
    launcher.wait(30)


def test_other_startup_settings_make_the_launcher_the_daemon(
    a_zygote: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    _, path = a_zygote
    launcher, port = _daemon(path, PYTHONHASHSEED="7")  # strings would hash otherwise
    try:
        assert _serving(port) == launcher.pid
        assert "not used: other startup settings" in (tmp_path / "zygote.err").read_text()
    finally:
        assert launcher.stdin is not None
        launcher.stdin.close()
        launcher.wait(30)


def test_without_a_zygote_the_launcher_is_the_daemon(tmp_path: Path) -> None:
    launcher, port = _daemon(str(tmp_path / "gone"))
    try:
        assert _serving(port) == launcher.pid
    finally:
        assert launcher.stdin is not None
        launcher.stdin.close()
        launcher.wait(30)


def test_the_zygote_ends_when_the_driver_does(
    a_zygote: tuple[subprocess.Popen[bytes], str],
) -> None:
    z, path = a_zygote
    assert z.stdin is not None
    z.stdin.close()  # what a driver's exit, however it ends, does to the pipe
    assert z.wait(30) == 0
    assert not Path(path).exists()  # its socket goes with it
