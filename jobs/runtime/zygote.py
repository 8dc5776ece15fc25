"""A pre-imported Python process that the executors' worker daemon forks from (local masters).

A fresh job's first read stage waits while Spark starts the Python worker daemon, and the daemon
imports pyspark, numpy, pandas, pyarrow and the read task's modules before it can fork a worker:
~0.5 s of CPU on a quiet 2-core machine, 0.6-1.1 s beside a JVM that is still warming up
(BENCHMARKS.md, "A fresh job's first batches"). So the driver starts this process (`start`)
before it launches the JVM, and the imports run while the JVM starts.

When Spark later starts the daemon (`python -m jobs.runtime.worker_daemon`, a "launcher" below),
the launcher connects here (`hand_over`) and passes its standard streams (SCM_RIGHTS), its
environment, arguments, `sys.path` and directory. The zygote forks a child that takes them on and
runs pyspark's daemon unchanged; the launcher waits for that child (`wait_for`) and passes SIGTERM
on, so Spark sees one daemon that starts, serves and ends as its own did: the child reads Spark's
pipe for the workers to kill and its end, writes the port Spark waits for, and forks the workers.

Whatever keeps this from working (no zygote, another interpreter, startup settings that differ
from Spark's, a platform without `os.pidfd_open`) makes the launcher import and run the daemon
itself, as it always did.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from typing import Any

from jobs.runtime.preload import PRELOAD, preload

__all__ = ["ENV", "STARTUP_ENV", "available", "hand_over", "running", "start", "wait_for"]

#: The environment variable that tells the launcher where the zygote listens: set by `start` in
#: the driver, whose environment Spark's JVM and the daemon it starts inherit.
ENV = "TIDEGAUGE_WORKER_ZYGOTE"

#: What Python and the modules it preloads read once, at startup or import, with Spark's value
#: for its Python workers where the driver has none (pyspark's context sets the hash seed, the
#: worker factory the OpenMP threads to the task's cores). A launcher whose values differ runs
#: the daemon itself: a forked child could not take them on.
STARTUP_ENV: dict[str, str | None] = {
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "PYSPARK_ENABLE_NAMEDTUPLE_PATCH": None,
}

#: How long a launcher waits for the zygote's child (the zygote may still be importing).
HAND_OVER_TIMEOUT_S = 60.0

_LENGTH = struct.Struct("<q")
_GO = b"g"

_started: subprocess.Popen[bytes] | None = None


def available() -> bool:
    """Whether this platform can run the zygote: Unix sockets with SCM_RIGHTS and pidfds."""
    return hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


def _startup_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str | None]:
    return {k: environ.get(k, default) for k, default in STARTUP_ENV.items()}


def start() -> str | None:
    """Start the zygote (once per driver process) and name its socket in `ENV`; its path.

    Call before Spark's JVM starts: the JVM and the daemon it starts inherit `ENV` from this
    process's environment. The zygote lives in a session of its own (a signal to the job's
    process group is the driver's to handle) and ends when the driver does: it exits when its
    stdin, a pipe from the driver, closes. None where the platform cannot run it.
    """
    global _started
    if _started is not None and _started.poll() is None:
        return os.environ.get(ENV)
    if not available():
        return None
    where = tempfile.mkdtemp(prefix="tidegauge-zygote-")  # 0700: this user's processes only
    path = os.path.join(where, "socket")
    env = {**os.environ, **{k: v for k, v in _startup_env(os.environ).items() if v is not None}}
    _started = subprocess.Popen(
        [sys.executable, "-m", "jobs.runtime.zygote", path],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    atexit.register(_stop, _started, where)
    os.environ[ENV] = path
    return path


def running() -> int | None:
    """The pid of this driver's zygote while it runs, else None."""
    return _started.pid if _started is not None and _started.poll() is None else None


def _stop(proc: subprocess.Popen[bytes], where: str) -> None:
    if proc.stdin is not None:
        proc.stdin.close()  # its end; what a driver killed outright does too
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    shutil.rmtree(where, ignore_errors=True)


# --- the launcher's side ----------------------------------------------------------------------


