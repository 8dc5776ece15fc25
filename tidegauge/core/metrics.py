"""The mergeable aggregate of one window (or pane) for one service, and the built-in metrics.

Pure (numpy + sketches, no Spark). Executors build pane aggregates and merge them into windows;
the sink merges services into `*`; the read API merges windows into any range. All three use the
same `WindowAgg.merged`, so a range answer is by construction the merge of its windows.

A `WindowAgg` holds one state per registered metric (tidegauge/core/registry.py). The built-in
metrics are declared at the end of this module: count, errors, latency (t-digest), users
(HyperLogLog), lateness and overdue (t-digests). Stored aggregates are self-describing: a list
of (metric name, bytes) entries, so adding a metric invalidates neither checkpoints nor stored
windows.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from sketches.hll import HyperLogLog, hash32
from sketches.tdigest import TDigest
from tidegauge.core.registry import (
    Batch,
    Metric,
    ResultContext,
    finite_or_none,
    metrics,
    register_metric,
)
from tidegauge.core.sliding import Timeline

__all__ = [
    "BUILT_IN_METRICS",
    "LATENESS_PERCENTILES",
    "PERCENTILES",
    "LateAgg",
    "WindowAgg",
    "added_result_fields",
    "digest_quantiles",
    "field_label",
    "fraction_at_least",
    "update_digest_of",
]

#: Percentiles reported for every window: metric name -> quantile.
PERCENTILES: dict[str, float] = {
    "p50": 0.5,
    "p90": 0.9,
    "p95": 0.95,
    "p99": 0.99,
    "p999": 0.999,
}

#: Lateness (arrival - event time, ms) percentiles reported for every window.
LATENESS_PERCENTILES: dict[str, float] = {"lateness_p50": 0.5, "lateness_p99": 0.99}

_MAGIC = b"TGWA"
#: Version 3: magic, version u8, entries u16, then per entry: name length u8, name (UTF-8),
#: payload length u32, payload (the metric's own encoding).
_VERSION = 3
_HEADER = struct.Struct("<4sBH")
_NAME = struct.Struct("<B")
_PAYLOAD = struct.Struct("<I")
#: Version 2 (before the registry): magic, version, count, errors, then the lengths of the
#: latency digest, users HyperLogLog, lateness and overdue digests. Still read.
_V2_HEADER = struct.Struct("<4sBqqIIII")
_INT = struct.Struct("<q")
_LATE_MAGIC = b"TGLA"
_LATE_HEADER = struct.Struct("<4sBqII")  # magic, version, count, len(lateness), len(overdue)


def fraction_at_least(digest: TDigest, threshold_ms: float, total: int) -> float:
    """Estimated share of `total` events whose digest value is >= `threshold_ms` (0 if none).

    Values are whole milliseconds, so ">= L" is "> L - 0.5": the CDF is read half a
    millisecond below the threshold, which keeps exact answers for exactly-represented values.
    """
    if total <= 0 or digest.count == 0:
        return 0.0
    below = float(digest.cdf(threshold_ms - 0.5))
    return digest.count * (1.0 - below) / total


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
        """`add` with user ids already hashed by `sketches.hll.hash32` (nulls dropped).

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
        """Self-describing binary: a header, then one (name, payload) entry per metric."""
        parts = [_HEADER.pack(_MAGIC, _VERSION, len(self.registered))]
        for m in self.registered:
            name = m.name.encode()
            payload = m.encode(self.states[m.name])
            parts += [_NAME.pack(len(name)), name, _PAYLOAD.pack(len(payload)), payload]
        return b"".join(parts)

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


def _entries(data: bytes) -> list[tuple[str, bytes]]:
    """The (metric name, payload) entries of a stored aggregate, version 3 or 2."""
    if len(data) >= 5 and data[:4] == _MAGIC and data[4] == 2:
        if len(data) < _V2_HEADER.size:
            raise ValueError("window aggregate: too short")
        _, _, count, errors, *sizes = _V2_HEADER.unpack_from(data)
        if len(data) != _V2_HEADER.size + sum(sizes):
            raise ValueError("window aggregate: length mismatch")
        blobs = _split(data, _V2_HEADER.size, sizes)
        names = ("latency", "users", "lateness", "overdue")
        ints = [("count", _INT.pack(count)), ("errors", _INT.pack(errors))]
        return ints + list(zip(names, blobs, strict=True))
    if len(data) < _HEADER.size:
        raise ValueError("window aggregate: too short")
    magic, version, n = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _VERSION:
        raise ValueError(f"window aggregate: bad magic/version {magic!r}/{version}")
    pos, out = _HEADER.size, []
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


