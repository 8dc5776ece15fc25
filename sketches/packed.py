"""Reading many blobs laid out alike at once: fields gathered from one joined buffer.

The columnar sketches (sketches/digests.py, sketches/hlls.py) and window aggregates
(tidegauge/core/window_aggs.py) decode thousands of small blobs per micro-batch. Parsing each
with `struct` costs microseconds of Python apiece; when every blob has the same layout (the
same format version, the same fields in the same order) each field sits at an offset that
numpy can compute for all blobs together, and one gather reads it from all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["Packed", "joined_offsets", "ranges"]

IntArray = npt.NDArray[np.int64]

#: Mean bytes per run from which `Packed.runs` joins slices instead of indexing every byte.
_JOINED_FROM = 128


def ranges(starts: IntArray, sizes: IntArray) -> IntArray:
    """Concatenated aranges [start, start + size) (the points of some groups, in order)."""
    total = int(sizes.sum())
    if not total:
        return np.empty(0, np.int64)
    ends = np.cumsum(sizes)
    step = np.ones(total, np.int64)
    filled = sizes > 0
    first = (ends - sizes)[filled]
    step[first] = starts[filled] - np.concatenate(([0], (starts + sizes - 1)[filled][:-1]))
    step[0] = starts[filled][0]
    return np.cumsum(step)


def joined_offsets(parts: Sequence[IntArray]) -> IntArray:
    """The offsets of ragged columns (group i: `values[offsets[i]:offsets[i+1]]`) end to end."""
    shift = np.cumsum([0] + [int(o[-1]) for o in parts[:-1]])
    return np.concatenate([[0]] + [o[1:] + s for o, s in zip(parts, shift, strict=True)])


class Packed:
    """Blobs joined into one byte buffer; `starts[i]`, `sizes[i]` locate blob i in it."""

    def __init__(self, blobs: Sequence[bytes]) -> None:
        self.buf = np.frombuffer(b"".join(blobs), np.uint8)
        self.sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
        self.starts = np.zeros(len(blobs), np.int64)
        np.cumsum(self.sizes[:-1], out=self.starts[1:])

    @classmethod
    def of(cls, buf: npt.NDArray[np.uint8], starts: IntArray, sizes: IntArray) -> Packed:
        """Blobs that are slices of a buffer already joined."""
        out = cls.__new__(cls)
        out.buf, out.starts, out.sizes = buf, starts, sizes
        return out

    def bytes_at(self, at: IntArray, width: int) -> npt.NDArray[np.uint8]:
        """`width` bytes at each offset: shape (len(at), width); out of range -> IndexError."""
        return self.buf[at[:, None] + np.arange(width)]

    def equal_at(self, at: IntArray, expected: bytes) -> bool:
        """Whether the bytes at every offset are `expected`."""
        if len(at) and int(at.max()) + len(expected) > len(self.buf):
            return False
        want = np.frombuffer(expected, np.uint8)
        return bool((self.bytes_at(at, len(expected)) == want).all())

    def read(self, at: IntArray, dtype: str) -> npt.NDArray[np.generic]:
        """One little-endian value of `dtype` at each offset."""
        size = np.dtype(dtype).itemsize
        if len(at) and int(at.max()) + size > len(self.buf):
            raise IndexError("a field runs past the end of its blob")
        return np.ascontiguousarray(self.bytes_at(at, size)).view(dtype).reshape(-1)

    def runs(self, at: IntArray, counts: IntArray, dtype: str) -> npt.NDArray[np.generic]:
        """`counts[i]` consecutive values of `dtype` from each offset, concatenated.

        Long runs (a busy window's digest) are joined a slice each (~0.75 µs a run); short ones
        gathered through one index of their bytes (~9 ns a byte).
        """
        size = np.dtype(dtype).itemsize
        nbytes = np.asarray(counts, np.int64) * size
        total = int(nbytes.sum())
        if len(at) and total >= _JOINED_FROM * len(at):
            ends = at + nbytes
            if int(ends.max()) > len(self.buf) or int(at.min()) < 0:
                raise IndexError("a run runs past the end of its blob")
            view = memoryview(self.buf.data)
            joined = b"".join([view[a:e] for a, e in zip(at.tolist(), ends.tolist(), strict=True)])
            return np.frombuffer(bytearray(joined), dtype)
        idx = ranges(at, nbytes)
        if len(idx) and int(idx.max()) >= len(self.buf):
            raise IndexError("a run runs past the end of its blob")
        return self.buf[idx].view(dtype)
