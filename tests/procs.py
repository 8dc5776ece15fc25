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
