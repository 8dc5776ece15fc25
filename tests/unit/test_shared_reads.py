"""Dashboard sessions share one read per view and refresh interval (dashboard/shared.py)."""

from __future__ import annotations

import threading
import time

import pytest

from dashboard.shared import SharedReads

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_fifty_sessions_asking_at_once_cost_one_read() -> None:
    shared: SharedReads[int] = SharedReads(ttl_s=5.0)
    calls = []
    started = threading.Barrier(50)

    def read() -> int:
        calls.append(1)
        time.sleep(0.05)  # slow enough that every session arrives while it runs
        return len(calls)

    got: list[int] = []

    def session() -> None:
        started.wait()
        got.append(shared.get("view", read))

    threads = [threading.Thread(target=session) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got == [1] * 50 and shared.reads == 1


def test_a_value_is_read_again_once_older_than_the_interval() -> None:
    clock = Clock()
    shared: SharedReads[int] = SharedReads(ttl_s=1.0, clock=clock)
    n = iter(range(100))
    assert shared.get("v", lambda: next(n)) == 0
    clock.t = 0.99
    assert shared.get("v", lambda: next(n)) == 0
    clock.t = 1.0
    assert shared.get("v", lambda: next(n)) == 1


def test_different_views_are_read_separately() -> None:
    shared: SharedReads[str] = SharedReads(ttl_s=10.0)
    assert shared.get(("api", "15m"), lambda: "a") == "a"
    assert shared.get(("web", "15m"), lambda: "b") == "b"
    assert shared.get(("api", "15m"), lambda: "c") == "a"
    assert shared.stats() == {"views": 2, "reads": 2}


def test_a_failed_read_is_not_kept() -> None:
    shared: SharedReads[int] = SharedReads(ttl_s=10.0)

    def fail() -> int:
        raise ConnectionError("Redis down")

    with pytest.raises(ConnectionError):
        shared.get("v", fail)
    assert shared.get("v", lambda: 7) == 7


def test_views_nobody_watches_are_forgotten() -> None:
    clock = Clock()
    shared: SharedReads[int] = SharedReads(ttl_s=1.0, clock=clock)
    shared.get("old", lambda: 1)
    clock.t = 100.0
    shared.get("new", lambda: 2)
    assert len(shared) == 1
