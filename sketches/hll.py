"""HyperLogLog distinct counts that interoperate with ``datasketch``, updated a column at a time.

Why not plain ``datasketch.HyperLogLog``: its ``update`` hashes one value per Python call
(SHA-1 by default), ~0.5 M values/s on our CI machine. Here a whole column (numpy, pandas,
pyarrow or a list) is hashed and folded into the registers with numpy, and the sketch keeps
*exactly* datasketch's register layout, so either side can load or merge the other:

- ``datasketch.HyperLogLog(reg=sketch.registers.astype(np.int8), hashfunc=datasketch_hashfunc)``
  (what :meth:`HyperLogLog.to_datasketch` builds) is the same sketch, and a datasketch object
  updated value by value with ``hashfunc=datasketch_hashfunc`` holds the registers this module
  computes for the same values.
- Register update, like datasketch's (32-bit hash range): ``index = h & (m - 1)``,
  ``bits = h >> p``, ``rank = (32 - p) - bit_length(bits) + 1``, ``reg[index] = max(...)``.
- :meth:`HyperLogLog.count` is datasketch's estimator (raw HLL, linear counting below ``2.5 m``,
  large-range correction above ``2^32 / 30``) without its warnings; :meth:`HyperLogLog.estimate`
  is Ertl's improved estimator on the same registers, free of the classic one's bias near
  ``2.5 m`` (prefer it for display).

Precision ``p`` (4 <= p <= 16, default 14) gives ``m = 2^p`` one-byte registers and a standard
error of about ``1.04 / sqrt(m)`` (0.81 % at p = 14). The 32-bit hash means the estimate loses
accuracy above roughly 10^8 distinct values (hash collisions; datasketch has the same limit).

The hash is TG64 v1 (sketches/tg64.py; the low 32 bits, :func:`sketches.tg64.hash32`), the id
hash every part of Tidegauge shares: vectorised on Arrow buffers, and reproduced value by value
by :func:`sketches.tg64.datasketch_hashfunc`, which is what datasketch is given.

Cost: ``update`` on an Arrow or Arrow-backed pandas column ~23 M values/s, on a numpy object
column or a list ~11 M values/s (pyarrow's conversion dominates), plus ~70 us per call. For many
small groups, hash the batch once with :func:`sketches.tg64.hash32` and give each group
:meth:`HyperLogLog.update_hashes` (~15 us per call). Figures: ``benchmarks/bench_hll.py``.

Where it runs: anywhere (driver or executor); a sketch is a small picklable value object.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import sketches.varint as varint
from sketches.preamble import HLL
from sketches.tg64 import BLOCK, datasketch_hashfunc, hash64_blocks

if TYPE_CHECKING:
    import datasketch

__all__ = ["DEFAULT_P", "MAX_P", "MIN_P", "HyperLogLog"]

DEFAULT_P = 14
"""Default precision: 2^14 registers, ~0.81 % standard error, 16 KiB in memory."""
MIN_P = 4
"""Smallest precision datasketch accepts."""
MAX_P = 16
"""Largest precision datasketch accepts (register indices fit in 16 bits)."""


def _alpha(p: int) -> float:
    # The bias constants datasketch (and Flajolet et al.) use.
    return {4: 0.673, 5: 0.697, 6: 0.709}.get(p, 0.7213 / (1.0 + 1.079 / (1 << p)))


def _sigma(x: float) -> float:
    """Ertl's sigma(x) = x + sum_{k>=1} x^(2^k) 2^(k-1), for the empty-register share x."""
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        previous = z
        z += x * y
        y += y
        if z == previous:
            return z


def _tau(x: float) -> float:
    """Ertl's tau(x) = (1 - x - sum_{k>=1} (1 - x^(2^-k))^2 2^-k) / 3, for saturated registers."""
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        previous = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == previous:
            return z / 3.0


def _index_rank(
    h: npt.NDArray[np.uint32], p: int
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint8]]:
    """Register index (low p bits) and rank ``(32 - p) - bit_length(h >> p) + 1`` per hash."""
    index = (h & np.uint32((1 << p) - 1)).astype(np.intp)
    # bit_length(bits) is frexp's exponent (0 for 0); exact, bits < 2^28 fits a double.
    _, exponent = np.frexp((h >> np.uint32(p)).astype(np.float64))
    rank = (33 - p - exponent).astype(np.uint8)
    return index, rank


