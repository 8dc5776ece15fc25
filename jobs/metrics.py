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

__all__ = ["PERCENTILES", "WindowAgg"]

#: Percentiles reported for every window: metric name -> quantile.
PERCENTILES: dict[str, float] = {
    "p50": 0.5,
    "p90": 0.9,
    "p95": 0.95,
    "p99": 0.99,
    "p999": 0.999,
}

_MAGIC = b"TGWA"
_VERSION = 1
_HEADER = struct.Struct("<4sBqqII")  # magic, version, count, errors, len(tdigest), len(hll)


@dataclass
class WindowAgg:
    """Events, errors (status >= 500), a latency t-digest and a distinct-users HyperLogLog."""

    count: int = 0
    errors: int = 0
    latency: TDigest = field(default_factory=TDigest)
    users: HyperLogLog = field(default_factory=HyperLogLog)

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
    ) -> None:
        """`add` with user ids already hashed by `sketches.hll.hash32` (nulls dropped).

        The job hashes a micro-batch's user column once and splits the hashes by pane.
        """
        self.count += len(latency_ms)
        self.errors += int(np.count_nonzero(status >= 500))
        lat = latency_ms[~np.isnan(latency_ms)]
        if len(lat):
            self.latency.update(lat)
        if user_hashes is not None and len(user_hashes):
            self.users.update_hashes(user_hashes)

    def merge(self, *others: WindowAgg) -> None:
        """Fold other aggregates into this one (sketch parameters must match)."""
        for o in others:
            self.count += o.count
            self.errors += o.errors
        self.latency.merge(*(o.latency for o in others))
        self.users.merge(*(o.users for o in others))

    @classmethod
    def merged(cls, aggs: Iterable[WindowAgg]) -> WindowAgg:
        """One aggregate of many, merging each sketch kind in one pass."""
        items = list(aggs)
        return cls(
            count=sum(a.count for a in items),
            errors=sum(a.errors for a in items),
            latency=TDigest.merged(a.latency for a in items) if items else TDigest(),
            users=HyperLogLog.merged(a.users for a in items) if items else HyperLogLog(),
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
        return out

    def to_bytes(self) -> bytes:
        """Versioned binary: header, then the two sketches' own encodings."""
        td, hll = self.latency.to_bytes(), self.users.to_bytes()
        return _HEADER.pack(_MAGIC, _VERSION, self.count, self.errors, len(td), len(hll)) + td + hll

    @classmethod
    def from_bytes(cls, data: bytes) -> WindowAgg:
        """Inverse of `to_bytes`; ValueError on anything else."""
        if len(data) < _HEADER.size:
            raise ValueError("window aggregate: too short")
        magic, version, count, errors, n_td, n_hll = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(f"window aggregate: bad magic/version {magic!r}/{version}")
        if len(data) != _HEADER.size + n_td + n_hll:
            raise ValueError("window aggregate: length mismatch")
        td = data[_HEADER.size : _HEADER.size + n_td]
        hll = data[_HEADER.size + n_td :]
        return cls(count, errors, TDigest.from_bytes(td), HyperLogLog.from_bytes(hll))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