@dataclass
class LateAgg:
    """The late events of one window and service in one batch: count and two lateness digests.

    Late events never reach a window's `WindowAgg` (the window is closed), so their lateness
    is kept apart, per batch, and merged in when a reader asks about lateness.
    """

    count: int = 0
    lateness: TDigest = field(default_factory=TDigest)
    overdue: TDigest = field(default_factory=TDigest)

    def add(
        self, lateness_ms: npt.NDArray[np.float64], overdue_ms: float | npt.NDArray[np.float64]
    ) -> None:
        """Add late events: their lateness values and overdue (ms >= 0; one value or one each)."""
        n = len(lateness_ms)
        self.count += n
        if n:
            self.lateness.update(lateness_ms)
            self.overdue.update(np.broadcast_to(np.asarray(overdue_ms, dtype=np.float64), (n,)))

    def merge(self, other: LateAgg) -> None:
        """Fold in the late events of the same window that another part of the batch saw."""
        self.count += other.count
        self.lateness.merge(other.lateness)
        self.overdue.merge(other.overdue)

    def to_bytes(self) -> bytes:
        """Versioned binary: header, then both digests."""
        a, b = self.lateness.to_bytes(), self.overdue.to_bytes()
        return _LATE_HEADER.pack(_LATE_MAGIC, 1, self.count, len(a), len(b)) + a + b

    @classmethod
    def from_bytes(cls, data: bytes) -> LateAgg:
        """Inverse of `to_bytes`; ValueError on anything else."""
        if len(data) < _LATE_HEADER.size:
            raise ValueError("late aggregate: too short")
        magic, version, count, *sizes = _LATE_HEADER.unpack_from(data)
        if magic != _LATE_MAGIC or version != 1:
            raise ValueError(f"late aggregate: bad magic/version {magic!r}/{version}")
        if len(data) != _LATE_HEADER.size + sum(sizes):
            raise ValueError("late aggregate: length mismatch")
        a, b = _split(data, _LATE_HEADER.size, sizes)
        return cls(count, TDigest.from_bytes(a), TDigest.from_bytes(b))

    @staticmethod
    def count_of(data: bytes) -> int:
        """The event count of a serialised LateAgg, without decoding its digests."""
        if len(data) < _LATE_HEADER.size or data[:4] != _LATE_MAGIC:
            raise ValueError("late aggregate: bad header")
        return int(_LATE_HEADER.unpack_from(data)[2])


def _split(data: bytes, offset: int, sizes: Iterable[int]) -> list[bytes]:
    out = []
    for n in sizes:
        out.append(data[offset : offset + n])
        offset += n
    return out


def _lateness_metrics(digest: TDigest) -> dict[str, float | None]:
    if not digest.count:
        empty: dict[str, float | None] = dict.fromkeys(LATENESS_PERCENTILES)
        empty["lateness_max"] = None
        return empty
    q = digest.quantile(np.array(list(LATENESS_PERCENTILES.values())))
    out: dict[str, float | None] = {
        name: _finite(float(q[i])) for i, name in enumerate(LATENESS_PERCENTILES)
    }
    out["lateness_max"] = _finite(float(digest.max))
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# --- the built-in metrics, in the order their fields are reported --------------------------------


def _pack_int(value: int) -> bytes:
    return _INT.pack(value)


def _unpack_int(data: bytes) -> int:
    return int(_INT.unpack(data)[0])


def _sum(states: Sequence[int]) -> int:
    return sum(states)


def _int_metric(
    name: str, update: Any, results: Any, fields: tuple[str, ...], labels: Mapping[str, str]
) -> Metric:
    # Named functions, not lambdas: the job pickles the registry to its executors.
    return Metric(
        name=name,
        empty=int,
        update=update,
        merge=_sum,
        results=results,
        fields=fields,
        encode=_pack_int,
        decode=_unpack_int,
        labels=labels,
    )


def _count_results(state: int, context: ResultContext) -> dict[str, Any]:
    return {"count": state, "events_per_s": state * 1000.0 / context.duration_ms}


def _errors_results(state: int, context: ResultContext) -> dict[str, Any]:
    return {"errors": state, "error_rate": state / context.count if context.count else 0.0}


def _users_results(state: HyperLogLog, _: ResultContext) -> dict[str, Any]:
    return {"distinct_users": round(state.estimate())}


def _lateness_results(state: TDigest, _: ResultContext) -> dict[str, Any]:
    return dict(_lateness_metrics(state))


def _no_results(state: Any, _: ResultContext) -> dict[str, Any]:
    return {}


def _shift(state: TDigest, delta_ms: float) -> TDigest:
    return state.shifted(delta_ms)


def _lateness_update(state: TDigest, batch: Batch) -> TDigest:
    return _digest_update(state, batch, "lateness_ms")


def _overdue_update(state: TDigest, batch: Batch) -> TDigest:
    return _digest_update(state, batch, "overdue_ms")


def _count_update(state: int, batch: Batch) -> int:
    return state + batch.n


def _errors_update(state: int, batch: Batch) -> int:
    status = batch.get("status")
    return state if status is None else state + int(np.count_nonzero(status >= 500))


def _digest_update(state: TDigest, batch: Batch, column: str) -> TDigest:
    values = batch.get(column)
    if values is not None and len(values):
        state.update(values)
    return state


