"""The mergeable aggregate of one window (or pane) for one service: `WindowAgg`.

Pure (numpy + sketches, no Spark). Executors build pane aggregates and merge them into windows;
the sink merges services into `*`; the read API merges windows into any range. All three use the
same `WindowAgg.merged`, so a range answer is by construction the merge of its windows.

A `WindowAgg` holds one state per registered metric (tidegauge/core/registry.py): the built-in
ones (tidegauge/core/metrics.py, registered by importing this module, so they always come first
and are there before any aggregate is built) and those of plugins. Stored aggregates are
self-describing: a list of (metric, bytes) entries after the `TGWA` preamble
(sketches/preamble.py), so adding a metric invalidates neither checkpoints nor stored windows.
A metric whose state is empty (no errors, no overdue events, a tumbling window's timeline) has
no entry, and the built-in metrics are named by a one-byte id: a window of 100 events is then
~80 bytes smaller than with every metric spelled out (the framing alone 88 bytes → ~20).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import sketches.varint as varint
from sketches.hll import HyperLogLog
from sketches.preamble import WINDOW_AGG
from sketches.tdigest import TDigest
from sketches.tg64 import hash32

# Importing the built-in metrics registers them: every WindowAgg is built after they are.
from tidegauge.core.metrics import COUNT, ERRORS
from tidegauge.core.registry import Batch, Metric, ResultContext, metrics

__all__ = ["WindowAgg"]

#: Version 4, after the preamble: the number of entries (varint, sketches/varint.py), then per
#: entry a tag (varint: 2 x id + 1 for the built-in metric `BUILT_IN[id]`; otherwise 2 x the
#: name's length, the name (UTF-8) following), the payload's length (varint) and the payload
#: (the metric's own encoding). A metric whose payload is its empty state's has no entry.
BUILT_IN = ("count", "errors", "latency", "users", "lateness", "overdue", "timeline")
#: Version 3: entries u16, then per entry: name length u8, name (UTF-8), payload length u32,
#: payload; every registered metric has one. Still read.
_ENTRIES = struct.Struct("<H")
_NAME = struct.Struct("<B")
_PAYLOAD = struct.Struct("<I")
#: Version 2 (before the registry), after the preamble: count, errors, then the lengths of the
#: latency digest, users HyperLogLog, lateness and overdue digests. Still read.
_V2_HEADER = struct.Struct("<qqIIII")


class WindowAgg:
    """One state per registered metric: events, errors, latency, users, lateness, overdue, ...

    `lateness` holds arrival (broker timestamp) - event time per event, in ms. `overdue`
    holds, for each event that arrived after the event-time frontier had passed its window's
    end, by how much (frontier - window end, ms, >= 0 when added): with allowed lateness L the
    event would have been late exactly when that value is >= L, which is what the what-if
    question ("how many would be late with L?") reads. See docs/time.md.

    The built-in states are also attributes (`count`, `errors`, `latency`, `users`, `lateness`,
    `overdue`); every state, built-in or not, is in `states` by metric name.
    """

    __slots__ = ("registered", "states")

    def __init__(
        self,
        count: int = 0,
        errors: int = 0,
        latency: TDigest | None = None,
        users: HyperLogLog | None = None,
        lateness: TDigest | None = None,
        overdue: TDigest | None = None,
        *,
        registered: Sequence[Metric] | None = None,
    ) -> None:
        self.registered: tuple[Metric, ...] = tuple(metrics() if registered is None else registered)
        given = {
            "count": count,
            "errors": errors,
            "latency": latency,
            "users": users,
            "lateness": lateness,
            "overdue": overdue,
        }
        self.states: dict[str, Any] = {
            m.name: m.empty() if given.get(m.name) is None else given[m.name]
            for m in self.registered
        }

    @classmethod
    def _of(cls, states: dict[str, Any], registered: tuple[Metric, ...]) -> WindowAgg:
        """An aggregate of these states; metrics without one get an empty state.

        Readers build aggregates from decoded or merged states: empty sketches are made only
        for the metrics that need one (an empty HyperLogLog is 16 KB of registers).
        """
        out = cls.__new__(cls)
        out.registered = registered
        out.states = {m.name: states[m.name] if m.name in states else m.empty() for m in registered}
        return out

    # The built-in states by name (what most callers read).
    count = property(lambda self: self.states["count"], lambda self, v: self._set("count", v))
    errors = property(lambda self: self.states["errors"], lambda self, v: self._set("errors", v))
    latency = property(lambda self: self.states["latency"], lambda self, v: self._set("latency", v))
    users = property(lambda self: self.states["users"], lambda self, v: self._set("users", v))
    lateness = property(
        lambda self: self.states["lateness"], lambda self, v: self._set("lateness", v)
    )
    overdue = property(lambda self: self.states["overdue"], lambda self, v: self._set("overdue", v))

    def _set(self, name: str, value: Any) -> None:
        self.states[name] = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WindowAgg) and self.states == other.states

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.states.items())
        return f"WindowAgg({inner})"

    def add(
        self,
        latency_ms: npt.NDArray[np.float64],
        status: npt.NDArray[np.int64],
        user_ids: npt.NDArray[Any] | None,
    ) -> None:
        """Add a batch of events (one entry per event; NaN latency / status < 0 = absent)."""
        hashes = hash32(user_ids) if user_ids is not None and len(user_ids) else None
        self.add_hashed(latency_ms, status, hashes)

    def add_hashed(
        self,
        latency_ms: npt.NDArray[np.float64],
        status: npt.NDArray[np.int64],
        user_hashes: npt.NDArray[np.uint32] | None,
        lateness_ms: npt.NDArray[np.float64] | None = None,
        overdue_ms: npt.NDArray[np.float64] | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
        timeline_ms: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """`add` with user ids already hashed by `sketches.tg64.hash32` (nulls dropped).

        The job hashes a micro-batch's user column once and splits the hashes by pane.
        `lateness_ms` (NaN = unknown) and `overdue_ms` (only the events that have one) are
        optional so sessions and tests can leave them out. `extra` holds the columns of
        registered optional event fields (tidegauge/core/events.py), one entry per event.
        `timeline_ms`: each event's bucket on the timeline of sliding windows (a job with one).
        """
        columns: dict[str, npt.NDArray[Any]] = {"latency_ms": latency_ms, "status": status}
        if timeline_ms is not None:
            columns["timeline_ms"] = timeline_ms
        if user_hashes is not None:
            columns["user_hash"] = user_hashes
        if lateness_ms is not None:
            columns["lateness_ms"] = lateness_ms
        if overdue_ms is not None:
            columns["overdue_ms"] = overdue_ms
        if extra:
            columns.update(extra)
        self.update(Batch(len(latency_ms), columns))

    def update(self, batch: Batch) -> None:
        """Every metric takes in the batch's columns it reads."""
        for m in self.registered:
            self.states[m.name] = m.update(self.states[m.name], batch)

    def merge(self, *others: WindowAgg) -> None:
        """Fold other aggregates into this one (sketch parameters must match)."""
        for m in self.registered:
            self.states[m.name] = m.merge([self.states[m.name], *(_state(o, m) for o in others)])

    @classmethod
    def merged(
        cls,
        aggs: Iterable[WindowAgg],
        overdue_shifts_ms: Iterable[float] | None = None,
        *,
        with_lateness: bool = True,
    ) -> WindowAgg:
        """One aggregate of many, merging each metric in one pass.

        `overdue_shifts_ms` (one per aggregate) re-bases each shiftable state (overdue) before
        merging: panes measure it against their own end, a window against its end, so a pane
        ending `d` ms before its window contributes its digest shifted by -d.
        `with_lateness=False` leaves the lateness metrics empty: a reader of latency and users
        skips that work.
        """
        items = list(aggs)
        registered = metrics()
        if not items:
            return cls._of({}, registered)
        shifts = None if overdue_shifts_ms is None else list(overdue_shifts_ms)
        merged: dict[str, Any] = {}
        for m in registered:
            if m.lateness and not with_lateness:
                continue
            states = [_state(a, m) for a in items]
            if shifts is not None and m.shift is not None:
                states = [m.shift(st, d) if d else st for st, d in zip(states, shifts, strict=True)]
            merged[m.name] = m.merge(states)
        return cls._of(merged, registered)

    def metrics(self, duration_ms: int) -> dict[str, Any]:
        """The result fields of every metric for a window (or range) lasting `duration_ms`."""
        context = ResultContext(self.states.get("count", 0), duration_ms)
        out: dict[str, Any] = {}
        for m in self.registered:
            out.update(m.results(self.states[m.name], context))
        return out

    def to_bytes(self) -> bytes:
        """Self-describing binary: a header, then one (tag, payload) entry per non-empty metric."""
        entries = []
        for m in self.registered:
            payload = m.encode(self.states[m.name])
            if payload != empty_payload(m):
                entries += [tag(m.name), varint.pack(len(payload)), payload]
        return b"".join([WINDOW_AGG.preamble, varint.pack(len(entries) // 3), *entries])

    @classmethod
    def from_bytes(cls, data: bytes, with_lateness: bool = True) -> WindowAgg:
        """Inverse of `to_bytes` (also reads version 2); ValueError on anything else.

        A metric the data does not hold (stored before it existed) reads back empty; an entry
        of a metric not registered here is skipped. `with_lateness=False` leaves the lateness
        metrics empty instead of decoding them: readers of latency and users only (range
        queries, the dashboard) skip half the work.
        """
        registered = metrics()
        by_name = {m.name: m for m in registered}
        states: dict[str, Any] = {}
        for name, blob in _entries(data):
            m = by_name.get(name)
            if m is None or (m.lateness and not with_lateness):
                continue
            try:
                states[name] = m.decode(blob)
            except (struct.error, ValueError) as e:
                raise ValueError(f"window aggregate: bad {name!r} entry: {e}") from None
        return cls._of(states, registered)


def _state(agg: WindowAgg, m: Metric) -> Any:
    """`agg`'s state of metric `m`, or an empty one (an aggregate made before `m` existed)."""
    state = agg.states.get(m.name)
    return m.empty() if state is None else state


_TAGS = {name: varint.pack(2 * i + 1) for i, name in enumerate(BUILT_IN)}
_EMPTY: dict[str, tuple[Metric, bytes]] = {}


def tag(name: str) -> bytes:
    """The tag of metric `name`'s entries (version 4)."""
    built_in = _TAGS.get(name)
    if built_in is not None:
        return built_in
    raw = name.encode()
    return varint.pack(2 * len(raw)) + raw


def empty_payload(m: Metric) -> bytes:
    """The payload of `m`'s empty state: an entry holding it is left out."""
    known = _EMPTY.get(m.name)
    if known is None or known[0] is not m:
        known = _EMPTY[m.name] = (m, m.encode(m.empty()))
    return known[1]


def _entries(data: bytes) -> list[tuple[str, bytes]]:
    """The (metric name, payload) entries of a stored aggregate, version 4, 3 or 2."""
    version = WINDOW_AGG.check(data)
    pos = WINDOW_AGG.size
    if version == 4:
        return _entries_v4(data, pos)
    if version == 2:
        if len(data) < pos + _V2_HEADER.size:
            raise ValueError("window aggregate: too short")
        count, errors, *sizes = _V2_HEADER.unpack_from(data, pos)
        pos += _V2_HEADER.size
        if len(data) != pos + sum(sizes):
            raise ValueError("window aggregate: length mismatch")
        blobs = _split(data, pos, sizes)
        names = ("latency", "users", "lateness", "overdue")
        ints = [("count", COUNT.encode(count)), ("errors", ERRORS.encode(errors))]
        return ints + list(zip(names, blobs, strict=True))
    if len(data) < pos + _ENTRIES.size:
        raise ValueError("window aggregate: too short")
    (n,) = _ENTRIES.unpack_from(data, pos)
    pos, out = pos + _ENTRIES.size, []
    try:
        for _ in range(n):
            (k,) = _NAME.unpack_from(data, pos)
            name = data[pos + 1 : pos + 1 + k].decode()
            pos += 1 + k
            (size,) = _PAYLOAD.unpack_from(data, pos)
            pos += _PAYLOAD.size
            if pos + size > len(data):
                raise ValueError("window aggregate: length mismatch")
            out.append((name, data[pos : pos + size]))
            pos += size
    except (struct.error, UnicodeDecodeError):
        raise ValueError("window aggregate: truncated entry") from None
    if pos != len(data):
        raise ValueError("window aggregate: length mismatch")
    return out


def _entries_v4(data: bytes, pos: int) -> list[tuple[str, bytes]]:
    n, pos = _varint(data, pos)
    out = []
    for _ in range(n):
        t, pos = _varint(data, pos)
        if t & 1:
            if t >> 1 >= len(BUILT_IN):
                raise ValueError(f"window aggregate: unknown built-in metric {t >> 1}")
            name = BUILT_IN[t >> 1]
        else:
            try:
                name = data[pos : pos + (t >> 1)].decode()
            except UnicodeDecodeError:
                raise ValueError("window aggregate: a metric name is not UTF-8") from None
            pos += t >> 1
        size, pos = _varint(data, pos)
        if pos + size > len(data):
            raise ValueError("window aggregate: length mismatch")
        out.append((name, data[pos : pos + size]))
        pos += size
    if pos != len(data):
        raise ValueError("window aggregate: length mismatch")
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return varint.unpack_from(data, pos)
    except ValueError as e:
        raise ValueError(f"window aggregate: truncated entry ({e})") from None


def _split(data: bytes, offset: int, sizes: Iterable[int]) -> list[bytes]:
    out = []
    for n in sizes:
        out.append(data[offset : offset + n])
        offset += n
    return out
