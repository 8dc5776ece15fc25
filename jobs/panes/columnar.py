"""The panes of many services at once: Spark's window rule and the pane sketches as columns.

A read task's chunk holds events of hundreds of services, a state shard the panes of thousands;
one Python object per (service, pane), each with its digests and sketch, costs about a
millisecond through the job. The functions here do the per-pane work of `ServiceWindows`
(jobs/panes/windows.py) for every service of a batch with a fixed number of numpy passes and
`WindowAggs` (tidegauge/core/window_aggs.py): `add_events` applies the watermark rule and builds
the accepted panes, the late aggregates and the straggler counts (parts of the same panes are
folded together by `merge_encoded`, tidegauge/core/window_aggs.py); `window_aggs` merges panes
into the windows they make. The window
arithmetic stays per distinct pane start (a batch has a handful), never per service.

Panes and late aggregates travel and rest encoded (`WindowAgg.to_bytes`, `LateAgg.to_bytes`),
so untouched ones are never decoded. Pure: no Spark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from sketches.digests import Digests
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.metrics import TIMELINE
from tidegauge.core.sliding import Timeline, frame_of
from tidegauge.core.window_aggs import WindowAggs
from tidegauge.core.windows import (
    LATE,
    STRAGGLER,
    WindowSpec,
    classify,
    is_late,
    pane_size,
    tumbling_starts,
    window_end,
)

__all__ = [
    "PaneBatch",
    "Plan",
    "add_events",
    "encode_late",
    "unique_rows",
    "window_aggs",
]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Plan:
    """The window arithmetic of a set of window specs (sessions are not made of panes)."""

    specs: tuple[WindowSpec, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "specs", tuple(s for s in self.specs if s.kind != "session"))

    @cached_property
    def pane_ms(self) -> int:
        """The pane every window is made of (`pane_size`)."""
        return pane_size(self.specs)

    @cached_property
    def timeline_ms(self) -> int:
        """The resolution of the sliding windows' timeline (0: no sliding window)."""
        return math.gcd(*[s.resolution_ms for s in self.specs])

    def last_end(self, pane_start: int) -> int:
        """End of the last window (any spec) whose result depends on the pane."""
        return max(s.last_end_reaching(pane_start) for s in self.specs)


@dataclass
class PaneBatch:
    """What a batch of events of many services did to their panes (`add_events`).

    Rows are sorted by (service code, pane start). `late_*` are per (service, spec, window)
    with late events, `straggler_*` per (service, spec, window) with stragglers; `*_spec` index
    `Plan.specs`.
    """

    service: IntArray
    start: IntArray
    aggs: WindowAggs
    late_service: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    late_spec: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    late_start: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    late_count: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    late_lateness: Digests = field(default_factory=lambda: Digests.empty(0))
    late_overdue: Digests = field(default_factory=lambda: Digests.empty(0))
    straggler_service: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    straggler_spec: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    straggler_start: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    straggler_count: IntArray = field(default_factory=lambda: np.empty(0, np.int64))


def add_events(
    plan: Plan,
    codes: IntArray,
    event_ms: IntArray,
    latency_ms: npt.NDArray[np.float64],
    status: IntArray,
    has_user: npt.NDArray[np.bool_],
    user_hashes: npt.NDArray[np.uint32],
    watermark_ms: int,
    arrival_ms: npt.NDArray[np.float64] | None = None,
    frontier_ms: int | None = None,
    extra: Mapping[str, npt.NDArray[Any]] | None = None,
) -> PaneBatch:
    """`ServiceWindows.add` for the events of many services (service `codes[i]` per event).

    Spark's rule per (window, event) pair (`classify`): late pairs go to the late aggregates,
    never to a pane; stragglers are counted per window; a pane is built unless every window
    that depends on it has closed. `user_hashes` are `hash32` of the events where `has_user`.
    """
    pane_ms = plan.pane_ms
    starts = tumbling_starts(event_ms, pane_ms)
    panes, pane_of = np.unique(starts, return_inverse=True)
    pair, group_of = np.unique(codes * len(panes) + pane_of, return_inverse=True)
    group_code, group_pane = pair // len(panes), pair % len(panes)
    lateness = None if arrival_ms is None else np.asarray(arrival_ms, np.float64) - event_ms
    late_rows: list[tuple[int, int, int, float]] = []
    straggler_rows: list[tuple[int, int, int]] = []
    dropped = np.zeros(len(panes), np.bool_)
    for i, pane in enumerate(panes.tolist()):
        for s, spec in enumerate(plan.specs):
            for w in spec.windows_containing(pane, pane_ms):
                end = spec.end(w)
                kind = classify(end, watermark_ms, frontier_ms)
                if kind == LATE:
                    late_rows.append((i, s, w, 0.0 if frontier_ms is None else frontier_ms - end))
                elif kind == STRAGGLER:
                    straggler_rows.append((i, s, w))
        dropped[i] = is_late(plan.last_end(pane), watermark_ms)
    kept = ~dropped[group_pane]
    out = PaneBatch(group_code[kept], panes[group_pane[kept]], WindowAggs.empty(0))
    renumber = np.cumsum(kept) - 1
    accepted = kept[group_of]
    groups = renumber[group_of[accepted]]
    users_kept = accepted[has_user]
    overdue_groups = overdue = None
    if frontier_ms is not None:
        pane_end = starts[accepted] + pane_ms
        due = frontier_ms >= pane_end
        overdue_groups = groups[due]
        overdue = (frontier_ms - pane_end[due]).astype(np.float64)
    timeline = tumbling_starts(event_ms[accepted], plan.timeline_ms) if plan.timeline_ms else None
    out.aggs = WindowAggs.build(
        int(kept.sum()),
        groups,
        latency_ms[accepted],
        status[accepted],
        renumber[group_of[has_user][users_kept]],
        user_hashes[users_kept],
        None if lateness is None else lateness[accepted],
        overdue_groups,
        overdue,
        None if not extra else {k: v[accepted] for k, v in extra.items()},
        timeline,
    )
    if late_rows:
        _late(out, late_rows, pane_of, codes, lateness)
    if straggler_rows:
        _stragglers(out, straggler_rows, group_code, group_pane, np.bincount(group_of))
    return out