def update_digest_of(state: TDigest, values: npt.NDArray[Any] | None) -> TDigest:
    """Add a column's values to a t-digest, leaving out NaN (absent) ones."""
    if values is not None and len(values):
        values = np.asarray(values, dtype=np.float64)
        values = values[~np.isnan(values)]
        if len(values):
            state.update(values)
    return state


def digest_quantiles(state: TDigest, quantiles: Mapping[str, float]) -> dict[str, float | None]:
    """{name: the digest's quantile q} (None for an empty digest or a non-finite answer)."""
    if not state.count:
        return dict.fromkeys(quantiles)
    q = state.quantile(np.array(list(quantiles.values())))
    return {name: finite_or_none(float(q[i])) for i, name in enumerate(quantiles)}


def _latency_update(state: TDigest, batch: Batch) -> TDigest:
    return update_digest_of(state, batch.get("latency_ms"))


def _latency_results(state: TDigest, _: ResultContext) -> dict[str, Any]:
    out: dict[str, Any] = {
        "latency_count": state.count,
        "latency_mean": state.mean if state.count else None,
    }
    out.update(digest_quantiles(state, PERCENTILES))
    return out


def _users_update(state: HyperLogLog, batch: Batch) -> HyperLogLog:
    hashes = batch.get("user_hash")
    if hashes is not None and len(hashes):
        state.update_hashes(hashes)
    return state


COUNT = register_metric(
    _int_metric(
        "count",
        _count_update,
        _count_results,
        ("count", "events_per_s"),
        {"count": "events", "events_per_s": "events/s"},
    )
)
ERRORS = register_metric(
    _int_metric(
        "errors",
        _errors_update,
        _errors_results,
        ("errors", "error_rate"),
        {"errors": "errors", "error_rate": "error rate"},
    )
)
LATENCY = register_metric(
    Metric(
        name="latency",
        empty=TDigest,
        update=_latency_update,
        merge=TDigest.merged,
        results=_latency_results,
        fields=("latency_count", "latency_mean", *PERCENTILES),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        labels={"latency_mean": "mean ms", **{p: f"{p} ms" for p in PERCENTILES}},
    )
)
USERS = register_metric(
    Metric(
        name="users",
        empty=HyperLogLog,
        update=_users_update,
        merge=HyperLogLog.merged,
        results=_users_results,
        fields=("distinct_users",),
        encode=HyperLogLog.to_bytes,
        decode=HyperLogLog.from_bytes,
        labels={"distinct_users": "users"},
    )
)
LATENESS = register_metric(
    Metric(
        name="lateness",
        empty=TDigest,
        update=_lateness_update,
        merge=TDigest.merged,
        results=_lateness_results,
        fields=(*LATENESS_PERCENTILES, "lateness_max"),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        lateness=True,
    )
)
OVERDUE = register_metric(
    Metric(
        name="overdue",
        empty=TDigest,
        update=_overdue_update,
        merge=TDigest.merged,
        results=_no_results,
        fields=(),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        lateness=True,
        shift=_shift,
    )
)


def _timeline_update(state: Timeline, batch: Batch) -> Timeline:
    # Only a job with sliding windows gives the column (jobs/panes/windows.py): each event's bucket.
    buckets = batch.get("timeline_ms")
    if buckets is None:
        return state
    status = batch.get("status")
    errors = np.zeros(len(buckets), bool) if status is None else np.asarray(status) >= 500
    return state.add(buckets, errors)


def _timeline_results(state: Timeline, _: ResultContext) -> dict[str, Any]:
    peaks = state.peaks()
    if peaks is None:
        return dict.fromkeys(TIMELINE_FIELDS)
    return {
        "peak_events": peaks.events,
        "peak_start": peaks.start_ms,
        "peak_errors": peaks.errors,
        "peak_errors_start": peaks.errors_start_ms,
    }


#: A sliding window's busiest interval (tidegauge/core/sliding.py): None for other windows.
TIMELINE_FIELDS = ("peak_events", "peak_start", "peak_errors", "peak_errors_start")
TIMELINE = register_metric(
    Metric(
        name="timeline",
        empty=Timeline,
        update=_timeline_update,
        merge=Timeline.merged,
        results=_timeline_results,
        fields=TIMELINE_FIELDS,
        encode=Timeline.to_bytes,
        decode=Timeline.from_bytes,
        labels={"peak_events": "peak events", "peak_errors": "peak errors"},
    )
)

#: The metrics every Tidegauge has; others come from plugins (docs/extending.md).
BUILT_IN_METRICS: tuple[Metric, ...] = (
    COUNT,
    ERRORS,
    LATENCY,
    USERS,
    LATENESS,
    OVERDUE,
    TIMELINE,
)


def added_result_fields() -> tuple[str, ...]:
    """Result fields of the registered metrics that are not built in (plugins), in order."""
    built_in = {m.name for m in BUILT_IN_METRICS}
    return tuple(f for m in metrics() if m.name not in built_in for f in m.fields)


def field_label(name: str) -> str:
    """A short label for a result field, as its metric declares it (else the field name)."""
    for m in metrics():
        if name in m.labels:
            return m.labels[name]
    return name
