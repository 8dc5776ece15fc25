"""Sorted integers as LEB128 varints of their gaps: how a small digest's values are stored.

A digest of up to 200 values (a window's 30 to 100 latencies, a minute's 180) keeps the values
themselves, as integer offsets from the minimum at the data's decimal scale
(sketches/tdigest.py). Sorted, neighbours are close: the
gap between two latencies to the µs mostly fits in one or two 7-bit groups, where a fixed width
needs 4 bytes for every value as soon as one offset passes 65,535. Each gap is written in
unsigned LEB128 (7 bits a byte, low groups first, the high bit set on every byte but a value's
last), the encoding of protobuf's varints.

Vectorised over whole columns (numpy): many digests' values are encoded or decoded in a fixed
number of passes, never a Python step per value. Values are below 2^35 (offsets below 2^32).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_BYTES", "decode", "encode", "gaps", "lengths", "ungap"]

IntArray = npt.NDArray[np.int64]

#: Bytes of the largest value written (an offset below 2^32 needs 5 groups of 7 bits).
MAX_BYTES = 5

_LIMITS = np.array([1 << (7 * k) for k in range(1, MAX_BYTES)], np.int64)


def gaps(values: IntArray, starts: IntArray) -> IntArray:
    """Each value minus the one before it in its run (runs begin at `starts`; the first kept)."""
    out = np.empty_like(values)
    if not len(values):
        return out
    out[1:] = values[1:] - values[:-1]
    out[0] = values[0]
    out[starts[starts < len(values)]] = values[starts[starts < len(values)]]
    return out


def ungap(gaps_: IntArray, counts: IntArray) -> IntArray:
    """Inverse of `gaps`: running sums restarted at each run (`counts[i]` values in run i)."""
    running = np.cumsum(gaps_)
    before = np.zeros(len(counts), np.int64)
    firsts = np.cumsum(counts) - counts
    some = (counts > 0) & (firsts > 0)
    before[some] = running[firsts[some] - 1]
    return running - np.repeat(before, counts)


def lengths(values: IntArray) -> IntArray:
    """Bytes of each value's varint (1 to `MAX_BYTES`)."""
    out = np.ones(len(values), np.int64)
    for limit in _LIMITS:
        out += values >= limit
    return out


def encode(values: IntArray) -> npt.NDArray[np.uint8]:
    """The varints of `values` (non-negative, below 2^35), end to end.

    A column of 7-bit groups per byte position, as many as the longest value needs; the groups
    each value needs, read row by row, are the varints in order.
    """
    values = np.asarray(values, np.int64)
    if not len(values):
        return np.empty(0, np.uint8)
    size = lengths(values)
    width = int(size.max())
    wide: npt.NDArray[np.unsignedinteger[Any]] = values.astype(
        np.uint64 if width == MAX_BYTES else np.uint32
    )
    out = np.empty((len(values), width), np.uint8)
    for k in range(width):
        out[:, k] = (wide >> (7 * k)) & 0x7F
        if k < width - 1:
            out[:, k] |= (size > k + 1).view(np.uint8) << 7
    return out[np.arange(width) < size[:, None]]


def decode(data: npt.NDArray[np.uint8], count: int) -> IntArray:
    """`count` values from their varints, which must fill `data` exactly; ValueError if not."""
    data = np.asarray(data, np.uint8)
    last = data < 0x80
    if int(last.sum()) != count or (len(data) and not last[-1]):
        raise ValueError(f"varints: {len(data)} bytes do not hold exactly {count} values")
    if not count:
        return np.empty(0, np.int64)
    if count == len(data):  # every value one byte (a lateness digest, mostly)
        return data.astype(np.int64)
    ends = np.flatnonzero(last)
    starts = np.empty(count, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    size = ends - starts + 1
    if int(size.max()) > MAX_BYTES:
        raise ValueError(f"varints: a value longer than {MAX_BYTES} bytes")
    shift = 7 * (np.arange(len(data)) - np.repeat(starts, size))
    return np.add.reduceat((data & 0x7F).astype(np.int64) << shift, starts)
