"""Many HyperLogLog sketches at once, as sparse columns: `Hlls`.

The reason is `Digests`' (sketches/digests.py): a batch touching thousands of (window, group)
pairs cannot afford an object per pair, and a `HyperLogLog` object is 2^p registers (16 KiB at
p = 14) however few users it saw. `Hlls` keeps only the non-zero registers of each group,
sorted by index: group i's are `index[offsets[i]:offsets[i+1]]` with their values in `rank`.
A window of 40 users is then 40 entries, and building, merging (element-wise max), estimating
and encoding all groups takes a fixed number of numpy passes.

Same answers as `HyperLogLog`, bit for bit: `build` holds the registers of a sketch updated
with the group's hashes, `combine` those of `HyperLogLog.merged`, `estimate` is
`HyperLogLog.estimate`, `encode` is `HyperLogLog.to_bytes` (tests/unit/sketches/test_hlls.py).
"""

from __future__ import annotations

import functools
import itertools
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import sketches.varint as varint
from sketches.hll import (
    _DEFLATE_FROM,
    _DEFLATED,
    _DENSE,
    _GAPS,
    _HEADER,
    _KEY_VALUE_BITS,
    _SPARSE,
    _SPARSE_COUNT,
    _SPARSE_ENTRY,
    DEFAULT_P,
    HyperLogLog,
    _check_p,
    _index_rank,
    _read_gaps,
)
from sketches.packed import Packed, joined_offsets, ranges
from sketches.preamble import HLL

__all__ = ["Hlls"]

IntArray = npt.NDArray[np.int64]

#: Bits of a packed (register index, value) entry that hold the value (values are <= 33 - p).
_VALUE_BITS = 6


#: Sparse sketches among others from which `Hlls.decode` reads them at once.
_MIXED_FROM = 16

#: `Hlls._of_entries` lays out every register of its groups when they are at most this many
#: per entry (a byte each, against ~9 bytes an entry and a sort of them).
_MATRIX_PER_ENTRY = 4

#: Mean entries per sketch from which `Hlls._placed` copies a slice per sketch rather than
#: indexing every entry (a slice costs about what indexing a few hundred entries does).
_SLICED_FROM = 256


#: A sketch's number of registers as its varint (`encode`: the same few hundred counts recur).
_count = functools.lru_cache(maxsize=4096)(varint.pack)


