"""One read of Redis per view and refresh interval, shared by every viewer of this server.

A wall screen and an on-call rotation watching the same page would otherwise each re-read Redis
every second. Sessions showing the same view (the same filters and ranges, `Filters`) share
one snapshot while it is younger than the refresh interval: the first session to ask reads it,
sessions asking meanwhile wait for that read instead of starting their own (single flight),
later ones reuse it. A failed read is not kept: the next session tries again. Snapshots are
shared objects, so pages must treat them as read-only (they do: frames and figures are built
from them, never written back).

What the page derives from a snapshot (frames, figure JSON) is shared too: each snapshot comes
with a `Derived` memo, so a chart is built once per snapshot and choice of the viewer (service,
toggles), not once per viewer. Measured: frames and figures were most of a refresh's server CPU
(BENCHMARKS.md, many viewers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Derived", "SharedReads"]

T = TypeVar("T")

#: Views nobody asked for during this many refresh intervals are forgotten.
IDLE_INTERVALS = 30


@dataclass
class _Entry(Generic[T]):
    lock: threading.Lock = field(default_factory=threading.Lock)
    value: T | None = None
    read_at: float = 0.0
    used_at: float = 0.0


class SharedReads(Generic[T]):
    """Values by key, each read at most once per `ttl_s` however many sessions ask."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry[T]] = {}
        #: Reads done (for the benchmark and the tests: N viewers should cost about one).
        self.reads = 0

    def get(self, key: Hashable, read: Callable[[], T]) -> T:
        """The value of `key` read within the last `ttl_s`, else `read()` (once, for everyone)."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.used_at = now
            self._forget_idle(now)
        with entry.lock:
            if entry.value is None or self._clock() - entry.read_at >= self.ttl_s:
                value = read()  # raises: nothing kept, the next caller reads again
                entry.value, entry.read_at = value, self._clock()
                with self._lock:
                    self.reads += 1
            return entry.value

    def _forget_idle(self, now: float) -> None:
        idle = [
            k
            for k, e in self._entries.items()
            if now - e.used_at > IDLE_INTERVALS * self.ttl_s and not e.lock.locked()
        ]
        for k in idle:
            del self._entries[k]

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict[str, Any]:
        """Views held and reads done so far."""
        return {"views": len(self._entries), "reads": self.reads}


class Derived:
    """What sessions derive from one shared snapshot, built once per key for all of them.

    Keys name the value and every choice it depends on (e.g. `("events", services, total)`),
    so two sessions with different choices get different values. Builds run one at a time
    under one lock: a session waiting for a chart another session is building gets that chart.
    Values are shared: callers must not modify them.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a build may use other derived values
        self._values: dict[Hashable, Any] = {}
        #: Values built (for the tests: N sessions with the same choices build each once).
        self.builds = 0

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value for `key`, built by `build()` the first time it is asked for."""
        with self._lock:
            if key not in self._values:
                self._values[key] = build()  # raises: nothing kept, the next caller builds
                self.builds += 1
            value: T = self._values[key]
            return value