def hand_over(path: str, daemon_path: list[str]) -> int | None:
    """Have the zygote at `path` fork this launcher's daemon; the daemon's pid, or None.

    Passes this process's stdin, stdout and stderr, environment, arguments, directory and
    `daemon_path` (the `sys.path` the daemon is to have). None, with nothing written to stdout,
    where the zygote is gone or declines: the caller then runs the daemon itself.
    """
    spec = {
        "env": dict(os.environ),
        "argv": sys.argv,
        "path": daemon_path,
        "cwd": os.getcwd(),
        "executable": os.path.realpath(sys.executable),
    }
    payload = json.dumps(spec).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(HAND_OVER_TIMEOUT_S)
            conn.connect(path)
            socket.send_fds(conn, [_LENGTH.pack(len(payload))], [0, 1, 2])
            conn.sendall(payload)
            reply = _read_exactly(conn, _LENGTH.size)
            if reply is None:
                return None  # declined, or its child failed before it took anything over
            (pid,) = _LENGTH.unpack(reply)
            # before the child may write the port Spark waits for: a SIGTERM from then on
            # reaches it
            _forward_signals(int(pid))
            try:
                conn.sendall(_GO)  # from here the child is the daemon
            except OSError:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGHUP, signal.SIG_DFL)
                raise
            return int(pid)
    except OSError:  # no zygote (any more), or it stalled past the timeout: not a daemon yet
        return None


def _forward_signals(pid: int) -> None:
    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)  # how Spark stops a daemon
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as pyspark's daemon: not an end


def wait_for(pid: int) -> int:
    """Stay while the daemon `pid` runs; `hand_over` has SIGTERM passed on to it."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return 0
    while not select.select([fd], [], [])[0]:
        pass
    return 0


def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            return None
        data += part
    return data


# --- the zygote's side ------------------------------------------------------------------------


def _declines(spec: dict[str, Any]) -> str | None:
    """Why a launcher's daemon cannot be a child of this process, or None."""
    if spec["executable"] != os.path.realpath(sys.executable):
        return f"another interpreter ({spec['executable']})"
    theirs, ours = _startup_env(spec["env"]), _startup_env(os.environ)
    if theirs != ours:
        return f"other startup settings ({theirs} against {ours})"
    return None


def _become_daemon(listener: socket.socket, conn: socket.socket, fds: list[int], spec: Any) -> None:
    """In the forked child: take the launcher's streams and settings on, then run the daemon."""
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(spec["env"])
    sys.argv[:] = spec["argv"]
    sys.path[:] = spec["path"]
    os.chdir(spec["cwd"])
    from pyspark import daemon  # reads sys.argv; its imports are loaded already

    conn.sendall(_LENGTH.pack(os.getpid()))
    if _read_exactly(conn, len(_GO)) != _GO:
        os._exit(1)  # the launcher gave up waiting and runs a daemon itself
    conn.close()
    daemon.manager()


def _serve_one(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        msg, fds, _, _ = socket.recv_fds(conn, _LENGTH.size, 3)
        try:
            if len(msg) != _LENGTH.size or len(fds) != 3:
                return
            (size,) = _LENGTH.unpack(msg)
            payload = _read_exactly(conn, size)
            if payload is None:
                return
            spec = json.loads(payload)
            why = _declines(spec)
            if why is not None:
                print(f"tidegauge worker zygote: not used: {why}", file=sys.stderr, flush=True)
                return
            if os.fork() == 0:
                code = 1
                try:
                    _become_daemon(listener, conn, fds, spec)
                    code = 0
                except SystemExit as e:  # the daemon's own end (`shutdown`)
                    code = e.code if isinstance(e.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(code)
        finally:
            for fd in fds:
                os.close(fd)


def serve(path: str) -> None:
    """Listen at `path`, preload, then fork a daemon for each launcher until stdin closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # first, so a launcher that comes early waits for the imports
    listener.listen(8)
    preload(("pyspark.worker", *PRELOAD))  # pyspark.daemon imports the worker
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped as they end
    try:
        while True:
            ready = select.select([listener.fileno(), 0], [], [])[0]
            if 0 in ready and not os.read(0, 4096):
                return  # the driver ended
            if listener.fileno() in ready:
                _serve_one(listener)
    finally:  # its directory too, even when the driver was killed and cannot
        with contextlib.suppress(OSError):
            os.unlink(path)
            os.rmdir(os.path.dirname(path))


if __name__ == "__main__":
    serve(sys.argv[1])