def _check_p(p: int) -> int:
    if isinstance(p, bool) or not isinstance(p, int | np.integer):
        raise TypeError(f"p must be an int, got {type(p).__name__}")
    if not MIN_P <= p <= MAX_P:
        raise ValueError(f"p={p} must be in [{MIN_P}, {MAX_P}] (as in datasketch)")
    return int(p)


# The preamble (magic b"TGHL", version) is declared in sketches/preamble.py (`HLL`).
_DENSE = 0  # registers packed 5 bits each (every register value is <= 33 - p <= 29)
_SPARSE = 1  # u32 count, then that many (u16 index, u8 value), indices increasing (version 1)
_DEFLATED = 2  # zlib (level 1) of the 2^p registers, one byte each
#: Version 2: a varint count, then that many varints (sketches/varint.py): the gaps between the
#: entries' keys (index << _KEY_VALUE_BITS | value), indices increasing, the first key whole.
_GAPS = 3
_KEY_VALUE_BITS = 5  # a register value is <= 33 - p <= 29
#: Sparse bodies above this many bytes are also tried deflated: filled sketches (an hour of a
#: busy service) shrink to about half, small ones are left alone (compressing costs CPU).
_DEFLATE_FROM = 1_024
_HEADER = struct.Struct("<BB")  # after the preamble: p, encoding
_SPARSE_COUNT = struct.Struct("<I")
_SPARSE_ENTRY = np.dtype([("index", "<u2"), ("value", "u1")])


