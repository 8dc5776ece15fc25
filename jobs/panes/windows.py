"""The panes of one service: per-window-spec aggregates built from panes, and their bytes.

A pane is the largest interval every window of every spec is made of (`pane_size`); a window
is the merge of its panes' `WindowAgg`s. `ServiceWindows.add` applies Spark's rule for windowed
aggregation to a batch of one service's events (late pairs are counted, never added), and
`ServiceWindows.windows` merges the touched open windows. Pure: no Spark.
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from jobs.panes.dedup import SeenIds
from jobs.panes.sessions import Sessions
from jobs.parse.columns import present
from sketches.preamble import WINDOW_STATE
from sketches.tg64 import hash32
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.metrics import TIMELINE
from tidegauge.core.sliding import Timeline, frame_of
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import (
    LATE,
    STRAGGLER,
    WindowSpec,
    classify,
    is_late,
    late_mask,
    pane_size,
    tumbling_starts,
    window_end,
)

__all__ = ["Added", "ServiceWindows"]

#: After the preamble (magic b"TGSW", version 3: + the de-duplication ids, 2 is read as having
#: none; sketches/preamble.py): the JSON header's length; then the header, the sessions' and
#: ids' blobs, and each pane.
_HEAD = struct.Struct("<I")
_HEAD_END = WINDOW_STATE.size + _HEAD.size
#: What a blob without the magic probably is, and what to do about it.
_OLDER = "the checkpoint holds window state from an older Tidegauge version"
_NEW_CHECKPOINT = "use a new --checkpoint directory"
_PANE = struct.Struct("<qI")  # pane start (ms), length of its WindowAgg bytes


@dataclass
class Added:
    """What one batch of one service did to its windows (see `ServiceWindows.add`)."""

    #: Pane starts that received events.
    touched: set[int] = field(default_factory=set)
    #: (spec key, window start) -> the late events of that window in this batch.
    late: dict[tuple[str, int], LateAgg] = field(default_factory=dict)
    #: (spec key, window start) -> stragglers of that window in this batch.
    stragglers: Counter[tuple[str, int]] = field(default_factory=Counter)

    def late_counts(self) -> Counter[tuple[str, int]]:
        """Late events per (spec key, window start)."""
        return Counter({k: v.count for k, v in self.late.items()})


@dataclass
class ServiceWindows:
    """One service's open panes (tumbling windows of `pane_ms`) and the window specs built on them.

    A row is added to its pane unless every window containing that pane (in every spec) has
    already ended at or before the watermark; a window whose end <= watermark counts the row as
    late instead. Windows with end > watermark that contain an updated pane are re-emitted.
    """

    specs: tuple[WindowSpec, ...]
    panes: dict[int, WindowAgg] = field(default_factory=dict)
    sessions: Sessions | None = None
    #: Ids of accepted events, until their windows close (jobs/panes/dedup.py).
    ids: SeenIds = field(default_factory=SeenIds)

    def __post_init__(self) -> None:
        self.window_specs = tuple(s for s in self.specs if s.kind != "session")
        session_specs = [s for s in self.specs if s.kind == "session"]
        if len(session_specs) > 1:
            raise ValueError("at most one --session-gap")
        if session_specs and self.sessions is None:
            self.sessions = Sessions(session_specs[0])
        self.pane_ms = pane_size(self.window_specs)
        self._sessions_touched: set[int] = set()
        # Sliding windows count their events on a timeline of this resolution (0: none).
        self.timeline_ms = math.gcd(*[s.resolution_ms for s in self.window_specs])

    def _last_end(self, pane_start: int) -> int:
        """End of the last window (any spec) whose result depends on the pane."""
        return max(s.last_end_reaching(pane_start) for s in self.window_specs)

    def add(
        self,
        event_ms: npt.NDArray[np.int64],
        latency_ms: npt.NDArray[np.float64],
        status: npt.NDArray[np.int64],
        users: Any,
        watermark_ms: int,
        arrival_ms: npt.NDArray[np.float64] | None = None,
        frontier_ms: int | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> Added:
        """Add a batch (watermark in force, frontier = max event time seen before it).

        `arrival_ms` is each event's broker timestamp (NaN when unknown); lateness is
        arrival - event time. Every (window, event) pair is classified by `classify`: late
        pairs go to the result's `late` (never to a pane), stragglers are counted per window.
        `users` is a numpy object or Arrow string column (None/null: no user). `extra` holds the
        columns of registered event fields (one entry per event), which registered metrics read.
        """
        added = Added()
        lateness = None
        if arrival_ms is not None:
            lateness = np.asarray(arrival_ms, dtype=np.float64) - event_ms
        if self.sessions is not None:
            self.add_sessions(added, users, event_ms, lateness, watermark_ms, frontier_ms)
        if not len(event_ms):
            return added
        valid = present(users)
        hashes = hash32(users)  # the valid ones', once per batch; each pane takes its share
        starts = tumbling_starts(event_ms, self.pane_ms)
        buckets = tumbling_starts(event_ms, self.timeline_ms) if self.timeline_ms else None
        uniq, inverse = np.unique(starts, return_inverse=True)
        for i, pane in enumerate(uniq.tolist()):
            mask = inverse == i
            n = int(np.count_nonzero(mask))
            pane_lateness = np.full(n, np.nan) if lateness is None else lateness[mask]
            for spec in self.window_specs:
                for w in spec.windows_containing(pane, self.pane_ms):
                    end = spec.end(w)
                    kind = classify(end, watermark_ms, frontier_ms)
                    if kind == LATE:
                        overdue = 0 if frontier_ms is None else frontier_ms - end
                        added.late.setdefault((spec.key, w), LateAgg()).add(pane_lateness, overdue)
                    elif kind == STRAGGLER:
                        added.stragglers[(spec.key, w)] += n
            if is_late(self._last_end(pane), watermark_ms):
                continue
            agg = self.panes.get(pane)
            if agg is None:
                agg = self.panes[pane] = WindowAgg()
            overdue_ms = None
            if frontier_ms is not None and frontier_ms >= pane + self.pane_ms:
                overdue_ms = np.full(n, float(frontier_ms - pane - self.pane_ms))
            agg.add_hashed(
                latency_ms[mask],
                status[mask],
                hashes[mask[valid]],
                None if lateness is None else pane_lateness,
                overdue_ms,
                {name: col[mask] for name, col in extra.items()} if extra else None,
                None if buckets is None else buckets[mask],
            )
            added.touched.add(pane)
        return added

    def add_sessions(
        self,
        added: Added,
        users: npt.NDArray[Any],
        event_ms: npt.NDArray[np.int64],
        lateness: npt.NDArray[np.float64] | None,
        watermark_ms: int,
        frontier_ms: int | None,
    ) -> None:
        """The session part of `add`: fold the events into open sessions, count the late ones.

        The job runs the pane part of `add` in the read tasks (jobs/summary/summarise.py), which
        see a chunk of records each, and this part in the stateful step: a user's session can span
        every chunk of a batch, so sessions need all of the batch's (user, time) pairs.
        """
        if self.sessions is None:
            return
        self._sessions_touched |= self.sessions.add(users, event_ms, watermark_ms)
        self._session_late(added, event_ms, users, lateness, watermark_ms, frontier_ms)

    def merge_panes(self, panes: Mapping[int, WindowAgg]) -> set[int]:
        """Merge panes that `add` built elsewhere from other events; returns their starts.

        `panes` come from a `ServiceWindows` of the same window specs (a read task's, see
        jobs/summary/summarise.py), which already left out the panes every window of is closed and
        measured overdue against each pane's end, as `add` does here. They are taken over,
        not copied.
        """
        for start, part in panes.items():
            agg = self.panes.get(start)
            if agg is None:
                self.panes[start] = part
            else:
                agg.merge(part)
        return set(panes)

    def _session_late(
        self,
        added: Added,
        event_ms: npt.NDArray[np.int64],
        users: npt.NDArray[Any],
        lateness: npt.NDArray[np.float64] | None,
        watermark_ms: int,
        frontier_ms: int | None,
    ) -> None:
        """Count the events `Sessions.add` ignored (their own session was over) as late.

        They are keyed by the session spec and the bucket of their event time, so late counts
        and the what-if table cover session windows too. Overdue = frontier - (event + gap).
        """
        assert self.sessions is not None
        spec = self.sessions.spec
        ends = event_ms + spec.gap_ms
        late = present(users) & late_mask(ends, watermark_ms)
        if not late.any():
            return
        buckets = tumbling_starts(event_ms[late], spec.size_ms)
        values = np.full(len(event_ms), np.nan) if lateness is None else lateness
        overdue = (
            np.zeros(len(buckets)) if frontier_ms is None else (frontier_ms - ends[late]) * 1.0
        )
        for b in np.unique(buckets).tolist():
            sel = buckets == b
            added.late.setdefault((spec.key, b), LateAgg()).add(
                values[late][sel], np.maximum(overdue[sel], 0.0)
            )

    def windows(
        self, panes: set[int], watermark_ms: int
    ) -> dict[tuple[WindowSpec, int], WindowAgg]:
        """The still-open windows (end > watermark) containing any of `panes`, merged from panes."""
        wanted = {
            (spec, w)
            for pane in panes
            for spec in self.window_specs
            for w in spec.windows_reaching(pane, self.pane_ms)
            if not is_late(spec.end(w), watermark_ms)
        }
        out = {(spec, w): self._window(spec, w) for spec, w in wanted}
        if self.sessions is not None:
            for b in self._sessions_touched:
                out[(self.sessions.spec, b)] = self.sessions.buckets[b]
            self._sessions_touched = set()
        return out

    def _window(self, spec: WindowSpec, start: int) -> WindowAgg:
        """The window of `spec` starting at `start`, merged from its panes.

        With sliding windows the panes carry timelines: a sliding window's row gets the sum of
        the timelines of every pane its peak intervals reach, framed to those intervals
        (tidegauge/core/sliding.py); other windows get none.
        """
        have = [p for p in spec.panes_of(start, self.pane_ms) if p in self.panes]
        if (
            len(have) == 1
            and window_end(have[0], self.pane_ms) == spec.end(start)
            and not self.timeline_ms
        ):
            return self.panes[have[0]]
        # Overdue is measured against each pane's end; re-base it on the window's end.
        shifts = [float(window_end(p, self.pane_ms) - spec.end(start)) for p in have]
        agg = WindowAgg.merged((self.panes[p] for p in have), shifts)
        if self.timeline_ms:
            timeline = Timeline()
            if spec.kind == "sliding":
                end = spec.end(start)
                reach = range(end - spec.reach_ms, end, self.pane_ms)
                parts = [self.panes[p].states[TIMELINE.name] for p in reach if p in self.panes]
                timeline = Timeline.merged(parts).framed(frame_of(spec, start))
            agg.states[TIMELINE.name] = timeline
        return agg

    def evict(self, watermark_ms: int) -> list[int]:
        """Forget panes no open window needs any more; return their starts."""
        gone = [p for p in self.panes if is_late(self._last_end(p), watermark_ms)]
        for p in gone:
            del self.panes[p]
        if self.sessions is not None:
            self.sessions.evict(watermark_ms)
        self.ids.evict(watermark_ms)
        return gone

    @property
    def is_empty(self) -> bool:
        """Nothing left to keep: no pane, no open session, no session bucket."""
        s = self.sessions
        no_sessions = s is None or (not len(s.users) and not s.buckets)
        return not self.panes and no_sessions and not self.ids.groups

    def to_bytes(self) -> bytes:
        """Versioned state blob: header (specs), then each pane's WindowAgg bytes."""
        sessions = self.sessions.to_bytes() if self.sessions is not None else b""
        ids = self.ids.to_bytes() if self.ids.groups else b""
        head = json.dumps(
            {
                "specs": [s.key for s in self.specs],
                "sessions": len(sessions),
                "ids": len(ids),
                "panes": len(self.panes),
            }
        )
        parts = [
            WINDOW_STATE.preamble,
            _HEAD.pack(len(head)),
            head.encode(),
            sessions,
            ids,
        ]
        for start, agg in sorted(self.panes.items()):
            blob = agg.to_bytes()
            parts += [_PANE.pack(start, len(blob)), blob]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes, specs: tuple[WindowSpec, ...]) -> ServiceWindows:
        """Inverse of `to_bytes`; refuses state written for other window specs."""
        WINDOW_STATE.check(blob, foreign=_OLDER, advice=_NEW_CHECKPOINT)
        if len(blob) < _HEAD_END:
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        (n_head,) = _HEAD.unpack_from(blob, WINDOW_STATE.size)
        pos = _HEAD_END + n_head
        head = json.loads(blob[_HEAD_END:pos])
        stored = tuple(head["specs"])
        if sorted(stored) != sorted(s.key for s in specs):
            raise ValueError(
                f"checkpoint holds windows {list(stored)} but the job asks for "
                f"{[s.key for s in specs]}: use a new --checkpoint directory to change --window"
            )
        n_sessions = head.get("sessions", 0)
        session_spec = next((s for s in specs if s.kind == "session"), None)
        sessions = None
        if n_sessions and session_spec is not None:
            sessions = Sessions.from_bytes(blob[pos : pos + n_sessions], session_spec)
        pos += n_sessions
        n_ids = head.get("ids", 0)
        ids = SeenIds.from_bytes(blob[pos : pos + n_ids]) if n_ids else SeenIds()
        pos += n_ids
        panes = {}
        while pos < len(blob):
            if pos + _PANE.size > len(blob):
                raise ValueError("window state is truncated: use a new --checkpoint directory")
            start, n = _PANE.unpack_from(blob, pos)
            pos += _PANE.size
            panes[start] = WindowAgg.from_bytes(blob[pos : pos + n])
            pos += n
        if len(panes) != head.get("panes", len(panes)):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        return cls(specs, panes, sessions, ids)
