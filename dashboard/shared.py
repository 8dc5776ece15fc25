"""One read of Redis per view and refresh interval, shared by every viewer of this server.

A wall screen and an on-call rotation watching the same page would otherwise each re-read Redis
every second. Sessions showing the same view (the same filters and ranges, `Filters`) share
one snapshot while it is younger than the refresh interval: the first session to ask reads it,
sessions asking meanwhile wait for that read instead of starting their own (single flight),
later ones reuse it. A failed read is not kept: the next session tries again. Snapshots are
shared objects, so pages must treat them as read-only (they do: frames and figures are built
from them, never written back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["SharedReads"]

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
