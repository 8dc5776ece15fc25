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
The same varints frame a window aggregate's entries (tidegauge/core/window_agg.py): `pack` and
`unpack_from` write and read one, `read_at` one at each of many offsets of a joined buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "LIMIT",
    "MAX_BYTES",
    "decode",
    "decode_runs",
    "encode",
    "gaps",
    "lengths",
    "pack",
    "read_at",
    "ungap",
    "unpack_from",
]

IntArray = npt.NDArray[np.int64]

#: Bytes of the largest value written (an offset below 2^32 needs 5 groups of 7 bits).
MAX_BYTES = 5

#: The values varints hold here: below 2^35.
LIMIT = 1 << (7 * MAX_BYTES)

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

    A column of 7-bit groups per byte position, as many as the largest value needs, and beside
    it which of them a value keeps (those below its length); read row by row, the kept bytes
    are the varints in order.
    """
    values = np.asarray(values, np.int64)
    n = len(values)
    if not n:
        return np.empty(0, np.uint8)
    width = 1 + int((int(values.max()) >= _LIMITS).sum())
    wide: npt.NDArray[np.unsignedinteger[Any]] = values.astype(
        np.uint64 if width == MAX_BYTES else np.uint32
    )
    out = np.empty((n, width), np.uint8)
    keep = np.empty((n, width), np.bool_)
    keep[:, 0] = True
    for k in range(width):
        group = (wide >> (7 * k)) & 0x7F
        if k < width - 1:
            more = values >= _LIMITS[k]  # the value goes on past this byte
            out[:, k] = group | (more.view(np.uint8) << 7)
            keep[:, k + 1] = more
        else:
            out[:, k] = group
    return out.reshape(-1)[keep.reshape(-1)]


def decode(data: npt.NDArray[np.uint8], count: int) -> IntArray:
    """`count` values from their varints, which must fill `data` exactly; ValueError if not.

    Read from each value's last byte (its highest group) down: one pass per byte position,
    each over the values still that long (most gaps take one or two bytes).
    """
    data = np.asarray(data, np.uint8)
    last = data < 0x80
    if int(last.sum()) != count or (len(data) and not last[-1]):
        raise ValueError(f"varints: {len(data)} bytes do not hold exactly {count} values")
    if not count:
        return np.empty(0, np.int64)
    if count == len(data):  # every value one byte (a lateness digest, mostly)
        return data.astype(np.int64)
    ends = np.flatnonzero(last)
    size = np.diff(ends, prepend=-1)
    width = int(size.max())
    if width > MAX_BYTES:
        raise ValueError(f"varints: a value longer than {MAX_BYTES} bytes")
    out = data[ends].astype(np.int64)
    longer = np.flatnonzero(size > 1)
    for k in range(1, width):
        lower = (data[ends[longer] - k] & 0x7F).astype(np.int64)
        out[longer] = (out[longer] << 7) | lower
        longer = longer[size[longer] > k + 1]
    return out


def pack(value: int) -> bytes:
    """One value's varint (0 <= value < 2^35)."""
    if not 0 <= value < LIMIT:
        raise ValueError(f"varints: {value} is out of range")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def unpack_from(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `data[pos:]` and the position after it; ValueError if truncated or long."""
    value = 0
    for k in range(MAX_BYTES):
        if pos + k >= len(data):
            raise ValueError("varints: truncated")
        byte = data[pos + k]
        value |= (byte & 0x7F) << (7 * k)
        if byte < 0x80:
            return value, pos + k + 1
    raise ValueError(f"varints: a value longer than {MAX_BYTES} bytes")


def read_at(buf: npt.NDArray[np.uint8], at: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
    """The varint at each offset of `buf` (before `ends[i]`), and the offset after it.

    ValueError if one runs to its end or is longer than `MAX_BYTES`.
    """
    value = np.zeros(len(at), np.int64)
    after = np.asarray(at, np.int64).copy()
    going = np.ones(len(at), np.bool_)
    for k in range(MAX_BYTES):
        pos = at + k
        if (going & (pos >= ends)).any():
            raise ValueError("varints: truncated")
        byte = np.where(going, buf[np.minimum(pos, len(buf) - 1)], 0).astype(np.int64)
        value |= (byte & 0x7F) << (7 * k)
        after += going
        going &= byte >= 0x80
        if not going.any():
            return value, after
    raise ValueError(f"varints: a value longer than {MAX_BYTES} bytes")


def decode_runs(data: npt.NDArray[np.uint8], nbytes: IntArray, counts: IntArray) -> IntArray:
    """The varints of runs laid end to end (run i: `nbytes[i]` bytes, `counts[i]` values).

    ValueError if a run holds another number of values or ends inside one: each blob's values
    stay its own, whatever its neighbours hold.
    """
    data = np.asarray(data, np.uint8)
    last = data < 0x80
    ends = np.cumsum(nbytes)
    filled = np.asarray(nbytes) > 0
    if len(ends) and (int(ends[-1]) != len(data) or not last[ends[filled] - 1].all()):
        raise ValueError("varints: a run ends inside a value")
    value_ends = np.flatnonzero(last)
    if (np.diff(np.searchsorted(value_ends, ends), prepend=0) != counts).any():
        raise ValueError("varints: a run holds another number of values")
    return decode(data, int(np.sum(counts)))
