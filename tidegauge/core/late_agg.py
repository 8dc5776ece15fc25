"""The late events of one window and service in one micro-batch: `LateAgg`.

Late events never reach a window's `WindowAgg` (tidegauge/core/window_agg.py: the window is
closed), so the sink stores their count and lateness apart, one `LateAgg` per window, service
and batch (`tg:late:*`, docs/redis.md), and readers merge them in when asked about lateness
(tidegauge/core/store/lateness.py). Pure (numpy + sketches, no Spark): built on executors,
stored by the sink, read by the read API.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sketches.digests import Digests
from sketches.packed import Packed
from sketches.preamble import LATE_AGG
from sketches.tdigest import TDigest

__all__ = ["LateAgg", "merge_late"]

#: After the preamble (magic b"TGLA", version: sketches/preamble.py): count, the lengths of the
#: lateness and overdue digests; then both digests.
_HEADER = struct.Struct("<qII")
_HEADER_END = LATE_AGG.size + _HEADER.size


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
        """Versioned binary: preamble, header, then both digests."""
        return self.pack(self.count, self.lateness.to_bytes(), self.overdue.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> LateAgg:
        """Inverse of `to_bytes`; ValueError on anything else."""
        count, a, b = cls.unpack(data)
        return cls(count, TDigest.from_bytes(a), TDigest.from_bytes(b))

    @staticmethod
    def pack(count: int, lateness: bytes, overdue: bytes) -> bytes:
        """`to_bytes` of a count and two digests already encoded (`TDigest.to_bytes`)."""
        return (
            LATE_AGG.preamble
            + _HEADER.pack(count, len(lateness), len(overdue))
            + lateness
            + overdue
        )

    @staticmethod
    def unpack(data: bytes) -> tuple[int, bytes, bytes]:
        """The count and the two encoded digests of `to_bytes` output; ValueError otherwise."""
        LATE_AGG.check(data)
        if len(data) < _HEADER_END:
            raise ValueError("late aggregate: too short")
        count, n_lateness, n_overdue = _HEADER.unpack_from(data, LATE_AGG.size)
        if len(data) != _HEADER_END + n_lateness + n_overdue:
            raise ValueError("late aggregate: length mismatch")
        split = _HEADER_END + n_lateness
        return int(count), data[_HEADER_END:split], data[split:]

    @staticmethod
    def count_of(data: bytes) -> int:
        """The event count of a serialised LateAgg, without decoding its digests."""
        LATE_AGG.check(data)
        if len(data) < _HEADER_END:
            raise ValueError("late aggregate: too short")
        return int(_HEADER.unpack_from(data, LATE_AGG.size)[0])


def merge_late(parts: Sequence[bytes], keys: npt.ArrayLike, n: int) -> list[bytes]:
    """Late aggregate k: the `LateAgg` bytes of the parts whose key is k, merged in order.

    Every part at once, as columns (sketches/digests.py): the sink's roll-ups and the readers
    merge thousands of them.
    """
    k = np.asarray(keys, np.int64)
    columns = _unpacked(parts)
    if columns is None:  # some part is not of this layout: one by one, naming what is wrong
        unpacked = [LateAgg.unpack(blob) for blob in parts]
        counts = np.array([c for c, _, _ in unpacked], np.int64)
        lateness = Digests.decode([a for _, a, _ in unpacked])
        overdue = Digests.decode([b for _, _, b in unpacked])
    else:
        counts, lateness, overdue = columns
    total = np.zeros(n, np.int64)
    np.add.at(total, k, counts)
    a_all = lateness.combine(k, n).encode()
    b_all = overdue.combine(k, n).encode()
    return [LateAgg.pack(c, a, b) for c, a, b in zip(total.tolist(), a_all, b_all, strict=True)]


def _unpacked(parts: Sequence[bytes]) -> tuple[npt.NDArray[np.int64], Digests, Digests] | None:
    """Counts and both digests of `LateAgg` blobs, every header read at once.

    None when a blob is not a well-formed `LateAgg` of this layout (`merge_late` then unpacks
    them one by one and raises on the first bad one).
    """
    if not parts:
        return None
    blobs = Packed(parts)
    starts, sizes = blobs.starts, blobs.sizes
    if (sizes < _HEADER_END).any() or not blobs.equal_at(starts, LATE_AGG.preamble):
        return None
    head = starts + LATE_AGG.size
    counts = blobs.read(head, "<i8").astype(np.int64)
    n_lateness = blobs.read(head + 8, "<u4").astype(np.int64)
    n_overdue = blobs.read(head + 12, "<u4").astype(np.int64)
    if (sizes != _HEADER_END + n_lateness + n_overdue).any():
        return None
    at = starts + _HEADER_END
    lateness = Digests.unpack(Packed.of(blobs.buf, at, n_lateness))
    overdue = Digests.unpack(Packed.of(blobs.buf, at + n_lateness, n_overdue))
    if lateness is None or overdue is None:
        return None
    return counts, lateness, overdue