class HyperLogLog:
    """A HyperLogLog distinct-count sketch with datasketch's registers and a vectorised update.

    ``p`` is the precision: ``2^p`` registers, relative standard error ~ ``1.04 / sqrt(2^p)``
    (0.81 % at the default p = 14). Mergeable value object: merge is an element-wise max, so
    windows and partitions combine in any order and merging twice changes nothing.

    ``registers`` (uint8, length ``2^p``) is the whole state; pass it to the constructor to
    rebuild a sketch. Not hashable (it is mutable); compare with ``==``.
    """

    __slots__ = ("_max_rank", "p", "registers")

    def __init__(self, p: int = DEFAULT_P, registers: npt.ArrayLike | None = None) -> None:
        """Create an empty sketch of precision ``p``, or one holding a copy of ``registers``.

        With ``registers`` given, ``p`` must match their length (``2^p``); values must lie in
        ``[0, 33 - p]`` (datasketch's range), else ``ValueError``.
        """
        self.p = _check_p(p)
        self._max_rank = 32 - self.p
        m = 1 << self.p
        if registers is None:
            self.registers: npt.NDArray[np.uint8] = np.zeros(m, dtype=np.uint8)
            return
        reg = np.asarray(registers)
        if reg.shape != (m,):
            raise ValueError(f"registers must have shape ({m},) for p={self.p}, got {reg.shape}")
        if reg.dtype.kind not in "iu":
            raise ValueError(f"registers must be integers, got {reg.dtype}")
        if reg.size and (int(reg.min()) < 0 or int(reg.max()) > self._max_rank + 1):
            raise ValueError(f"register values must be in [0, {self._max_rank + 1}] for p={p}")
        self.registers = reg.astype(np.uint8, copy=True)

    # --- updates ---

    def update(self, values: object) -> None:
        """Add a whole column of values (``str`` or ``bytes``) in one vectorised pass.

        Accepts what :func:`sketches.tg64.hash32` accepts. Nulls (``None``, NaN, Arrow nulls,
        pandas NA) are ignored: they are not users. Duplicates do not change the sketch.
        """
        for h64 in hash64_blocks(values):
            self._update_hash32(h64.astype(np.uint32))

    def update_hashes(self, hashes: npt.ArrayLike) -> None:
        """Add values already hashed by :func:`sketches.tg64.hash32` (or ``datasketch_hashfunc``).

        For callers that hash a whole micro-batch column once and then split it by window or
        key: each group then costs a few numpy calls instead of a full :meth:`update`.
        ``hash32`` drops nulls, so split with masks taken over the non-null rows::

            valid = pd.notna(users)              # or arrow_array.is_valid()
            h = hash32(users[valid])
            for key, mask in groups:             # mask: bool over all rows
                sketches[key].update_hashes(h[mask[valid]])

        ``hashes`` must be unsigned 32-bit integers (any integer array with values in
        ``[0, 2^32)`` is accepted); ``ValueError`` otherwise.
        """
        h = np.asarray(hashes)
        if h.dtype != np.uint32:
            if h.dtype.kind not in "iu" or (
                h.size and (int(h.min()) < 0 or int(h.max()) > 0xFFFFFFFF)
            ):
                raise ValueError("hashes must be 32-bit unsigned integers, as hash32 returns")
            h = h.astype(np.uint32)
        for i0 in range(0, h.size, BLOCK):
            self._update_hash32(h.reshape(-1)[i0 : i0 + BLOCK])

    def _update_hash32(self, h: npt.NDArray[np.uint32]) -> None:
        """Fold 32-bit hashes into the registers (datasketch's rule, vectorised)."""
        index, rank = _index_rank(h, self.p)
        # numpy >= 1.25 gives ufunc.at a fast path: faster here than a bincount table or a
        # sort-based max (benchmarks/bench_hll.py measures all three).
        np.maximum.at(self.registers, index, rank)

    def merge(self, *others: HyperLogLog) -> None:
        """Make this sketch the union of itself and ``others`` (in place, element-wise max).

        Raises ``ValueError`` if any other sketch has a different ``p``.
        """
        for other in others:
            if not isinstance(other, HyperLogLog):
                raise TypeError(f"can only merge HyperLogLog, not {type(other).__name__}")
            if other.p != self.p:
                raise ValueError(f"cannot merge HyperLogLog with p={other.p} into p={self.p}")
        for other in others:
            np.maximum(self.registers, other.registers, out=self.registers)

    @classmethod
    def merged(cls, sketches: Iterable[HyperLogLog]) -> HyperLogLog:
        """A new sketch, the union of ``sketches`` (at least one; all the same ``p``)."""
        items = list(sketches)
        if not items:
            raise ValueError("merged() needs at least one sketch")
        out = items[0].copy()
        out.merge(*items[1:])
        return out

    # --- queries ---

    def count(self) -> float:
        """Estimated number of distinct values: datasketch's ``count()`` on the same registers.

        Raw HLL estimate ``alpha m^2 / sum(2^-reg)``; linear counting ``m ln(m / zeros)`` when
        that is at most ``2.5 m``; large-range correction above ``2^32 / 30``.
        """
        m = 1 << self.p
        reg = self.registers
        e = _alpha(self.p) * float(m * m) / float(np.sum(np.ldexp(1.0, -reg.astype(np.int64))))
        if e <= 2.5 * m:
            zeros = m - int(np.count_nonzero(reg))
            if zeros == 0:  # datasketch would take log(m / 0); never reached in practice
                return float(e)
            return float(m * np.log(m / float(zeros)))
        if e <= (1 << 32) / 30.0:
            return float(e)
        return float(-(1 << 32) * np.log(1.0 - e / (1 << 32)))

    def estimate(self) -> float:
        """Estimated number of distinct values, without the classic estimator's bias.

        Ertl's improved estimator ("New cardinality estimation algorithms for HyperLogLog
        sketches", 2017, algorithm 6) on the histogram of register values, with the 32-bit hash
        range. Same registers as :meth:`count`, but no switch between linear counting and the
        raw estimate: around ``2.5 m`` distinct values (~41 000 at p = 14), where ``count()``
        jumps to the raw estimate and is biased by a few percent, this stays within its standard
        error. Prefer it for display; ``count()`` exists to agree with datasketch.
        """
        q = self._max_rank
        m = 1 << self.p
        hist = np.bincount(self.registers, minlength=q + 2)
        z = m * _tau(1.0 - hist[q + 1] / m)
        for k in range(q, 0, -1):
            z = 0.5 * (z + float(hist[k]))
        z += m * _sigma(hist[0] / m)
        if z == 0.0:  # every register saturated: beyond what a 32-bit hash can count
            return math.inf
        return float(m * m / (2.0 * math.log(2.0)) / z)

    def is_empty(self) -> bool:
        """True if no value has been added (all registers zero)."""
        return not bool(self.registers.any())

    def copy(self) -> HyperLogLog:
        """An independent copy."""
        return HyperLogLog(self.p, self.registers)

    # --- datasketch interop ---

    def to_datasketch(self) -> datasketch.HyperLogLog:
        """The same sketch as a ``datasketch.HyperLogLog`` using :func:`datasketch_hashfunc`.

        Its registers are a copy (datasketch's ``int8``); it can ``update`` further values
        one by one, ``merge`` with other datasketch sketches of the same ``p``, ``count`` and
        ``serialize``, and come back with :meth:`from_datasketch`.
        """
        import datasketch

        return datasketch.HyperLogLog(
            reg=self.registers.astype(np.int8), hashfunc=datasketch_hashfunc
        )

    @classmethod
    def from_datasketch(cls, h: datasketch.HyperLogLog) -> HyperLogLog:
        """A sketch holding a copy of a datasketch HyperLogLog's registers.

        Only meaningful if ``h`` was built with ``hashfunc=datasketch_hashfunc`` (datasketch
        does not record which hash made its registers, so this cannot be checked). Its
        ``HyperLogLogPlusPlus`` (64-bit registers) is refused.
        """
        import datasketch

        if isinstance(h, datasketch.HyperLogLogPlusPlus):
            raise TypeError("HyperLogLogPlusPlus uses a 64-bit hash range; not interoperable")
        if not isinstance(h, datasketch.HyperLogLog):
            raise TypeError(f"expected datasketch.HyperLogLog, got {type(h).__name__}")
        return cls(h.p, h.digest())

    # --- serialisation ---

    def to_bytes(self) -> bytes:
        """Compact, versioned binary form (little-endian).

        Preamble ``b"TGHL"`` and version 2 (sketches/preamble.py), ``p``, encoding; then
        either *gaps*: the number of non-zero registers and, per register in index order, the
        gap from the one before of its key ``index << 5 | value``, each an LEB128 varint, or
        *dense*: the ``2^p`` registers packed 5 bits each (``5 * 2^p / 8`` bytes, LSB first),
        or *deflated*: zlib of the registers, one byte each. Whichever is smaller is written:
        8 bytes empty, ~8 + 2 per non-zero register while few (40 users: ~90 bytes; deflating
        is only tried past 1 KiB), at most 7 + 10240 bytes dense at p = 14; a sketch of 5,000
        users deflates to ~4.4 KB. Version 1's *sparse* encoding (u32 count, then u16 index and
        u8 value per register: 3 bytes each) is still read.
        """
        m = 1 << self.p
        nz = np.flatnonzero(self.registers)
        dense_size = (5 * m) // 8
        # each gap takes a byte at least: a sketch this full is never written as gaps, and its
        # gaps would pass 1 KiB (deflating is tried), so they are not encoded only to be dropped
        full = len(nz) + 1 >= max(dense_size, _DEFLATE_FROM)
        body = b"" if full else _gaps_body(nz, self.registers[nz])
        size = len(nz) + 1 if full else len(body)
        if size >= _DEFLATE_FROM:
            deflated = zlib.compress(self.registers.astype(np.uint8).tobytes(), 1)
            if len(deflated) < min(size, dense_size):
                return HLL.preamble + _HEADER.pack(self.p, _DEFLATED) + deflated
        if not full and size < dense_size:
            return HLL.preamble + _HEADER.pack(self.p, _GAPS) + body
        bits = np.unpackbits(self.registers[:, None], axis=1, count=5, bitorder="little")
        packed = np.packbits(bits.reshape(-1), bitorder="little")
        return HLL.preamble + _HEADER.pack(self.p, _DENSE) + packed.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> HyperLogLog:
        """Rebuild a sketch from :meth:`to_bytes`; ``ValueError`` on anything malformed."""
        buf = bytes(data)
        version = HLL.check(buf)
        start = HLL.size + _HEADER.size
        if len(buf) < start:
            raise ValueError(f"not a HyperLogLog: {len(buf)} bytes is shorter than the header")
        p, encoding = _HEADER.unpack_from(buf, HLL.size)
        if not MIN_P <= p <= MAX_P:
            raise ValueError(f"corrupt HyperLogLog: p={p} outside [{MIN_P}, {MAX_P}]")
        m = 1 << p
        body = buf[start:]
        if encoding == _DENSE:
            if len(body) != (5 * m) // 8:
                raise ValueError(f"corrupt HyperLogLog: dense body of {len(body)} bytes for p={p}")
            bits = np.unpackbits(np.frombuffer(body, dtype=np.uint8), bitorder="little")
            registers = np.packbits(bits.reshape(m, 5), axis=1, bitorder="little")[:, 0]
        elif encoding == _SPARSE:
            if len(body) < _SPARSE_COUNT.size:
                raise ValueError("corrupt HyperLogLog: truncated sparse count")
            (count,) = _SPARSE_COUNT.unpack_from(body)
            entries_bytes = body[_SPARSE_COUNT.size :]
            if count > m or len(entries_bytes) != count * _SPARSE_ENTRY.itemsize:
                raise ValueError(f"corrupt HyperLogLog: {count} sparse entries do not fit")
            entries = np.frombuffer(entries_bytes, dtype=_SPARSE_ENTRY)
            index = entries["index"].astype(np.intp)
            if count and (
                int(index[-1]) >= m
                or bool(np.any(np.diff(index) <= 0))
                or not bool(entries["value"].all())
            ):
                raise ValueError("corrupt HyperLogLog: bad sparse indices or zero values")
            registers = np.zeros(m, dtype=np.uint8)
            registers[index] = entries["value"]
        elif encoding == _GAPS and version >= 2:
            index, values = _read_gaps(body, m)
            registers = np.zeros(m, dtype=np.uint8)
            registers[index] = values
        elif encoding == _DEFLATED:
            try:
                raw = zlib.decompress(body, bufsize=m)
            except zlib.error as exc:
                raise ValueError(f"corrupt HyperLogLog: deflated body ({exc})") from exc
            if len(raw) != m:
                raise ValueError(f"corrupt HyperLogLog: {len(raw)} deflated registers for p={p}")
            registers = np.frombuffer(raw, dtype=np.uint8).copy()
        else:
            raise ValueError(f"corrupt HyperLogLog: unknown encoding {encoding}")
        try:
            return cls(p, registers)
        except ValueError as exc:
            raise ValueError(f"corrupt HyperLogLog: {exc}") from exc

    # --- value semantics ---

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HyperLogLog):
            return NotImplemented
        return self.p == other.p and bool(np.array_equal(self.registers, other.registers))

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    def __repr__(self) -> str:
        nz = int(np.count_nonzero(self.registers))
        return f"HyperLogLog(p={self.p}, nonzero={nz}/{1 << self.p}, count~{self.count():.1f})"

    def __getstate__(self) -> bytes:
        return self.to_bytes()

    def __setstate__(self, state: bytes) -> None:
        other = HyperLogLog.from_bytes(state)
        self.p, self._max_rank, self.registers = other.p, other._max_rank, other.registers


