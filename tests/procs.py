"""Process trees and waits for tests: /proc readers, and waiting on a condition, not a clock."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and ")": state and ppid follow the last ")"
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Running or sleeping: not gone and not a zombie waiting to be reaped."""
    st = stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def living(pids: Iterable[int]) -> list[int]:
    """The processes of `pids` that are still alive."""
    return [p for p in pids if alive(p)]


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def children(pid: int) -> list[int]:
    """Direct children of `pid`."""
    return [p for p in _pids() if (st := stat(p)) is not None and st[1] == pid]


def descendants(root: int) -> set[int]:
    """Every process below `root`, by walking the ppid chains of /proc."""
    kids: dict[int, list[int]] = {}
    for p in _pids():
        st = stat(p)
        if st is not None:
            kids.setdefault(st[1], []).append(p)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def comm(pid: int) -> str:
    """The command name of a process ("?" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def cmdline(pid: int) -> str:
    """The command line of a process, arguments joined by spaces ("" when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


#: What the command line of Spark's Python worker daemon names: the daemon Spark starts, or the
#: driver's zygote that daemon forks from (jobs/runtime/zygote.py).
_DAEMON_MODULES = ("jobs.runtime.worker_daemon", "jobs.runtime.zygote")


def python_task_workers(among: Iterable[int] | None = None) -> list[int]:
    """The Python workers that Spark's worker daemon forked for tasks (of `among`, or anywhere).

    A worker is a child of a daemon with the daemon's command line. The daemon is the process
    Spark started, or a child of the driver's zygote. The zygote, the launcher that waits for
    its child and the driver's source runner are not task workers: Spark has no retry for them.
    """
    pids = _pids() if among is None else list(among)
    lines = {p: cmdline(p) for p in pids}
    started = [p for p, line in lines.items() if any(m in line for m in _DAEMON_MODULES)]
    daemons = []
    for p in started:
        st = stat(p)
        if st is None or cmdline(st[1]) == lines[p]:
            continue  # forked from a daemon or from the zygote: found below
        daemons += children(p) if "jobs.runtime.zygote" in lines[p] else [p]
    return [w for d in daemons for w in children(d) if cmdline(w) == cmdline(d)]


def with_env(variable: str, value: str) -> list[int]:
    """Live processes (not this one) whose environment holds `variable=value`."""
    needle = f"{variable}={value}".encode()
    out = []
    for p in _pids():
        if p == os.getpid():
            continue
        try:
            env = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and alive(p):
            out.append(p)
    return out


def wait_until(
    cond: Callable[[], object],
    timeout_s: float,
    what: str,
    detail: Callable[[], str] = lambda: "",
    every_s: float = 0.1,
) -> object:
    """Poll `cond` until it is truthy and return its value; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{detail()}")
        time.sleep(every_s)