@dataclass(eq=False)
class Hlls:
    """The HyperLogLog sketches of `len(self)` groups, precision `p`, as sparse columns."""

    p: int
    offsets: IntArray
    index: IntArray
    rank: npt.NDArray[np.uint8]

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    @property
    def sizes(self) -> IntArray:
        """Non-zero registers per sketch."""
        return np.diff(self.offsets)

    @classmethod
    def empty(cls, n: int, p: int = DEFAULT_P) -> Hlls:
        """`n` empty sketches."""
        return cls(
            _check_p(p), np.zeros(n + 1, np.int64), np.empty(0, np.int64), np.empty(0, np.uint8)
        )

    @classmethod
    def _of_entries(
        cls, p: int, group: IntArray, index: IntArray, rank: npt.NDArray[np.uint8], n: int
    ) -> Hlls:
        """Sketches of (group, register index, value) entries: the largest value per register.

        Where the entries would fill most of the groups' registers (the `*` of a busy range,
        many users), in one matrix of every register; otherwise by sorting the entries.
        """
        if index.size and (n << p) <= _MATRIX_PER_ENTRY * index.size:
            registers = np.zeros(n << p, np.uint8)
            np.maximum.at(registers, (group << p) | index, rank)
            cells = np.flatnonzero(registers)
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(cells >> p, minlength=n), out=offsets[1:])
            return cls(p, offsets, cells & ((1 << p) - 1), registers[cells])
        packed = (((group << p) | index) << _VALUE_BITS) | rank.astype(np.int64)
        packed.sort()
        register = packed >> _VALUE_BITS
        last = np.ones(packed.size, np.bool_)
        last[:-1] = register[1:] != register[:-1]
        kept = packed[last]
        register = register[last]
        group_of = register >> p
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(group_of, minlength=n), out=offsets[1:])
        return cls(
            p,
            offsets,
            register & ((1 << p) - 1),
            (kept & ((1 << _VALUE_BITS) - 1)).astype(np.uint8),
        )

    @classmethod
    def build(
        cls, hashes: npt.ArrayLike, groups: npt.ArrayLike, n: int, p: int = DEFAULT_P
    ) -> Hlls:
        """Sketch g of the hashes (`sketches.tg64.hash32`) whose group is g (groups in [0, n))."""
        h = np.asarray(hashes, dtype=np.uint32).reshape(-1)
        g = np.asarray(groups, dtype=np.int64).reshape(-1)
        index, rank = _index_rank(h, _check_p(p))
        return cls._of_entries(p, g, index.astype(np.int64), rank, n)

    @classmethod
    def of(cls, sketches: Sequence[HyperLogLog]) -> Hlls:
        """The columns of these sketches (all of one precision), in order."""
        if not sketches:
            return cls.empty(0)
        p = sketches[0].p
        if any(s.p != p for s in sketches):
            raise ValueError("Hlls.of: sketches of different precisions")
        nz = [np.flatnonzero(s.registers) for s in sketches]
        offsets = np.zeros(len(nz) + 1, np.int64)
        np.cumsum([len(x) for x in nz], out=offsets[1:])
        return cls(
            p,
            offsets,
            np.concatenate(nz).astype(np.int64),
            np.concatenate([s.registers[i] for s, i in zip(sketches, nz, strict=True)]),
        )

    def sketch(self, i: int) -> HyperLogLog:
        """Group i's sketch as a `HyperLogLog`."""
        out = HyperLogLog(self.p)
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        out.registers[self.index[lo:hi]] = self.rank[lo:hi]
        return out

    @classmethod
    def concat(cls, parts: Sequence[Hlls]) -> Hlls:
        """The groups of `parts`, one after another."""
        if not parts:
            return cls.empty(0)
        if len(parts) == 1:
            return parts[0]
        p = parts[0].p
        if any(x.p != p for x in parts):
            raise ValueError("Hlls.concat: sketches of different precisions")
        return cls(
            p,
            joined_offsets([x.offsets for x in parts]),
            np.concatenate([x.index for x in parts]),
            np.concatenate([x.rank for x in parts]),
        )

    def take(self, rows: npt.ArrayLike) -> Hlls:
        """The sketches of `rows`, in that order (a row may repeat)."""
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        sizes = self.sizes[idx]
        offsets = np.zeros(idx.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        at = ranges(self.offsets[:-1][idx], sizes)
        return Hlls(self.p, offsets, self.index[at], self.rank[at])

    def combine(self, keys: npt.ArrayLike, n: int) -> Hlls:
        """Sketch k: the union (`HyperLogLog.merged`) of the rows whose key is k."""
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        if k.size != len(self):
            raise ValueError("Hlls.combine: one key per sketch")
        group = np.repeat(k, self.sizes)
        return Hlls._of_entries(self.p, group, self.index, self.rank, n)

    # --- reading ----------------------------------------------------------------------------

    def estimate(self) -> npt.NDArray[np.float64]:
        """`HyperLogLog.estimate` of every sketch (Ertl's estimator)."""
        return _estimate(self._histogram(), self.p)

    def _histogram(self) -> IntArray:
        """Registers per value (0 to 33 - p) of every sketch, one row each."""
        n, q, m = len(self), 32 - self.p, 1 << self.p
        group = np.repeat(np.arange(n), self.sizes)
        hist = np.bincount(group * (q + 2) + self.rank, minlength=n * (q + 2)).reshape(n, q + 2)
        hist[:, 0] = m - self.sizes
        return hist

    @classmethod
    def estimate_blobs(cls, blobs: Sequence[bytes]) -> npt.NDArray[np.float64]:
        """`estimate` of `decode(blobs)`, the same floats, without decoding full sketches.

        A sketch holding every register (a busy window's `*`: 16,384 of them) is estimated
        from its registers where they lie, one histogram each; building its entries first
        cost several times that (a page estimates hundreds of them on its first draw).
        """
        if not blobs:
            return np.zeros(0, np.float64)
        packed = Packed(blobs)
        fast = cls.unpack(packed)
        if fast is not None:
            return fast.estimate()
        sparse = cls._sparse(packed)
        at, rest = np.flatnonzero(sparse), np.flatnonzero(~sparse)
        for i in rest.tolist():
            HLL.check(blobs[i])
            if len(blobs[i]) < HLL.size + _HEADER.size:
                HyperLogLog.from_bytes(blobs[i])  # raises, naming what is wrong
        ps = {int(blobs[i][HLL.size]) for i in rest.tolist()}
        few = cls.decode([blobs[i] for i in at.tolist()]) if at.size else None
        if few is not None:
            ps.add(few.p)
        if len(ps) != 1:
            raise ValueError("Hlls.decode: sketches of different precisions")
        p = _check_p(ps.pop())
        hist = np.empty((len(blobs), 34 - p), np.int64)
        if few is not None:
            hist[at] = few._histogram()
        registers = _registers([blobs[i] for i in rest.tolist()], p)
        for row, regs in zip(rest.tolist(), registers, strict=True):
            hist[row] = np.bincount(regs, minlength=34 - p)
        return _estimate(hist, p)

    # --- bytes ------------------------------------------------------------------------------

    def encode(self) -> list[bytes]:
        """`HyperLogLog.to_bytes` of every sketch."""
        m = 1 << self.p
        head = HLL.preamble + _HEADER.pack(self.p, _GAPS)
        dense_size = (5 * m) // 8
        keys = (self.index << _KEY_VALUE_BITS) | self.rank.astype(np.int64)
        gaps = varint.gaps(keys, self.offsets[:-1])
        ends = np.zeros(len(gaps) + 1, np.int64)
        np.cumsum(varint.lengths(gaps), out=ends[1:])
        data = varint.encode(gaps).tobytes()
        byte_at = ends[self.offsets].tolist()
        out = []
        for i, (lo, hi) in enumerate(itertools.pairwise(self.offsets.tolist())):
            count = _count(hi - lo)
            a, b = byte_at[i], byte_at[i + 1]
            size = len(count) + b - a
            if size < _DEFLATE_FROM and size < dense_size:
                out.append(head + count + data[a:b])
                continue
            # `HyperLogLog.to_bytes`' choice, without encoding the gaps again
            registers = np.zeros(m, np.uint8)
            registers[self.index[lo:hi]] = self.rank[lo:hi]
            deflated = zlib.compress(registers.tobytes(), 1) if size >= _DEFLATE_FROM else None
            if deflated is not None and len(deflated) < min(size, dense_size):
                out.append(HLL.preamble + _HEADER.pack(self.p, _DEFLATED) + deflated)
            elif size < dense_size:
                out.append(head + count + data[a:b])
            else:
                out.append(HyperLogLog(self.p, registers).to_bytes())  # dense
        return out

    @classmethod
    def decode(cls, blobs: Sequence[bytes]) -> Hlls:
        """Sketches of `HyperLogLog.to_bytes` blobs (any encoding); ValueError on bad ones.

        Sparse sketches are read all at once where they lie; dense and deflated ones (a busy
        window's users, the `*` of many services) as one matrix of registers (`_decode_each`).
        """
        if not blobs:
            return cls.empty(0)
        packed = Packed(blobs)
        fast = cls.unpack(packed)
        if fast is not None:
            return fast
        sparse = cls._sparse(packed)
        if sparse.sum() < _MIXED_FROM:
            return cls._decode_each(blobs)
        at, rest = np.flatnonzero(sparse), np.flatnonzero(~sparse)
        many = cls.unpack(Packed([blobs[i] for i in at.tolist()]))
        few = cls._decode_each([blobs[i] for i in rest.tolist()])
        if many is None or (len(few) and few.p != many.p):
            return cls._decode_each(blobs)  # (names what is wrong)
        return cls._placed(len(blobs), [(at, many), (rest, few)]) if len(few) else many

    @classmethod
    def _placed(cls, n: int, parts: Sequence[tuple[IntArray, Hlls]]) -> Hlls:
        """`n` sketches: part j's sketch i goes to row `rows_j[i]` (every row filled once).

        Big sketches (a busy `*`'s 16,384 registers) are copied a slice each; small ones
        through one index of their entries.
        """
        p = parts[0][1].p
        sizes = np.zeros(n, np.int64)
        for rows, part in parts:
            sizes[rows] = part.sizes
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        index = np.empty(int(offsets[-1]), np.int64)
        rank = np.empty(int(offsets[-1]), np.uint8)
        for rows, part in parts:
            to = offsets[:-1][rows]
            if len(rows) and part.index.size >= _SLICED_FROM * len(rows):
                lows, highs = part.offsets[:-1].tolist(), part.offsets[1:].tolist()
                for dst, lo, hi in zip(to.tolist(), lows, highs, strict=True):
                    index[dst : dst + hi - lo] = part.index[lo:hi]
                    rank[dst : dst + hi - lo] = part.rank[lo:hi]
            else:
                at = ranges(to, part.sizes)
                index[at] = part.index
                rank[at] = part.rank
        return cls(p, offsets, index, rank)

    @classmethod
    def _sparse(cls, blobs: Packed) -> npt.NDArray[np.bool_]:
        """Which blobs look like sparse sketches, gaps or entries (`unpack` checks them fully)."""
        starts, sizes = blobs.starts, blobs.sizes
        head = HLL.size + _HEADER.size
        out = sizes >= head + 1
        at = starts[out]
        magic = np.frombuffer(HLL.preamble[: HLL.size - 1], np.uint8)
        ok = (blobs.bytes_at(at, len(magic)) == magic).all(axis=1)
        version, encoding = blobs.buf[at + HLL.size - 1], blobs.buf[at + HLL.size + 1]
        ok &= np.isin(version, HLL.reads)
        gaps = ok & (encoding == _GAPS) & (version >= 2)
        entries = ok & (encoding == _SPARSE) & (sizes[out] >= head + _SPARSE_COUNT.size)
        if entries.any():
            count = blobs.read(at[entries] + head, "<u4").astype(np.int64)
            fits = sizes[out][entries] == head + _SPARSE_COUNT.size + count * 3
            entries[entries] = fits
        out[out] = gaps | entries
        return out

    @classmethod
    def unpack(cls, blobs: Packed) -> Hlls | None:
        """`decode` of sparse sketches of one precision and encoding, every field read at once.

        None when some blob is dense, deflated, of another precision or encoding, or malformed
        (`decode` then reads those apart, naming what is wrong).
        """
        n = len(blobs.starts)
        starts, ends = blobs.starts, blobs.starts + blobs.sizes
        head = HLL.size + _HEADER.size
        if not n or not cls._sparse(blobs).all():
            return None
        p, encoding = blobs.buf[starts + HLL.size], blobs.buf[starts + HLL.size + 1]
        if not ((p == p[0]).all() and (encoding == encoding[0]).all()):
            return None
        if encoding[0] == _SPARSE:
            count = blobs.read(starts + head, "<u4").astype(np.int64)
            at = starts + head + _SPARSE_COUNT.size
            raw = blobs.runs(at, count * _SPARSE_ENTRY.itemsize, "u1").reshape(-1, 3)
            index = raw[:, 0].astype(np.int64) | (raw[:, 1].astype(np.int64) << 8)
            rank = raw[:, 2].astype(np.uint8)
        else:
            try:
                count, at = varint.read_at(blobs.buf, starts + head, ends)
                nbytes = ends - at
                body = blobs.runs(at, nbytes, "u1").astype(np.uint8, copy=False)
                keys = varint.ungap(varint.decode_runs(body, nbytes, count), count)
            except ValueError:
                return None
            index = keys >> _KEY_VALUE_BITS
            rank = (keys & ((1 << _KEY_VALUE_BITS) - 1)).astype(np.uint8)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(count, out=offsets[1:])
        return cls._checked(_check_p(int(p[0])), offsets, index, rank)

    @classmethod
    def _checked(
        cls, p: int, offsets: IntArray, index: IntArray, rank: npt.NDArray[np.uint8]
    ) -> Hlls:
        """Sketches of these entries, refused if an index or value is out of range or unsorted."""
        first = np.zeros(index.size, np.bool_)
        sizes = np.diff(offsets)
        first[offsets[:-1][sizes > 0]] = True
        if index.size and (
            int(index.max()) >= 1 << p
            or not bool(rank.all())
            or int(rank.max()) > 33 - p
            or bool((np.diff(index) <= 0)[~first[1:]].any())
        ):
            raise ValueError("corrupt HyperLogLog: bad sparse indices or values")
        return cls(p, offsets, index, rank)

    @classmethod
    def _decode_each(cls, blobs: Sequence[bytes]) -> Hlls:
        """`decode` of blobs of any encoding, sparse or not, in one pass.

        Sparse blobs are read where they lie; the others' registers (dense, deflated) are laid
        out in one matrix whose non-zero cells are the entries: a page reading hundreds of
        busy windows' `*` does not build a sketch object for each.
        """
        n = len(blobs)
        if not n:
            return cls.empty(0)
        head = HLL.size + _HEADER.size
        start = head + _SPARSE_COUNT.size
        sparse: dict[int, tuple[npt.NDArray[Any], npt.NDArray[np.uint8]]] = {}
        full: list[int] = []  # blobs holding every register
        p = None
        for i, blob in enumerate(blobs):
            version = HLL.check(blob)
            if len(blob) >= start and blob[HLL.size + 1] == _SPARSE:
                bp = blob[HLL.size]
                (count,) = _SPARSE_COUNT.unpack_from(blob, HLL.size + _HEADER.size)
                if len(blob) != start + count * _SPARSE_ENTRY.itemsize or count > (1 << bp):
                    raise ValueError(f"corrupt HyperLogLog: {count} sparse entries do not fit")
                e = np.frombuffer(blob, _SPARSE_ENTRY, count, start)
                sparse[i] = (e["index"], e["value"])
            elif len(blob) > head and blob[HLL.size + 1] == _GAPS and version >= 2:
                bp = blob[HLL.size]
                sparse[i] = _read_gaps(blob[head:], 1 << _check_p(bp))
            elif len(blob) >= HLL.size + _HEADER.size:
                bp = blob[HLL.size]
                full.append(i)
            else:
                HyperLogLog.from_bytes(blob)  # raises, naming what is wrong
            if p is None:
                p = _check_p(bp)
            elif bp != p:
                raise ValueError("Hlls.decode: sketches of different precisions")
        assert p is not None
        if sparse:  # checked as `decode` checks them: indices increasing, values in range
            sizes = np.array([x.size for x, _ in sparse.values()], np.int64)
            cls._checked(
                p,
                np.concatenate([[0], np.cumsum(sizes)]),
                np.concatenate([x for x, _ in sparse.values()]).astype(np.int64),
                np.concatenate([v for _, v in sparse.values()]).astype(np.uint8),
            )
        pieces = dict(sparse)
        if full:
            registers = _registers([blobs[i] for i in full], p)
            flat = np.flatnonzero(registers)  # row by row, indices increasing: valid as made
            index, rank = flat & ((1 << p) - 1), registers.reshape(-1)[flat]
            sizes = np.count_nonzero(registers, axis=1)
            if not sparse:  # every blob full (as `decode` hands them over): in order already
                offsets = np.zeros(n + 1, np.int64)
                np.cumsum(sizes, out=offsets[1:])
                return cls(p, offsets, index, rank)
            cuts = np.cumsum(sizes)[:-1]
            for i, x, v in zip(full, np.split(index, cuts), np.split(rank, cuts), strict=True):
                pieces[i] = (x, v)
        ordered = [pieces[i] for i in range(n)]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum([x.size for x, _ in ordered], out=offsets[1:])
        return cls(
            p,
            offsets,
            np.concatenate([x for x, _ in ordered]).astype(np.int64, copy=False),
            np.concatenate([v for _, v in ordered]).astype(np.uint8, copy=False),
        )


def _registers(blobs: Sequence[bytes], p: int) -> npt.NDArray[np.uint8]:
    """The registers of dense and deflated `HyperLogLog.to_bytes` blobs of precision `p`.

    One row per blob; the 5-bit packed ones unpacked together, the deflated ones inflated
    into their rows. A blob that is neither, or malformed, raises `from_bytes`' own error.
    """
    m = 1 << p
    out = np.empty((len(blobs), m), np.uint8)
    head = HLL.size + _HEADER.size
    dense_rows: list[int] = []
    for row, blob in enumerate(blobs):
        encoding, body = blob[HLL.size + 1], blob[head:]
        if encoding == _DENSE and len(body) == (5 * m) // 8:
            dense_rows.append(row)
            continue
        raw = b""
        if encoding == _DEFLATED:
            try:
                raw = zlib.decompress(body, bufsize=m)
            except zlib.error:
                pass
        if len(raw) != m:
            HyperLogLog.from_bytes(blob)  # raises, naming what is wrong
            raise ValueError("corrupt HyperLogLog")  # (from_bytes raises first)
        out[row] = np.frombuffer(raw, np.uint8)
    if dense_rows:
        packed = np.frombuffer(b"".join(blobs[r][head:] for r in dense_rows), np.uint8)
        bits = np.unpackbits(packed, bitorder="little").reshape(-1, 5)
        out[dense_rows] = np.packbits(bits, axis=1, bitorder="little")[:, 0].reshape(-1, m)
    if out.size and int(out.max()) > 33 - p:
        raise ValueError(f"register values must be in [0, {33 - p}] for p={p}")
    return out


def _estimate(hist: IntArray, p: int) -> npt.NDArray[np.float64]:
    """Ertl's estimator of each row of register counts per value (`Hlls._histogram`)."""
    q, m = 32 - p, 1 << p
    z = m * _tau(1.0 - hist[:, q + 1] / m)
    for k in range(q, 0, -1):
        z = 0.5 * (z + hist[:, k].astype(np.float64))
    z = z + m * _sigma(hist[:, 0] / m)
    with np.errstate(divide="ignore"):
        out = m * m / (2.0 * math.log(2.0)) / z
    return np.where(z == 0.0, math.inf, out)


def _sigma(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """sketches/hll.py's `_sigma`, element-wise (the same operations, so the same floats)."""
    x = np.array(x, dtype=np.float64)
    z = x.copy()
    y = np.ones_like(x)
    full = x == 1.0
    active = ~full
    while active.any():
        xa = x[active] * x[active]
        previous = z[active]
        za = previous + xa * y[active]
        x[active] = xa
        z[active] = za
        y[active] = y[active] + y[active]
        done = za == previous
        active[np.flatnonzero(active)[done]] = False
    return np.where(full, math.inf, z)


def _tau(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """sketches/hll.py's `_tau`, element-wise."""
    x = np.array(x, dtype=np.float64)
    zero = (x == 0.0) | (x == 1.0)
    z = 1.0 - x
    y = np.ones_like(x)
    active = ~zero
    while active.any():
        xa = np.sqrt(x[active])
        previous = z[active]
        ya = y[active] * 0.5
        za = previous - (1.0 - xa) ** 2 * ya
        x[active], y[active], z[active] = xa, ya, za
        done = za == previous
        active[np.flatnonzero(active)[done]] = False
    return np.where(zero, 0.0, z / 3.0)
