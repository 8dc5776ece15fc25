"""Dashboard sessions share one read per view and refresh interval (dashboard/shared.py)."""

from __future__ import annotations

import threading
import time

import pytest

from dashboard.shared import Derived, SharedReads

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


def test_sessions_with_the_same_choices_build_each_chart_once() -> None:
    derived = Derived()
    builds: list[tuple[str, bool]] = []

    def chart(service: str, total: bool) -> str:
        def build() -> str:
            builds.append((service, total))
            time.sleep(0.01)
            return f"{service}:{total}"

        return derived.get(("chart", service, total), build)

    got: list[str] = []
    started = threading.Barrier(30)

    def session(i: int) -> None:
        started.wait()
        got.append(chart("*", True))
        got.append(chart("api" if i % 2 else "*", i % 3 == 0))

    threads = [threading.Thread(target=session, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # one build per distinct choice, whoever asked first; everyone got the value of its choice
    assert sorted(builds) == sorted(set(builds)) and derived.builds == len(builds) == 4
    assert got.count("*:True") == 30 + 5 and len(got) == 60


def test_a_build_may_use_other_derived_values_and_failures_are_not_kept() -> None:
    derived = Derived()
    frame = derived.get("frame", lambda: [1, 2, 3])
    assert derived.get("chart", lambda: sum(derived.get("frame", lambda: [0]))) == 6
    assert derived.get("frame", lambda: [0]) is frame

    def broken() -> int:
        raise RuntimeError("Redis went away")

    with pytest.raises(RuntimeError):
        derived.get("late", broken)
    assert derived.get("late", lambda: 7) == 7 and derived.builds == 3