def _gaps_body(index: npt.NDArray[np.integer[Any]], values: npt.NDArray[np.uint8]) -> bytes:
    """The *gaps* encoding's body of these non-zero registers (indices increasing)."""
    keys = (index.astype(np.int64) << _KEY_VALUE_BITS) | values.astype(np.int64)
    gaps = varint.gaps(keys, np.zeros(1, np.int64))
    return varint.pack(len(keys)) + varint.encode(gaps).tobytes()


def _read_gaps(body: bytes, m: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """(indices, values) of a *gaps* body; ValueError unless a sketch of `m` registers has them."""
    try:
        count, pos = varint.unpack_from(body, 0)
        if count > m:
            raise ValueError(f"{count} registers of {m}")
        keys = np.cumsum(varint.decode(np.frombuffer(body, np.uint8, offset=pos), count))
    except ValueError as exc:
        raise ValueError(f"corrupt HyperLogLog: gaps ({exc})") from None
    index, values = keys >> _KEY_VALUE_BITS, (keys & ((1 << _KEY_VALUE_BITS) - 1)).astype(np.uint8)
    if count and (
        int(index[-1]) >= m or bool(np.any(np.diff(index) <= 0)) or not bool(values.all())
    ):
        raise ValueError("corrupt HyperLogLog: bad sparse indices or zero values")
    return index, values