def _late(
    out: PaneBatch,
    rows: list[tuple[int, int, int, float]],
    pane_of: IntArray,
    codes: IntArray,
    lateness: npt.NDArray[np.float64] | None,
) -> None:
    """The late aggregates: each late (pane, window) pair takes every event of the pane."""
    events = [np.flatnonzero(pane_of == i) for i, _, _, _ in rows]
    sizes = np.array([len(e) for e in events])
    ev = np.concatenate(events)
    spec = np.repeat([s for _, s, _, _ in rows], sizes)
    start = np.repeat([w for _, _, w, _ in rows], sizes)
    overdue = np.repeat([d for _, _, _, d in rows], sizes).astype(np.float64)
    order = np.lexsort((start, spec, codes[ev]))
    uniq, gid = unique_rows(codes[ev][order], spec[order], start[order])
    n = len(uniq[0])
    values = np.full(ev.size, np.nan) if lateness is None else lateness[ev]
    out.late_service, out.late_spec, out.late_start = uniq
    out.late_count = np.bincount(gid, minlength=n).astype(np.int64)
    out.late_lateness = Digests.build(values[order], gid, n)
    out.late_overdue = Digests.build(overdue[order], gid, n)


def _stragglers(
    out: PaneBatch,
    rows: list[tuple[int, int, int]],
    group_code: IntArray,
    group_pane: IntArray,
    group_size: IntArray,
) -> None:
    """Straggler counts per (service, spec, window): every event of the pane, once per window."""
    code, spec, start, count = [], [], [], []
    for i, s, w in rows:
        mine = group_pane == i
        code.append(group_code[mine])
        spec.append(np.full(int(mine.sum()), s))
        start.append(np.full(int(mine.sum()), w))
        count.append(group_size[mine])
    uniq, gid = unique_rows(*(np.concatenate(x) for x in (code, spec, start)))
    counts = np.bincount(gid, weights=np.concatenate(count), minlength=len(uniq[0]))
    out.straggler_service, out.straggler_spec, out.straggler_start = uniq
    out.straggler_count = counts.astype(np.int64)


def unique_rows(*columns: IntArray) -> tuple[tuple[IntArray, ...], IntArray]:
    """The distinct rows of integer columns (sorted) and each row's index among them.

    One composite key of the columns' ranks: `np.unique(axis=0)` sorts rows as structured
    records, many times slower.
    """
    ranks = []
    values = []
    for col in columns:
        v, r = np.unique(col, return_inverse=True)
        values.append(v)
        ranks.append(r.reshape(-1).astype(np.int64))
    key = ranks[0]
    for v, r in zip(values[1:], ranks[1:], strict=True):
        key = key * len(v) + r
    uniq, inverse = np.unique(key, return_inverse=True)
    out = []
    for v in reversed(values):
        out.append(v[uniq % len(v)])
        uniq = uniq // len(v)
    return tuple(reversed(out)), inverse.reshape(-1)


def encode_late(batch: PaneBatch) -> list[bytes]:
    """`LateAgg.to_bytes` of each late aggregate of the batch."""
    lateness, overdue = batch.late_lateness.encode(), batch.late_overdue.encode()
    return [
        LateAgg.pack(c, a, b)
        for c, a, b in zip(batch.late_count.tolist(), lateness, overdue, strict=True)
    ]


def window_aggs(
    plan: Plan,
    panes: WindowAggs,
    pane_start: IntArray,
    windows: Sequence[tuple[int, int, list[int]]],
) -> WindowAggs:
    """The windows made of `panes`: one per (spec index, window start, rows of its panes).

    What `ServiceWindows._window` does per window, for all of them: each pane's overdue
    re-based on the window's end, the panes merged; a sliding window's timeline is the sum of
    the timelines its peak intervals reach, framed to them (`rows` then lists every pane in
    reach, and only those inside the window are merged for the other metrics). Rows are in
    ascending order of pane start.
    """
    pane_ms = plan.pane_ms
    keys, rows, shifts = [], [], []
    timelines: dict[int, list[int]] = {}
    for k, (s, start, members) in enumerate(windows):
        spec = plan.specs[s]
        end = spec.end(start)
        for r in members:
            p = int(pane_start[r])
            if start <= p < end:
                keys.append(k)
                rows.append(r)
                shifts.append(float(window_end(p, pane_ms) - end))
        if plan.timeline_ms and spec.kind == "sliding":
            timelines[k] = members
    idx = np.array(rows, np.int64)
    out = panes.take(idx).combine(np.array(keys, np.int64), len(windows), np.array(shifts))
    if plan.timeline_ms:
        states = panes.objects.get(TIMELINE.name)
        merged: list[Any] = []
        for k, (s, start, members) in enumerate(windows):
            if k not in timelines:
                merged.append(Timeline())
                continue
            spec = plan.specs[s]
            end = spec.end(start)
            reach = [r for r in members if end - spec.reach_ms <= int(pane_start[r]) < end]
            parts = [] if states is None else [states[r] for r in reach]
            merged.append(Timeline.merged(parts).framed(frame_of(spec, start)))
        out.objects[TIMELINE.name] = merged
    return out
