"""`tidegauge demo` as a user runs it: real broker, redis-server, generator, Spark job, dashboard.

The demo runs in its own session; its children lead their own process groups. To prove that no
process outlives it, the tests (a) record the demo's whole process tree (ppid chains in /proc)
while it runs, the Spark JVM included, and (b) mark the demo's environment with a unique value
that every descendant inherits, so even a process re-parented to init would still be found.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from cli.local.demo import DEMO_DIMENSIONS
from cli.local.services import free_port
from tests import procs
from tidegauge.core.dimensions import SEP
from tidegauge.core.store import ALL_SERVICES, Keys, read_status, read_windows

START_BUDGET_S = 90.0  # start -> windows of several services and a moving batch id
STOP_BUDGET_S = 30.0
MARK_VAR = "TIDEGAUGE_DEMO_TEST_MARK"


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries `mark` (everything the demo started)."""
    return procs.with_env(MARK_VAR, mark)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return int(resp.status)
    except OSError:
        return None


@dataclass
class Demo:
    """A running `tidegauge demo` and everything it has printed so far."""

    proc: subprocess.Popen[str]
    mark: str
    started: float
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_until(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """Read output lines until one matches `pattern`; fail with everything read so far."""
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self.lines:
                m = re.search(pattern, line)
                if m:
                    return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no line matching {pattern!r} in {timeout_s:.0f}s:\n{self.text}"
                )
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"demo exited ({self.proc.wait()}) before {pattern!r}:\n{self.text}"
                )
            self.lines.append(line)

    def drain(self) -> None:
        with contextlib.suppress(queue.Empty):
            while (line := self._queue.get(timeout=2)) is not None:
                self.lines.append(line)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _start_demo(*args: str) -> Demo:
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{MARK_VAR: mark})
    for var in ("TIDEGAUGE_KAFKA_BOOTSTRAP", "TIDEGAUGE_REDIS_URL", "TIDEGAUGE_TOPIC"):
        env.pop(var, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    demo = Demo(proc, mark, time.monotonic())
    threading.Thread(target=demo.pump, daemon=True).start()
    return demo


@contextlib.contextmanager
def _demo(*args: str) -> Iterator[Demo]:
    """Run the demo; whatever happens in the test, nothing it started survives the test."""
    demo = _start_demo(*args)
    try:
        yield demo
    finally:
        if demo.proc.poll() is None:
            demo.proc.send_signal(signal.SIGTERM)
            try:
                demo.proc.wait(STOP_BUDGET_S)
            except subprocess.TimeoutExpired:
                demo.proc.kill()
                demo.proc.wait()
        for pid in _marked(demo.mark):  # safety net only: the assertions check this properly
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_demo_serves_moving_windows_and_stops_without_orphans(tmp_path: Path) -> None:
    port = free_port()
    state = tmp_path / "state"
    with _demo("--port", str(port), "--state-dir", str(state), "--rate", "200") as demo:
        broker_port = int(demo.read_until(r"broker\s+ready\s+127\.0\.0\.1:(\d+)", 30).group(1))
        redis_url = demo.read_until(r"redis\s+ready\s+(redis://\S+)", 30).group(1)
        url = demo.read_until(r"Tidegauge dashboard:\s+(http://127\.0\.0\.1:\d+)", START_BUDGET_S)
        assert url.group(1) == f"http://127.0.0.1:{port}"
        demo.read_until(r"Ctrl-C to stop", 5)
        assert _health(url.group(1)) == 200
        assert re.search(r"logs in \S+/logs/", demo.text), demo.text

        # The chart would be moving: windows of several services, and batch ids that advance.
        client = redis.Redis.from_url(redis_url)
        keys = Keys()
        services: set[str] = set()
        batch_ids: list[int] = []
        first_windows_s: float | None = None
        deadline = demo.started + START_BUDGET_S
        while time.monotonic() < deadline and demo.proc.poll() is None:
            rows = read_windows(client, keys)
            services = {r.service for r in rows if r.service != ALL_SERVICES and r.count > 0}
            if services and first_windows_s is None:
                first_windows_s = time.monotonic() - demo.started
            status = read_status(client, keys)
            if status is not None and (not batch_ids or status.batch_id != batch_ids[-1]):
                batch_ids.append(status.batch_id)
            if len(services) >= 3 and len(batch_ids) >= 2:
                break
            time.sleep(0.5)
        # sliced by the requests' routes (and region, version, status class) out of the box
        routes = {r.service.split(SEP)[1] for r in read_windows(client, keys.by("route"))}
        assert {"/api/items/{id}", "/api/search"} <= routes, routes
        assert {m.decode() for m in client.smembers(keys.dimensions)} == set(DEMO_DIMENSIONS)
        client.close()
        assert demo.proc.poll() is None, f"demo died:\n{demo.text}"
        assert len(services) >= 3, f"windows for {sorted(services)} only\n{demo.text}"
        assert len(batch_ids) >= 2 and batch_ids[-1] > batch_ids[0], f"batch ids {batch_ids}"
        print(f"first windows in Redis {first_windows_s:.1f}s after start; batches {batch_ids}")

        # Everything the demo runs, recorded while it runs: the Spark JVM must be in the tree.
        tree = procs.descendants(demo.proc.pid)
        names = {pid: procs.comm(pid) for pid in tree}
        assert "java" in names.values(), f"no JVM among the demo's processes: {names}"
        java = [pid for pid, name in names.items() if name == "java"]
        assert set(java) <= set(_marked(demo.mark)), "the JVM should carry the demo's environment"

        stop_at = time.monotonic()
        demo.proc.send_signal(signal.SIGINT)
        code = demo.proc.wait(STOP_BUDGET_S)
        demo.drain()
        assert code == 0, f"exit {code} after SIGINT:\n{demo.text}"
        assert time.monotonic() - stop_at < STOP_BUDGET_S
        assert "stopped cleanly" in demo.text, demo.text

        # No orphans: every recorded process is gone (or a zombie about to be reaped), and
        # nothing carrying the demo's environment is still running.
        grace = time.monotonic() + 5
        while time.monotonic() < grace and [p for p in tree if procs.alive(p)]:
            time.sleep(0.1)
        survivors = {p: names[p] for p in tree if procs.alive(p)}
        assert not survivors, f"left behind: {survivors}"
        assert not _marked(demo.mark)
        for p in (broker_port, int(redis_url.rsplit(":", 1)[1].split("/")[0]), port):
            assert not _port_open(p), f"port {p} still open after the demo stopped"
        assert _health(url.group(1)) is None


def test_unreachable_redis_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    closed = free_port()
    started = time.monotonic()
    with _demo(
        "--redis",
        f"redis://127.0.0.1:{closed}/0",
        "--no-dashboard",
        "--state-dir",
        str(tmp_path / "state"),
    ) as demo:
        code = demo.proc.wait(15)
        demo.drain()
    assert time.monotonic() - started < 15
    assert code != 0, demo.text
    assert re.search(rf"error: cannot reach Redis at redis://127\.0\.0\.1:{closed}/0", demo.text), (
        demo.text
    )
    assert "--redis" in demo.text  # says where the URL came from
    broker = re.search(r"broker\s+ready\s+127\.0\.0\.1:(\d+)", demo.text)
    assert broker, demo.text  # the broker had started: it must have been stopped again
    assert not _port_open(int(broker.group(1)))
    assert not _marked(demo.mark)
    assert not (tmp_path / "state" / "checkpoint" / f"run-{demo.proc.pid}").exists()


def test_dashboard_port_in_use_is_refused_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with _demo("--port", str(port), "--state-dir", str(tmp_path / "state")) as demo:
            code = demo.proc.wait(15)
            demo.drain()
    assert code == 2, demo.text
    assert f"port {port} is in use" in demo.text
    assert not _marked(demo.mark)


def test_a_supervisor_stopping_every_process_of_the_demo_at_once_is_a_clean_stop(
    tmp_path: Path,
) -> None:
    """SIGTERM to the demo and every process it started, at the same moment (systemd's
    `KillMode=control-group`, a container runtime): each part stops on its own, the demo says
    so once, exits 0, and nothing is left running."""
    with _demo("--no-dashboard", "--state-dir", str(tmp_path / "state")) as demo:
        demo.read_until(r"Ctrl-C to stop", START_BUDGET_S)
        tree = procs.descendants(demo.proc.pid) | {demo.proc.pid}
        assert "java" in {procs.comm(p) for p in tree}
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        code = demo.proc.wait(STOP_BUDGET_S)
        demo.drain()
    assert code == 0, demo.text
    assert demo.text.count("tidegauge demo: stopped cleanly") == 1, demo.text
    assert "died" not in demo.text and "Traceback" not in demo.text, demo.text
    grace = time.monotonic() + 5
    while time.monotonic() < grace and [p for p in tree if procs.alive(p)]:
        time.sleep(0.1)
    assert not [p for p in tree if procs.alive(p)]
    assert not _marked(demo.mark)
