"""TG64 v1: the 64-bit id hash of Tidegauge, computed for a whole column at a time.

Used wherever an id must become a number the same way in every process and release: the
HyperLogLog of users (sketches/hll.py, the low 32 bits: :func:`hash32`), de-duplication of event
ids (jobs/panes/dedup.py, all 64 bits: :func:`hash64`), and the panes, sessions and metrics that
hash a batch's user column once and split it. Stored sketches and checkpoints depend on it: the
definition below never changes (a new hash would be TG64 v2, with new stored formats).

TG64 v1 is defined on the bytes of a value (``str`` is UTF-8 encoded, so ``"é"`` and
``"é".encode()`` hash alike); all arithmetic is modulo 2^64::

    fmix(z):  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
              z ^= z >> 31                      # the SplitMix64 finaliser, a bijection
    h = 0x243F6A8885A308D3 ^ (len(data) * 0x9E3779B97F4A7C15)
    for each 8-byte chunk c of data, in order (the last one zero-padded on the right):
        h = fmix(h ^ int.from_bytes(c, "little"))
    tg64(data) = h;  hash32(data) = h & 0xFFFFFFFF

It is chosen because it needs only 64-bit integer xor, shift and multiply on whole words, so
numpy computes it for a column straight from Arrow's offsets and UTF-8 buffer without touching the
values one by one, and ten lines of Python (:func:`tg64`, the reference the vectorised code must
agree with) or any other language reproduce it. It is deterministic (no ``PYTHONHASHSEED``, no
library version in the loop), its final SplitMix64 round spreads sequential ids uniformly over
registers and ranks. It is not keyed and not collision resistant against an adversary; user ids
are not adversarial here. (``pandas.util.hash_array``, SipHash-2-4, was the other candidate:
6.6 M values/s on a numpy object column, and an Arrow column must first become Python objects;
its per-value equivalent is pandas-internal. TG64 runs at ~25 M values/s on Arrow input.)

Input: a list/tuple of ``str``/``bytes``, a numpy object or string array, a pandas
Series/Index/array of strings, or a pyarrow (chunked) string/binary/dictionary array. Arrow and
Arrow-backed pandas columns are read zero-copy, in blocks of :data:`BLOCK` rows; nulls are
dropped. Where it runs: anywhere (driver or executor); pure numpy + pyarrow.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["BLOCK", "datasketch_hashfunc", "hash32", "hash64", "hash64_blocks", "tg64"]

_MASK64 = 0xFFFFFFFFFFFFFFFF
_SEED = 0x243F6A8885A308D3  # first fraction digits of pi
_K_LEN = 0x9E3779B97F4A7C15  # 2^64 / golden ratio
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB

_U64_SEED = np.uint64(_SEED)
_U64_K_LEN = np.uint64(_K_LEN)
_U64_M1 = np.uint64(_M1)
_U64_M2 = np.uint64(_M2)
_U64_ONE = np.uint64(1)
_U64_ALL = np.uint64(_MASK64)
_U64_3 = np.uint64(3)
_U64_27 = np.uint64(27)
_U64_30 = np.uint64(30)
_U64_31 = np.uint64(31)

BLOCK = 1 << 14
"""Rows hashed per numpy pass: small enough that the temporaries stay in L2 cache (the hash is
memory-bound otherwise), large enough that per-call numpy overhead is negligible."""

_U64 = npt.NDArray[np.uint64]


def _fmix_int(z: int) -> int:
    z ^= z >> 30
    z = (z * _M1) & _MASK64
    z ^= z >> 27
    z = (z * _M2) & _MASK64
    return z ^ (z >> 31)


def tg64(data: bytes) -> int:
    """TG64 v1 of one byte string (the reference the vectorised code must agree with)."""
    h = _SEED ^ ((len(data) * _K_LEN) & _MASK64)
    for i in range(0, len(data), 8):
        # int.from_bytes of a short final chunk equals the zero-padded little-endian word.
        h = _fmix_int(h ^ int.from_bytes(data[i : i + 8], "little"))
    return h


def datasketch_hashfunc(b: bytes | str) -> int:
    """Hash one value exactly as :func:`hash32` does, for ``datasketch``'s ``hashfunc=``.

    ``str`` is UTF-8 encoded first; ``bytes``, ``bytearray`` and ``memoryview`` are used as they
    are. Returns an ``int`` in ``[0, 2^32)``. One Python call per value: for interoperability
    and tests, not for throughput.
    """
    if isinstance(b, str):
        data = b.encode("utf-8")
    elif isinstance(b, bytes | bytearray | memoryview):
        data = bytes(b)
    else:
        raise TypeError(f"datasketch_hashfunc hashes str or bytes, not {type(b).__name__}")
    return tg64(data) & 0xFFFFFFFF


def _fmix_inplace(z: _U64) -> None:
    z ^= z >> _U64_30
    z *= _U64_M1
    z ^= z >> _U64_27
    z *= _U64_M2
    z ^= z >> _U64_31


def _tg64_block(words: _U64, starts: npt.NDArray[np.int64], lens: npt.NDArray[np.int64]) -> _U64:
    """TG64 of the rows whose bytes start at ``starts`` (offsets into ``words``' byte view).

    ``words`` is an unaligned uint64 view with one element per *byte* position (stride 1), so
    ``words[s]`` is the little-endian word at byte ``s``; it extends at least 8 bytes past every
    row end, and the bytes beyond a row are masked off before they reach the hash.
    """
    h = lens.astype(np.uint64)
    h *= _U64_K_LEN
    h ^= _U64_SEED
    if len(lens) == 0:
        return h
    n_words = (int(lens.max()) + 7) >> 3
    uniform = bool(lens.min() == lens.max())
    for k in range(n_words):
        rem = lens - 8 * k  # bytes of each row still to hash
        if uniform or bool(rem.min() >= 8):
            if rem[0] >= 8:
                w = words[starts + 8 * k]
            else:  # every row has the same short tail
                w = words[starts + 8 * k] & ((_U64_ONE << np.uint64(8 * int(rem[0]))) - _U64_ONE)
            h ^= w
            _fmix_inplace(h)
            continue
        # Rows differ in length: finished rows read a harmless in-bounds word and keep their h.
        active = rem > 0
        w = words[np.where(active, starts + 8 * k, starts)]
        tail = np.clip(rem, 0, 8).astype(np.uint64)
        keep = np.where(tail >= 8, _U64_ALL, (_U64_ONE << (tail << _U64_3)) - _U64_ONE)
        nh = h ^ (w & keep)
        _fmix_inplace(nh)
        h = np.where(active, nh, h)
    return h


def _byte_words(window: npt.NDArray[np.uint8]) -> _U64:
    """Stride-1 uint64 view of ``window``: element ``i`` is the little-endian word at byte ``i``.

    No copy; numpy checks the view stays inside the buffer (``len(window) >= 8``).
    """
    return np.ndarray(shape=(len(window) - 7,), dtype="<u8", buffer=window, strides=(1,))


def _iter_binary_blocks(arr: pa.Array) -> Iterator[tuple[_U64, npt.NDArray[np.bool_] | None]]:
    """TG64 of a (large_)string/(large_)binary array, block by block, with a validity mask."""
    n = len(arr)
    if n == 0:
        return
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, off_buf, data_buf = arr.buffers()[:3]
    width = 8 if large else 4
    offsets: npt.NDArray[Any] = np.frombuffer(
        off_buf, dtype=f"<i{width}", count=n + 1, offset=arr.offset * width
    )
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    valid = None
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    for i0 in range(0, n, BLOCK):
        i1 = min(i0 + BLOCK, n)
        offs = offsets[i0 : i1 + 1].astype(np.int64)
        b0, b1 = int(offs[0]), int(offs[-1])
        # Each block gets its own zero-padded byte window: the data as it is when 8 spare bytes
        # follow it in the buffer (no copy), else a padded copy (the buffer's last block).
        if b1 + 8 <= len(data):
            window = data[b0 : b1 + 8]
        else:
            window = np.zeros(b1 - b0 + 8, dtype=np.uint8)
            window[: b1 - b0] = data[b0:b1]
        words = _byte_words(window)
        starts = offs[:-1] - b0
        lens = np.diff(offs)
        yield _tg64_block(words, starts, lens), None if valid is None else valid[i0:i1]


def _iter_hash_blocks(arr: pa.Array) -> Iterator[tuple[_U64, npt.NDArray[np.bool_] | None]]:
    """TG64 of any supported Arrow array, block by block, with its validity mask (None: all)."""
    t = arr.type
    if pa.types.is_null(t):
        return
    if pa.types.is_dictionary(t):
        # Hash each dictionary entry once, then gather by code: cheap for repeated user ids.
        parts = list(_iter_hash_blocks(arr.dictionary))
        dict_h = np.concatenate([h for h, _ in parts]) if parts else np.zeros(0, np.uint64)
        dict_valid = [np.ones(len(h), bool) if v is None else v for h, v in parts]
        dict_ok = np.concatenate(dict_valid) if dict_valid else np.zeros(0, bool)
        codes = pc.fill_null(arr.indices, 0).to_numpy(zero_copy_only=False).astype(np.intp)
        valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
        for i0 in range(0, len(codes), BLOCK):
            c = codes[i0 : i0 + BLOCK]
            ok = dict_ok[c] if len(dict_ok) else np.zeros(len(c), bool)
            if valid is not None:
                ok &= valid[i0 : i0 + BLOCK]
            yield (dict_h[c] if len(dict_h) else np.zeros(len(c), np.uint64)), ok
        return
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        yield from _iter_binary_blocks(arr)
        return
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        yield from _iter_binary_blocks(arr.cast(pa.large_binary()))
        return
    raise TypeError(f"TG64 hashes strings or bytes; got an Arrow column of type {t}")


def _is_pandas(values: object) -> bool:
    # Without importing pandas: if it is not loaded, values cannot be a pandas object.
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(
        values, pd.Series | pd.Index | pd.api.extensions.ExtensionArray
    )


def _as_arrow_chunks(values: object) -> list[pa.Array]:
    """Any supported column as Arrow chunks, without per-value Python work where possible.

    Arrow arrays and Arrow-backed pandas data (pandas 3's default ``str`` dtype) are used
    zero-copy; numpy object/str arrays and lists are converted by pyarrow's C loop, where
    ``None`` and NaN become nulls.
    """
    if isinstance(values, str | bytes | bytearray | memoryview):
        raise TypeError(
            "update/hash32 take a column of values; wrap a single value in a list: [value]"
        )
    if isinstance(values, pa.ChunkedArray):
        return list(values.chunks)
    if isinstance(values, pa.Array):
        return [values]
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"expected a 1-d column, got an array of shape {values.shape}")
        if values.dtype.kind not in "OUST":
            raise TypeError(f"TG64 hashes strings or bytes, not numpy {values.dtype}")
    elif _is_pandas(values):
        pass  # pa.array takes Series/Index/arrays natively (zero-copy when Arrow-backed)
    elif not isinstance(values, Sequence) and not hasattr(values, "__arrow_array__"):
        # Other iterables (generators, sets) are materialised once.
        if not isinstance(values, Iterable):
            raise TypeError(f"expected a column of values, got {type(values).__name__}")
        values = list(values)
    try:
        converted = pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"TG64 hashes strings or bytes: {exc}") from exc
    if isinstance(converted, pa.ChunkedArray):
        return list(converted.chunks)
    return [converted]


def hash64_blocks(values: object) -> Iterator[_U64]:
    """TG64 of the non-null values of a column, in order, at most :data:`BLOCK` rows at a time.

    For consumers that fold hashes block by block (the HyperLogLog's update) without holding
    the whole column's hashes. Same input as :func:`hash32`.
    """
    for chunk in _as_arrow_chunks(values):
        for h, valid in _iter_hash_blocks(chunk):
            yield h if valid is None else h[valid]


def hash32(values: object) -> npt.NDArray[np.uint32]:
    """TG64-v1 32-bit hashes of a column's non-null values, in order (nulls are dropped).

    ``values``: a list/tuple of ``str``/``bytes``, a numpy object or string array, a pandas
    Series/Index/array of strings, or a pyarrow (chunked) string/binary/dictionary array.
    ``hash32([v])[0] == datasketch_hashfunc(v)`` for every value ``v``.
    """
    parts = [h.astype(np.uint32) for h in hash64_blocks(values)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def hash64(values: object) -> npt.NDArray[np.uint64]:
    """The full 64-bit TG64-v1 hashes of a column's non-null values, in order (nulls dropped).

    Same input as :func:`hash32` (whose values are the low 32 bits of these). For identities
    that must not collide, e.g. event ids in de-duplication state (jobs/panes/dedup.py): for ``n``
    distinct values the chance that any two share a hash is about ``n^2 / 2^65``.
    """
    parts = list(hash64_blocks(values))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
