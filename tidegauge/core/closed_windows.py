"""A memo of closed windows, for a reader that re-reads the same range every second.

Once the job's watermark has passed a window's end, no event can change that window's
aggregates, metrics or straggler counts any more (late events are kept apart, in the late
hash, which readers always re-read; docs/time.md). The dashboard reads an hour of windows on
every refresh; decoding their sketches again each time cost ~0.5 s. With this memo it reads
and decodes only the windows still open, plus the late hashes.

What makes a memo entry stale, and drops every entry:
- a new store *epoch*: the sink sets a random token when it first writes to an empty store, so
  a flushed Redis (or a new prefix's first batch) has a new one;
- a new Spark query id: a job started from a fresh checkpoint;
- a watermark that went backwards (a fresh job writing to the same store before its status).

Pure bookkeeping, no Redis: `tidegauge.core.store` reads the identity and the watermark (before the
data they vouch for) and calls `sync` first. Thread-safe: one memo serves every browser tab.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

__all__ = ["ClosedWindows", "StoreIdentity"]

#: (epoch token, Spark query id) of the store a memo describes.
StoreIdentity = tuple[str, str]


class ClosedWindows:
    """Values (rows, decoded aggregates) per (kind, window spec, window start), for one store."""

    def __init__(self, max_windows: int = 20_000, max_kinds: int = 48) -> None:
        #: Entries kept per kind; the oldest windows go first (ranges end at the newest).
        self.max_windows = max_windows
        #: Kinds kept (a reader of a few services memoises them under a kind of their own, so
        #: a page whose top services change makes new ones): the least recently used go first.
        self.max_kinds = max_kinds
        self._lock = threading.Lock()
        self._identity: StoreIdentity | None = None
        self._watermark = -1
        self._entries: dict[str, dict[tuple[str, int], Any]] = {}
        #: kind -> when it was last used (a counter), for dropping the least recently used.
        self._used: dict[str, int] = {}
        self._clock = itertools.count(1)

    def sync(self, identity: StoreIdentity | None, watermark: int | None) -> int | None:
        """Begin a read: forget everything if the store changed; return the watermark to trust.

        None (nothing may be cached or reused) when the store has no epoch or no watermark.
        """
        with self._lock:
            if identity is None or watermark is None:
                self._reset(None, -1)
                return None
            if identity != self._identity or watermark < self._watermark:
                self._reset(identity, watermark)
            self._watermark = watermark
            return watermark

    @property
    def synced(self) -> bool:
        """True after a `sync` that allows reuse (the store has an epoch and a watermark)."""
        return self._identity is not None

    def get(self, kind: str, spec: str, start: int) -> Any | None:
        """The value stored for this closed window, or None."""
        entries = self._entries.get(kind)
        if entries is None:
            return None
        self._used[kind] = next(self._clock)  # one dict store: no lock on the read path
        return entries.get((spec, start))

    def put(self, kind: str, spec: str, start: int, value: Any) -> None:
        """Remember `value` of a window the watermark (as returned by `sync`) has passed."""
        with self._lock:
            entries = self._entries.get(kind)
            if entries is None:
                while len(self._entries) >= self.max_kinds:  # the least recently used kind
                    oldest = min(self._entries, key=lambda k: self._used.get(k, 0))
                    del self._entries[oldest]
                    self._used.pop(oldest, None)
                entries = self._entries[kind] = {}
            self._used[kind] = next(self._clock)
            entries[(spec, start)] = value
            if len(entries) > self.max_windows:  # drop the oldest tenth, not one per put
                keep = self.max_windows * 9 // 10
                for k in sorted(entries, key=lambda k: k[1])[: len(entries) - keep]:
                    del entries[k]

    def size(self, kind: str) -> int:
        """How many windows of `kind` are remembered."""
        return len(self._entries.get(kind, {}))

    def _reset(self, identity: StoreIdentity | None, watermark: int) -> None:
        self._identity = identity
        self._watermark = watermark
        self._entries = {}
        self._used = {}
