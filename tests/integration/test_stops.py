"""Every long-running command stops cleanly when a supervisor stops its process group.

`tidegauge dashboard`, `alerts`, `produce` and `cluster` each run in a session of their own
until they are up, then get SIGTERM on the whole group (`kill -- -PGID`, what a terminal, a
container runtime or systemd's control-group mode does): each must exit 0 with one line
saying it stopped, and leave no process behind (Streamlit's server, Spark's master and
worker). The job's stops are in outages/test_stops.py; the demo's in test_demo.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cli.local.services import free_port
from tests import procs
from tests.integration.helpers import tidegauge


def _command(name: str, broker: str, redis_url: str, work: Path) -> tuple[list[str], str, str]:
    """(arguments, a line that says it is up, the line that says it stopped)."""
    if name == "dashboard":
        return (
            ["dashboard", "--redis", redis_url, "--port", str(free_port())],
            "You can now view your Streamlit app",
            "tidegauge dashboard: stopped",
        )
    if name == "alerts":
        return (
            ["alerts", "--redis", redis_url, "--rule", "p99 > 800 for 3 on api"],
            "p99 > 800 for 3 windows on api",
            "tidegauge alerts: stopped",
        )
    if name == "produce":
        tidegauge("topic", "--bootstrap", broker, "--topic", "stops")
        return (
            ["produce", "--bootstrap", broker, "--topic", "stops", "--rate", "100"],
            "",  # it prints when it stops: give it a few seconds
            "(stopped early)",
        )
    ports = [str(free_port()) for _ in range(2)]
    return (
        ["cluster", "--workers", "1", "--port", ports[0], "--webui-port", ports[1]]
        + ["--dir", str(work / "spark")],
        "Run the job with --master",
        "tidegauge cluster: stopped",
    )


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """`tidegauge ARGS` leading a session (process group) of its own, its output in `log`."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tempfile.gettempdir(),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.parametrize("name", ["dashboard", "alerts", "produce", "cluster"])
def test_a_group_sigterm_is_one_stop_line_exit_0_and_nothing_left(
    name: str, broker, redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    args, up, stopped = _command(name, broker.address, redis_settings.url, tmp_path)
    log = tmp_path / f"{name}.log"
    proc = _start(args, log)
    try:
        if up:
            procs.wait_until(
                lambda: up in log.read_text(errors="replace") or proc.poll() is not None,
                120,
                f"{name} to be up",
            )
        else:
            time.sleep(3)
        assert proc.poll() is None, log.read_text(errors="replace")
        pids = {proc.pid, *procs.descendants(proc.pid)}
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:  # where it hangs: its threads' stacks, in its log
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(
                f"{name} did not stop within 60 s:\n{log.read_text(errors='replace')}"
            ) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    out = log.read_text(errors="replace")
    assert code == 0, out
    assert out.count(stopped) == 1, out
    assert "Traceback" not in out, out
    procs.wait_until(lambda: not procs.living(pids), 30, f"every process of {name} to exit")


def _catches_usr1_in_threads(pid: int) -> bool:
    """Whether the process has a SIGUSR1 handler (/proc's SigCgt mask) and more than one thread."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))[7:], 16)
    return bool(caught >> (signal.SIGUSR1 - 1) & 1) and len(os.listdir(f"/proc/{pid}/task")) > 1


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`kill -USR1` on a running command writes each thread's stack to its stderr (where a
    stop or a batch hangs), and the command carries on and still stops cleanly."""
    args, _, stopped = _command("produce", broker.address, "", tmp_path)
    log = tmp_path / "produce.log"
    proc = _start(args, log)
    try:
        # until the command catches SIGUSR1 and runs a second thread; a second OS thread can be
        # a native library's (numpy's BLAS pool) before the producer's sender starts, so the
        # dump is asked for again until it shows a Python thread beside the main one
        procs.wait_until(lambda: _catches_usr1_in_threads(proc.pid), 60, "a second thread")

        def dumped_two_threads() -> bool:
            if "Thread 0x" in log.read_text(errors="replace"):
                return True
            os.kill(proc.pid, signal.SIGUSR1)
            return False

        procs.wait_until(
            dumped_two_threads,
            60,
            "a stack dump of two threads",
            every_s=1.0,
            detail=lambda: log.read_text(errors="replace"),
        )
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    out = log.read_text(errors="replace")
    assert "Thread 0x" in out and "tidegauge/traffic/producer.py" in out, out
    assert code == 0 and out.count(stopped) == 1, out
