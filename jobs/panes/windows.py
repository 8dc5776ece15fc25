"""The panes of one service: per-window-spec aggregates built from panes, and their bytes.

A pane is the largest interval every window of every spec is made of (`pane_size`); a window
is the merge of its panes' `WindowAgg`s. `ServiceWindows.add` applies Spark's rule for windowed
aggregation to a batch of one service's events (late pairs are counted, never added), and
`ServiceWindows.windows` merges the touched open windows. Pure: no Spark.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from jobs.panes.columnar import Plan, add_events, window_aggs
from jobs.panes.dedup import SeenIds
from jobs.panes.sessions import Sessions
from jobs.parse.columns import present
from sketches.preamble import WINDOW_AGG, WINDOW_STATE
from sketches.tg64 import hash32
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.window_aggs import WindowAggs, merge_encoded
from tidegauge.core.windows import (
    WindowSpec,
    is_late,
    late_mask,
    tumbling_starts,
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


_Layout = tuple[Plan, tuple[WindowSpec, ...], int, int, WindowSpec | None]
_LAYOUTS: dict[tuple[WindowSpec, ...], _Layout] = {}


def _layout(specs: tuple[WindowSpec, ...]) -> _Layout:
    """What `ServiceWindows` derives from its specs, once per specs (a shard holds thousands).

    The plan, the window specs, the pane, the timeline's resolution (sliding windows count
    their events on it; 0: none) and the session spec.
    """
    layout = _LAYOUTS.get(specs)
    if layout is None:
        sessions = [s for s in specs if s.kind == "session"]
        if len(sessions) > 1:
            raise ValueError("at most one --session-gap")
        plan = Plan(specs)
        session = sessions[0] if sessions else None
        layout = (plan, plan.specs, plan.pane_ms, plan.timeline_ms, session)
        _LAYOUTS[specs] = layout
    return layout


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
    Panes are kept encoded (`WindowAgg.to_bytes`): the job decodes only the ones a batch
    touches, many services at once (jobs/panes/columnar.py); `pane` and `pane_aggs` read them.
    """

    specs: tuple[WindowSpec, ...]
    panes: dict[int, bytes] = field(default_factory=dict)
    sessions: Sessions | None = None
    #: Ids of accepted events, until their windows close (jobs/panes/dedup.py).
    ids: SeenIds = field(default_factory=SeenIds)

    def __post_init__(self) -> None:
        layout = _layout(self.specs)
        self.plan, self.window_specs, self.pane_ms, self.timeline_ms, session = layout
        if session is not None and self.sessions is None:
            self.sessions = Sessions(session)
        self._sessions_touched: set[int] = set()

    def pane(self, start: int) -> WindowAgg:
        """The aggregate of the pane starting at `start`."""
        return WindowAgg.from_bytes(self.panes[start])

    def pane_aggs(self) -> dict[int, WindowAgg]:
        """Every pane's aggregate, by start."""
        return {start: WindowAgg.from_bytes(blob) for start, blob in self.panes.items()}

    def _last_end(self, pane_start: int) -> int:
        """End of the last window (any spec) whose result depends on the pane."""
        return self.plan.last_end(pane_start)

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
        if self.sessions is not None:
            lateness = None
            if arrival_ms is not None:
                lateness = np.asarray(arrival_ms, dtype=np.float64) - event_ms
            self.add_sessions(added, users, event_ms, lateness, watermark_ms, frontier_ms)
        if not len(event_ms) or not self.window_specs:
            return added
        batch = add_events(
            self.plan,
            np.zeros(len(event_ms), np.int64),
            np.asarray(event_ms, np.int64),
            np.asarray(latency_ms, np.float64),
            np.asarray(status, np.int64),
            present(users),
            hash32(users),
            watermark_ms,
            arrival_ms,
            frontier_ms,
            extra,
        )
        starts = batch.start.tolist()
        self.merge_panes(dict(zip(starts, batch.aggs.encode(), strict=True)))
        added.touched = set(starts)
        for i, (s, w) in enumerate(
            zip(batch.late_spec.tolist(), batch.late_start.tolist(), strict=True)
        ):
            added.late[(self.window_specs[s].key, w)] = LateAgg(
                int(batch.late_count[i]),
                batch.late_lateness.digest(i),
                batch.late_overdue.digest(i),
            )
        for s, w, n in zip(
            batch.straggler_spec.tolist(),
            batch.straggler_start.tolist(),
            batch.straggler_count.tolist(),
            strict=True,
        ):
            added.stragglers[(self.window_specs[s].key, w)] += n
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

    def merge_panes(self, panes: Mapping[int, bytes]) -> set[int]:
        """Merge encoded panes that `add` built elsewhere from other events; returns their starts.

        `panes` come from panes of the same window specs (a read task's, see
        jobs/summary/summarise.py), which already left out the panes every window of is closed and
        measured overdue against each pane's end, as `add` does here.
        """
        fresh = {p: b for p, b in panes.items() if p not in self.panes}
        both = sorted(p for p in panes if p in self.panes)
        self.panes.update(fresh)
        if both:
            parts = [blob for p in both for blob in (self.panes[p], panes[p])]
            merged = merge_encoded(parts, np.repeat(np.arange(len(both)), 2), len(both))
            self.panes.update(zip(both, merged, strict=True))
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
        wanted = self.wanted(panes, watermark_ms)
        out: dict[tuple[WindowSpec, int], WindowAgg] = {}
        if wanted:
            starts = sorted({p for _, _, members in wanted for p in members})
            row = {p: i for i, p in enumerate(starts)}
            aggs = WindowAggs.decode([self.panes[p] for p in starts])
            windows = [(s, w, [row[p] for p in members]) for s, w, members in wanted]
            merged = window_aggs(self.plan, aggs, np.array(starts, np.int64), windows)
            for k, (s, w, _) in enumerate(wanted):
                out[(self.window_specs[s], w)] = merged.agg(k)
        out.update(self.session_windows())
        return out

    def session_windows(self) -> dict[tuple[WindowSpec, int], WindowAgg]:
        """The session buckets changed since the last call (`add_sessions`), by (spec, bucket)."""
        if self.sessions is None:
            return {}
        out = {(self.sessions.spec, b): self.sessions.buckets[b] for b in self._sessions_touched}
        self._sessions_touched = set()
        return out

    def wanted(self, panes: set[int], watermark_ms: int) -> list[tuple[int, int, list[int]]]:
        """The open windows depending on `panes`: (spec index, start, the panes it reads).

        A window reads the panes inside it that exist, and a sliding window also those its
        peak intervals reach (jobs/panes/columnar.py `window_aggs`); ascending pane starts.
        """
        keys = sorted(
            {
                (s, w)
                for pane in panes
                for s, spec in enumerate(self.window_specs)
                for w in spec.windows_reaching(pane, self.pane_ms)
                if not is_late(spec.end(w), watermark_ms)
            }
        )
        out = []
        for s, w in keys:
            spec = self.window_specs[s]
            end = spec.end(w)
            reach = range(end - spec.reach_ms, end, self.pane_ms) if self.timeline_ms else range(0)
            members = sorted({*spec.panes_of(w, self.pane_ms), *reach} & self.panes.keys())
            out.append((s, w, members))
        return out

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
        for start, blob in sorted(self.panes.items()):
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
            panes[start] = blob[pos : pos + n]
            WINDOW_AGG.check(panes[start])  # decoded when a batch touches it
            pos += n
        if len(panes) != head.get("panes", len(panes)):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        return cls(specs, panes, sessions, ids)
