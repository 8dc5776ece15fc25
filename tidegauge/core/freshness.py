"""Freshness: how old a record is when its micro-batch's results are committed to the store.

For each record, freshness = (the moment its batch was committed to Redis) - (its broker
timestamp). It is what an ops team means by "how far behind is the page": transport, waiting for
the trigger, the batch itself and the sink, all in one figure. Measured exactly, per batch: the
stateful step reports the broker timestamps of the batch's records as a histogram of distinct
milliseconds (`encode_times`, a few kB even for 50k records spread over seconds), the sink's
batch writer merges the histograms and, once the transaction is in, takes percentiles by rank
(`freshness`). Pure; no Spark, no Redis.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sketches.preamble import BROKER_TIMES

__all__ = ["Freshness", "TimeHistogram", "encode_times", "freshness", "merge_times"]

#: After the preamble (magic b"TGFT", no version byte: sketches/preamble.py): the number of
#: distinct times; then the times and their counts, little-endian i64 each.
_HEAD = struct.Struct("<I")
_HEAD_END = BROKER_TIMES.size + _HEAD.size

#: Distinct broker timestamps (ms, ascending) and how many records carry each.
TimeHistogram = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def encode_times(times_ms: npt.ArrayLike) -> bytes:
    """The histogram of these broker timestamps (NaN/None ignored), as bytes."""
    arr = np.asarray(times_ms, dtype=np.float64)
    arr = arr[~np.isnan(arr)].astype(np.int64)
    uniq, counts = np.unique(arr, return_counts=True)
    return (
        BROKER_TIMES.preamble
        + _HEAD.pack(len(uniq))
        + uniq.astype("<i8").tobytes()
        + counts.astype("<i8").tobytes()
    )


def _decode(blob: bytes) -> TimeHistogram:
    BROKER_TIMES.check(blob)
    if len(blob) < _HEAD_END:
        raise ValueError("broker-time histogram: too short")
    (n,) = _HEAD.unpack_from(blob, BROKER_TIMES.size)
    if len(blob) != _HEAD_END + 16 * n:
        raise ValueError("broker-time histogram: length mismatch")
    values = np.frombuffer(blob, dtype="<i8", offset=_HEAD_END)
    return values[:n].astype(np.int64), values[n:].astype(np.int64)


def merge_times(blobs: Iterable[bytes]) -> TimeHistogram:
    """One histogram from several `encode_times` blobs (e.g. one per state group)."""
    parts = [_decode(b) for b in blobs]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    times = np.concatenate([t for t, _ in parts])
    counts = np.concatenate([c for _, c in parts])
    uniq, inverse = np.unique(times, return_inverse=True)
    return uniq, np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)


@dataclass(frozen=True)
class Freshness:
    """Freshness of one batch's records (ms): nearest-rank p50 and p99, and the oldest record."""

    batch_id: int
    commit_time: int
    records: int
    p50_ms: int
    p99_ms: int
    max_ms: int

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (status, batch history)."""
        return asdict(self)


def _rank(sorted_ages: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], q: float) -> int:
    """Nearest-rank quantile: the smallest age with at least ceil(q * n) records at or below."""
    cum = np.cumsum(counts)
    k = max(1, int(np.ceil(q * cum[-1])))
    return int(sorted_ages[int(np.searchsorted(cum, k))])


def freshness(hist: TimeHistogram, commit_ms: int, batch_id: int) -> Freshness | None:
    """Freshness of every record of `hist` committed at `commit_ms`; None without records."""
    times, counts = hist
    if not len(times) or int(counts.sum()) == 0:
        return None
    # Newest record first = youngest age first: ages ascending.
    ages = (commit_ms - times)[::-1]
    counts = counts[::-1]
    return Freshness(
        batch_id=batch_id,
        commit_time=commit_ms,
        records=int(counts.sum()),
        p50_ms=_rank(ages, counts, 0.50),
        p99_ms=_rank(ages, counts, 0.99),
        max_ms=int(ages[-1]),
    )
