"""The mergeable aggregate of one window (or pane) for one service, and the metrics it yields.

Pure (numpy + sketches, no Spark). Executors build pane aggregates and merge them into windows;
the sink merges services into `*`; the read API merges windows into any range. All three use the
same `WindowAgg.merged`, so a range answer is by construction the merge of its windows.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from sketches.hll import HyperLogLog, hash32
from sketches.tdigest import TDigest

__all__ = ["LATENESS_PERCENTILES", "PERCENTILES", "LateAgg", "WindowAgg", "fraction_at_least"]

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
_VERSION = 2
# magic, version, count, errors, len(latency digest), len(hll), len(lateness), len(overdue)
_HEADER = struct.Struct("<4sBqqIIII")
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


@dataclass
class WindowAgg:
    """Events, errors (status >= 500), latency and lateness t-digests, a users HyperLogLog.

    `lateness` holds arrival (broker timestamp) - event time per event, in ms. `overdue`
    holds, for each event that arrived after the event-time frontier had passed its window's
    end, by how much (frontier - window end, ms, >= 0 when added): with allowed lateness L the
    event would have been late exactly when that value is >= L, which is what the what-if
    question ("how many would be late with L?") reads. See docs/time.md.
    """

    count: int = 0
    errors: int = 0
    latency: TDigest = field(default_factory=TDigest)
    users: HyperLogLog = field(default_factory=HyperLogLog)
    lateness: TDigest = field(default_factory=TDigest)
    overdue: TDigest = field(default_factory=TDigest)

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
    ) -> None:
        """`add` with user ids already hashed by `sketches.hll.hash32` (nulls dropped).

        The job hashes a micro-batch's user column once and splits the hashes by pane.
        `lateness_ms` (NaN = unknown) and `overdue_ms` (only the events that have one) are
        optional so sessions and tests can leave them out.
        """
        self.count += len(latency_ms)
        self.errors += int(np.count_nonzero(status >= 500))
        lat = latency_ms[~np.isnan(latency_ms)]
        if len(lat):
            self.latency.update(lat)
        if user_hashes is not None and len(user_hashes):
            self.users.update_hashes(user_hashes)
        if lateness_ms is not None and len(lateness_ms):
            self.lateness.update(lateness_ms)
        if overdue_ms is not None and len(overdue_ms):
            self.overdue.update(overdue_ms)

    def merge(self, *others: WindowAgg) -> None:
        """Fold other aggregates into this one (sketch parameters must match)."""
        for o in others:
            self.count += o.count
            self.errors += o.errors
        self.latency.merge(*(o.latency for o in others))
        self.users.merge(*(o.users for o in others))
        self.lateness.merge(*(o.lateness for o in others))
        self.overdue.merge(*(o.overdue for o in others))

    @classmethod
    def merged(
        cls,
        aggs: Iterable[WindowAgg],
        overdue_shifts_ms: Iterable[float] | None = None,
        *,
        with_lateness: bool = True,
    ) -> WindowAgg:
        """One aggregate of many, merging each sketch kind in one pass.

        `overdue_shifts_ms` (one per aggregate) re-bases each `overdue` digest before merging:
        panes measure it against their own end, a window against its end, so a pane ending
        `d` ms before its window contributes its digest shifted by -d. `with_lateness=False`
        leaves both lateness digests empty: a reader of latency and users skips that work.
        """
        items = list(aggs)
        if not items:
            return cls()
        if not with_lateness:
            return cls(
                count=sum(a.count for a in items),
                errors=sum(a.errors for a in items),
                latency=TDigest.merged(a.latency for a in items),
                users=HyperLogLog.merged(a.users for a in items),
            )
        overdue = [a.overdue for a in items]
        if overdue_shifts_ms is not None:
            overdue = [
                d.shifted(s) if s else d for d, s in zip(overdue, overdue_shifts_ms, strict=True)
            ]
        return cls(
            count=sum(a.count for a in items),
            errors=sum(a.errors for a in items),
            latency=TDigest.merged(a.latency for a in items),
            users=HyperLogLog.merged(a.users for a in items),
            lateness=TDigest.merged(a.lateness for a in items),
            overdue=TDigest.merged(overdue),
        )

    def metrics(self, duration_ms: int) -> dict[str, Any]:
        """The numbers shown for a window (or range) lasting `duration_ms`."""
        q = (
            self.latency.quantile(np.array(list(PERCENTILES.values())))
            if self.latency.count
            else None
        )
        out: dict[str, Any] = {
            "count": self.count,
            "events_per_s": self.count * 1000.0 / duration_ms,
            "errors": self.errors,
            "error_rate": self.errors / self.count if self.count else 0.0,
            "latency_count": self.latency.count,
            "latency_mean": self.latency.mean if self.latency.count else None,
            "distinct_users": round(self.users.estimate()),
        }
        for i, name in enumerate(PERCENTILES):
            out[name] = None if q is None else _finite(float(q[i]))
        out.update(_lateness_metrics(self.lateness))
        return out

    def to_bytes(self) -> bytes:
        """Versioned binary: header, then the four sketches' own encodings."""
        parts = [
            self.latency.to_bytes(),
            self.users.to_bytes(),
            self.lateness.to_bytes(),
            self.overdue.to_bytes(),
        ]
        head = _HEADER.pack(_MAGIC, _VERSION, self.count, self.errors, *(len(p) for p in parts))
        return head + b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes, with_lateness: bool = True) -> WindowAgg:
        """Inverse of `to_bytes`; ValueError on anything else.

        `with_lateness=False` leaves the two lateness digests empty instead of decoding them:
        readers of latency and users only (range queries, the dashboard) skip half the work.
        """
        if len(data) < _HEADER.size:
            raise ValueError("window aggregate: too short")
        magic, version, count, errors, *sizes = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(f"window aggregate: bad magic/version {magic!r}/{version}")
        if len(data) != _HEADER.size + sum(sizes):
            raise ValueError("window aggregate: length mismatch")
        blobs = _split(data, _HEADER.size, sizes)
        return cls(
            count,
            errors,
            TDigest.from_bytes(blobs[0]),
            HyperLogLog.from_bytes(blobs[1]),
            TDigest.from_bytes(blobs[2]) if with_lateness else TDigest(),
            TDigest.from_bytes(blobs[3]) if with_lateness else TDigest(),
        )


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
