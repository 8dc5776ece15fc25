"""Session windows per user: activity separated by more than a gap starts a new session.

Pure (numpy + pandas + sketches). One `Sessions` object holds one service's open sessions and
the results of closed ones, bucketed by the tumbling window that holds the session's last event:

    user u1 events:   x  x x        x            (gap 30s)
    time:             0  10 20      70
    sessions:         [0 ........ 20]  [70 ...
                      closes when the watermark reaches 20 + 30 = 50

Spark's rules for session windows, applied to raw rows: an event is late (ignored here; the caller
counts it as late) when its own session would already be over (event time + gap <= watermark); a
session closes when the watermark reaches its last event + gap. Closed sessions add to their
bucket's WindowAgg: `count` = sessions, the t-digest = session lengths in ms (last event - first
event), the HLL = users.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from sketches.preamble import SESSION_STATE
from sketches.tg64 import hash32
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec, is_late, late_mask

__all__ = ["Sessions"]

#: After the preamble (magic b"TGSS", version: sketches/preamble.py): gap, bucket (ms), open
#: sessions, buckets.
_HEAD = struct.Struct("<qqII")
_HEAD_END = SESSION_STATE.size + _HEAD.size


@dataclass
class Sessions:
    """Open sessions (user -> first/last event time, events) and closed-session buckets."""

    spec: WindowSpec
    users: npt.NDArray[Any] = field(default_factory=lambda: np.empty(0, dtype=object))
    first: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    last: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    events: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    buckets: dict[int, WindowAgg] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.spec.kind != "session":
            raise ValueError("Sessions needs a session spec (WindowSpec.session)")

    def add(
        self, users: npt.NDArray[Any], event_ms: npt.NDArray[np.int64], watermark_ms: int
    ) -> set[int]:
        """Fold a batch of (user, event time) in, close what the watermark closes.

        Returns the starts of buckets that received closed sessions. Rows without a user, and
        rows whose own session would already be over, are ignored.
        """
        gap = self.spec.gap_ms
        keep = pd.notna(users) & (event_ms + gap > watermark_ms)  # else: its own session is over
        # Open sessions enter as intervals [first, reach = last], new events as points.
        fresh = event_ms[keep].astype(np.int64)
        u = np.concatenate([self.users, users[keep]])
        t = np.concatenate([self.first, fresh])
        reach = np.concatenate([self.last, fresh])
        w = np.concatenate([self.events, np.ones(len(fresh), np.int64)])
        if not len(u):
            return set()
        codes, names = pd.factorize(u)
        order = np.lexsort((t, codes))
        codes, t, reach, w = codes[order], t[order], reach[order], w[order]
        # A point starts a new session when it is more than `gap` past everything before it
        # of the same user (the running max of reach, so an interval is never split).
        prev = pd.Series(reach).groupby(codes).cummax().to_numpy()
        new_user = np.r_[True, codes[1:] != codes[:-1]]
        starts = np.flatnonzero(new_user | np.r_[True, t[1:] - prev[:-1] > gap])
        first = t[starts]
        last = np.maximum.reduceat(reach, starts)
        events = np.add.reduceat(w, starts)
        owner = np.asarray(names, dtype=object)[codes[starts]]
        closed = late_mask(last + gap, watermark_ms)  # Spark's rule: session end <= watermark
        touched = self._close(owner[closed], first[closed], last[closed])
        self.users, self.first = owner[~closed], first[~closed]
        self.last, self.events = last[~closed], events[~closed]
        return touched

    def _close(
        self, users: npt.NDArray[Any], first: npt.NDArray[np.int64], last: npt.NDArray[np.int64]
    ) -> set[int]:
        size = self.spec.size_ms
        bucket = last - np.mod(last, size)
        hashes = hash32(users)
        touched: set[int] = set()
        for b in np.unique(bucket).tolist():
            mask = bucket == b
            agg = self.buckets.get(b)
            if agg is None:
                agg = self.buckets[b] = WindowAgg()
            n = int(mask.sum())
            agg.add_hashed(
                (last[mask] - first[mask]).astype(np.float64), np.zeros(n, np.int64), hashes[mask]
            )
            touched.add(b)
        return touched

    def evict(self, watermark_ms: int) -> list[int]:
        """Drop buckets no open session can close into any more (end + gap <= watermark)."""
        gone = [
            b
            for b in self.buckets
            if is_late(b + self.spec.size_ms + self.spec.gap_ms, watermark_ms)
        ]
        for b in gone:
            del self.buckets[b]
        return gone

    def to_bytes(self) -> bytes:
        """Versioned state blob."""
        names = json.dumps([str(x) for x in self.users]).encode()
        parts = [
            SESSION_STATE.preamble,
            _HEAD.pack(self.spec.gap_ms, self.spec.size_ms, len(self.users), len(self.buckets)),
            struct.pack("<I", len(names)),
            names,
            self.first.astype("<i8").tobytes(),
            self.last.astype("<i8").tobytes(),
            self.events.astype("<i8").tobytes(),
        ]
        for b, agg in sorted(self.buckets.items()):
            blob = agg.to_bytes()
            parts += [struct.pack("<qI", b, len(blob)), blob]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes, spec: WindowSpec) -> Sessions:
        """Inverse of `to_bytes`; refuses state written for another gap or bucket."""
        SESSION_STATE.check(data, advice="use a new --checkpoint directory")
        if len(data) < _HEAD_END:
            raise ValueError("session state is truncated: use a new --checkpoint directory")
        gap, size, n, n_buckets = _HEAD.unpack_from(data, SESSION_STATE.size)
        if (gap, size) != (spec.gap_ms, spec.size_ms):
            raise ValueError(
                f"checkpoint holds sessions with gap {gap} ms in {size} ms buckets, the job asks "
                f"for {spec.gap_ms}/{spec.size_ms}: use a new --checkpoint directory"
            )
        try:
            pos = _HEAD_END
            (n_names,) = struct.unpack_from("<I", data, pos)
            pos += 4
            names = json.loads(data[pos : pos + n_names])
            pos += n_names
            users = np.empty(len(names), dtype=object)
            users[:] = names
            arrays = []
            for _ in range(3):
                arrays.append(np.frombuffer(data, "<i8", n, pos).astype(np.int64))
                pos += 8 * n
            buckets = {}
            for _ in range(n_buckets):
                b, m = struct.unpack_from("<qI", data, pos)
                pos += 12
                buckets[b] = WindowAgg.from_bytes(data[pos : pos + m])
                pos += m
        except (struct.error, ValueError, IndexError) as e:
            raise ValueError("session state is truncated: use a new --checkpoint directory") from e
        if pos != len(data):
            raise ValueError("session state has trailing bytes: use a new --checkpoint directory")
        return cls(spec, users, arrays[0], arrays[1], arrays[2], buckets)
