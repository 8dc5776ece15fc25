"""A mergeable merging t-digest (Dunning & Ertl) in pure Python + numpy.

Why this exists: the streaming job needs latency quantiles (p50/p99/p99.9) per window, computed
on executors from partial data and combined on the driver or in Redis readers. A t-digest is a
small sorted list of (mean, weight) centroids whose sizes shrink towards the tails, so tail
quantiles stay accurate while the digest stays a few kilobytes, and two digests merge by sorting
their centroids together and compressing again.

Everything here is vectorised: a batch of values is sorted once (``np.sort``), grouped into
centroids by locating the few centroid boundaries in its cumulative weights
(``np.searchsorted``) and summing each group (``np.add.reduceat``), and the result is regrouped
with the existing centroids the same way. Per value that is a sort and one summing pass; there is
no Python loop per value or per centroid, so batch adds run at tens of millions of values per
second on one core.

The module has no Spark import: a digest is a plain value object that runs anywhere (executor or
driver), pickles, and serialises with :meth:`TDigest.to_bytes`.

**Scale function: quarter power.** Centroid boundaries sit at integer values of
``k(q) = compression / 2 * kappa(q)`` with ``kappa(q) = (2q)^(1/4) / 2`` below the median and
mirrored above it (``1 - (2(1 - q))^(1/4) / 2``). A centroid near quantile ``q`` then holds about
``(8 / compression) * (2 min(q, 1 - q))^(3/4)`` of the data. This sits between the classic
choices: k1 (arcsine, widths like ``sqrt(q(1 - q))``) keeps the median sharp but its tail
centroids are too coarse for a 0.0005 rank error at p99.9 unless the digest doubles in size;
k2/k3 (log, widths like ``q(1 - q)``) make the tails very sharp but the median centroids about
eight times wider. Our targets (rank error 0.01 at p50, 0.002 at p99, 0.0005 at p99.9) tighten
roughly like ``min(q, 1 - q)^(3/4)``; with this function the measured worst errors are a similar
fraction (10-18 %) of each target, at about half the centroids k1 needs for the same margin.
It has a closed-form inverse, so the boundaries cost a few dozen power evaluations per
compression.

**Centroid rule.** Consecutive points (old centroids and new values, in sorted order) whose centre
falls between the same two boundaries form one centroid. A point that alone spans more than one
unit of k (a heavy old centroid straddling a boundary) is kept as a singleton, and so are the
first and last points, so ``min``/``max`` stay exact centroids and the extremes stay sharp. Every
multi-point centroid therefore spans at most 2 units of k (at most 1 between boundaries plus
half of a <= 1-unit point at each end), and a digest holds at most
``2 * ceil(compression / 2) + 1`` centroids (201 for the default 200); in practice about
``compression / 2`` (about 100).

**Small digests are their values.** While a digest holds at most ``compression`` values (200
by default, no more than the centroid bound above) it keeps each one as a centroid of weight 1
and compresses nothing: its quantiles are exact, and it is stored as those values (integer
offsets at the data's decimal scale, as varints of the gaps between them when that is shorter;
no weights). For a window of 30 to 100 latencies, or a minute of 180, that is smaller than the
~60 merged centroids' f64 means and weights it would otherwise hold (``to_bytes``): 180
latencies to the µs ~350 bytes instead of ~600.

**Exact statistics.** ``count``, ``min`` and ``max`` are exact; ``sum`` is the float64 sum of the
values as added (numpy pairwise summation per batch), not a reconstruction from centroids; ``mean``
is ``sum / count``.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterable
from typing import Any, overload

import numpy as np
import numpy.typing as npt

import sketches.varint as varint
from sketches.preamble import TDIGEST

__all__ = ["DEFAULT_COMPRESSION", "FORMAT_VERSION", "TDigest"]

DEFAULT_COMPRESSION: float = 200.0
"""Default compression (the t-digest delta).

200 gives about 100 centroids (at most 201; about 1 kB serialised) and, on 10^6 values from
uniform, exponential, lognormal and Pareto data, worst rank errors 5 to 9 times below our
targets (0.01 / 0.002 / 0.0005 at p50 / p99 / p99.9), both for one digest fed in batches and for
100 merged digests; see ``tests/accuracy/test_tdigest_accuracy.py`` and ``docs/sketches.md``.
"""

FORMAT_VERSION: int = TDIGEST.writes
"""Version byte written by :meth:`TDigest.to_bytes` (declared in sketches/preamble.py)."""

_MIN_COMPRESSION = 10.0
_MAX_COMPRESSION = 1_000_000.0

# Below this many values, update() regroups centroids and values in one pass; above, it first
# compresses the batch alone (the unit-weight fast path). Measured crossover: ~8,000 values.
_SMALL_BATCH = 8192

# A large batch is first compressed alone with this many times our compression (see update()).
_BATCH_REFINEMENT = 4.0

# Exponent of the scale function: 1/4 balances our p50/p99/p99.9 targets (module docstring).
_SCALE_POWER = 0.25

# Little-endian header after the preamble (magic b"TDGT", version u8: sketches/preamble.py):
# compression f64, count u64, nan_count u64, sum f64, min f64, max f64, n_centroids u32. Then the
# means f64[n], (version 2) the weights' width u8, and the weights.
_HEADER = struct.Struct("<dQQdddI")
_HEADER_END = TDIGEST.size + _HEADER.size  # 57 bytes

FloatArray = npt.NDArray[np.float64]

#: Weight widths of format version 2: bytes -> numpy dtype (8: f64, for non-integer weights).
_WIDTHS = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<f8"}

# Version 3, after the preamble: compression f32, count u32, nan_count u32, n_centroids u16,
# sum f64, min f64, max f64, then the width of the means (1, 2, 4: unsigned offsets of the
# means from the min, in units of 10^-exponent; 8: f64), the exponent i8 and the width of the
# weights (0: all 1; 1, 2, 4: unsigned integers; 8: f64). Then the means and the weights.
# A digest whose numbers do not fit (count >= 2^32, more than 65,535 centroids, a compression
# f32 does not hold) is written as version 2.
_HEADER3 = struct.Struct("<fIIHdddBbB")
_HEADER3_END = TDIGEST.size + _HEADER3.size  # 46 bytes
_V2_PREAMBLE = TDIGEST.magic + bytes([2])
#: Exponents tried for the means, smallest first: a latency in whole ms is stored at 10^0, one
#: to the microsecond (OpenTelemetry, the generator) at 10^3.
_EXPONENTS = tuple(range(7))
_OFFSET_WIDTHS = {1: "<u1", 2: "<u2", 4: "<u4"}
#: The means' width byte of offsets stored as varints of their gaps (sketches/varint.py).
VARINT_GAPS = 0

# Version 4, after the preamble: the header as varints (sketches/varint.py). The flags, the
# compression (a whole number), count, nan_count, the number of centroids and the layout (the
# means' exponent | their width's code << 3 | the weights' width's code << 6; codes index
# `CODE_WIDTHS`). Then, unless its flag says it is an f64 below: the sum as the zigzag distance of
# its bits from those of the centroids' own sum (`weighted_sum`: a few ulps, one byte), and
# the min as `rint(min * 10^exponent)` when the means are integer offsets from it. Then the
# f64s the flags name (compression, sum, min, max, in that order; the max is otherwise the
# last mean), the means and the weights as in version 3. A small digest's header is ~10
# bytes where version 3's is 41.
CODE_WIDTHS = (VARINT_GAPS, 1, 2, 4, 8)
COMPRESSION_F64, SUM_F64, MIN_F64, MAX_F64 = 1, 2, 4, 8
#: Ulps a sum may be from its centroids' own sum and still be written as the distance.
SUM_ULPS = 1 << 33


def _scaled_means(means: FloatArray, lo: float) -> tuple[int, int, npt.NDArray[np.float64] | None]:
    """(width, exponent, offsets) of means stored as integers: `(rint(lo*10^e) + u) / 10^e`.

    The smallest exponent at which every mean comes back bit for bit, and the narrowest width
    holding the offsets; (8, 0, None) when none does (the means are then stored as f64).
    """
    if not len(means):
        return 1, 0, means
    # Exact at 10^e means exact at every larger exponent (numbers below 2^53): one test at the
    # largest rules out the merged centroids of a busy digest (sketches/digests.py alike).
    scale = 10.0 ** _EXPONENTS[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        base = np.rint(lo * scale)
        if not np.array_equal((base + (np.rint(means * scale) - base)) / scale, means):
            return 8, 0, None
    for e in _EXPONENTS:
        scale = 10.0**e
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: no scale holds them
            base = np.rint(lo * scale)
            offsets = np.rint(means * scale) - base
        top = float(offsets.max())
        if float(offsets.min()) < 0 or not top < 2.0**32:
            break
        if np.array_equal((base + offsets) / scale, means):
            width = 1 if top < 256 else 2 if top < 65536 else 4
            return width, e, offsets
    return 8, 0, None


def _v3_fits(compression: float, count: int, nan_count: int, n: int) -> bool:
    return (
        count < 2**32
        and nan_count < 2**32
        and n < 2**16
        and float(np.float32(compression)) == compression
    )


def encode_digest(
    compression: float,
    count: int,
    nan_count: int,
    total: float,
    lo: float,
    hi: float,
    means: FloatArray,
    weights: FloatArray,
) -> bytes:
    """The bytes of one digest: version 4, or 2 when its counts pass the varints' range."""
    n = len(means)
    if not (count < varint.LIMIT and nan_count < varint.LIMIT):
        width, kind = _weight_width(weights)
        head = _HEADER.pack(compression, count, nan_count, total, lo, hi, n)
        tail = (bytes([width]), weights.astype(kind).tobytes())
        return b"".join((_V2_PREAMBLE, head, means.astype("<f8").tobytes(), *tail))
    mean_width, exponent, offsets = _scaled_means(means, lo)
    gapped = _gap_varints(offsets, mean_width) if offsets is not None and n else None
    if n and np.all(weights == 1.0):
        weight_width, stored = 0, b""
    else:
        weight_width, kind = _weight_width(weights) if n else (0, "<u1")
        stored = weights.astype(kind).tobytes() if n else b""
    if gapped is not None:
        packed, mean_width = gapped, VARINT_GAPS
    elif offsets is None:
        packed = means.astype("<f8").tobytes()
    else:
        packed = offsets.astype(_OFFSET_WIDTHS[mean_width]).tobytes()
    layout = exponent | CODE_WIDTHS.index(mean_width) << 3 | CODE_WIDTHS.index(weight_width) << 6
    whole = float(compression).is_integer() and 0 < compression < varint.LIMIT
    ulps = _bits(total) - _bits(weighted_sum(means, weights))
    base = round(lo * 10.0**exponent) if offsets is not None and n else -1
    exact_min = 0 <= base < varint.LIMIT and _bits(base / 10.0**exponent) == _bits(lo)
    last_is_max = bool(n) and _bits(float(means[-1])) == _bits(hi)
    flags = (
        (0 if whole else COMPRESSION_F64)
        | (0 if abs(ulps) < SUM_ULPS else SUM_F64)
        | (0 if exact_min else MIN_F64)
        | (0 if last_is_max else MAX_F64)
    )
    fields = [flags, int(compression)] if whole else [flags]
    fields += [count, nan_count, n, layout]
    fields += [ulps << 1 ^ ulps >> 63] if abs(ulps) < SUM_ULPS else []  # zigzag: one byte
    fields += [base] if exact_min else []
    doubles = [
        value
        for flag, value in (
            (COMPRESSION_F64, compression),
            (SUM_F64, total),
            (MIN_F64, lo),
            (MAX_F64, hi),
        )
        if flags & flag
    ]
    head = b"".join(varint.pack(v) for v in fields) + struct.pack(f"<{len(doubles)}d", *doubles)
    return b"".join((TDIGEST.preamble, head, packed, stored))


def _read_centroids(
    buf: bytes, at: int, n: int, mean_width: int, weight_width: int, exponent: int, lo: float
) -> tuple[FloatArray, FloatArray]:
    """Versions 3 and 4: the means and weights from `at` to the end of `buf`; ValueError if bad."""
    if mean_width not in CODE_WIDTHS or weight_width not in (0, 1, 2, 4, 8):
        raise ValueError(f"TDigest.from_bytes: bad widths {mean_width}, {weight_width}")
    if not 0 <= exponent <= _EXPONENTS[-1]:
        raise ValueError(f"TDigest.from_bytes: bad exponent {exponent}")
    if mean_width == VARINT_GAPS:
        mean_bytes = len(buf) - at - weight_width * n
        if not n <= mean_bytes <= varint.MAX_BYTES * n:
            raise ValueError(
                f"TDigest.from_bytes: {len(buf)} bytes do not fit {n} centroids' varints"
            )
        raw = np.frombuffer(buf, np.uint8, mean_bytes, at)
        means = decode_means(np.cumsum(varint.decode(raw, n)), lo, exponent)
    else:
        mean_bytes = mean_width * n
        expected = at + (mean_width + weight_width) * n
        if len(buf) != expected:
            raise ValueError(
                f"TDigest.from_bytes: {len(buf)} bytes, expected {expected} for {n} centroids"
            )
        if mean_width == 8:
            means = np.frombuffer(buf, "<f8", n, at).astype(np.float64)
        else:
            means = decode_means(
                np.frombuffer(buf, _OFFSET_WIDTHS[mean_width], n, at), lo, exponent
            )
    if weight_width:
        weights = np.frombuffer(buf, _WIDTHS[weight_width], n, at + mean_bytes).astype(np.float64)
    else:
        weights = np.ones(n)
    return means, weights


def weighted_sum(means: FloatArray, weights: FloatArray) -> float:
    """The centroids' own sum, as `Digests` sums each digest's (one `reduceat` per digest).

    A version-4 digest stores its exact sum as its distance from this, which both ends compute
    from the same means and weights, bit for bit.
    """
    if not len(means):
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # values near the float max
        return float(np.add.reduceat(means * weights, _FIRST)[0])


def _bits(value: float) -> int:
    """The IEEE 754 bits of a float64 as a signed integer: neighbours differ by one."""
    return int(np.float64(value).view(np.int64))


def _gap_varints(offsets: npt.NDArray[np.float64], width: int) -> bytes | None:
    """The offsets as varints of their gaps (sketches/varint.py) when shorter than `width` each."""
    values = offsets.astype(np.int64)
    gaps = varint.gaps(values, np.zeros(1, np.int64))
    if (gaps < 0).any() or int(varint.lengths(gaps).sum()) >= width * len(values):
        return None
    return varint.encode(gaps).tobytes()


def decode_means(
    stored: npt.NDArray[np.generic], lo: float | FloatArray, exponent: int | npt.NDArray[Any]
) -> FloatArray:
    """Means from their stored integer offsets (`_scaled_means`): exactly what was encoded."""
    scale = 10.0 ** np.asarray(exponent, np.float64)
    return (np.rint(np.asarray(lo) * scale) + stored.astype(np.float64)) / scale


def _weight_width(weights: FloatArray) -> tuple[int, str]:
    """The narrowest width that holds every weight exactly."""
    if len(weights) and np.array_equal(weights, np.floor(weights)):
        top = float(weights.max())
        for width in (1, 2, 4):
            if top < 256**width:
                return width, _WIDTHS[width]
    return (8, _WIDTHS[8]) if len(weights) else (1, _WIDTHS[1])


def _batch_sum(values: FloatArray) -> float:
    """The sum of a batch of values, summed as `np.add.reduceat` sums each group's.

    `sketches.digests.Digests` builds many digests at once and sums each group's values with
    one `reduceat`; `np.sum` may associate differently (by an ulp), so both use this.
    """
    return float(np.add.reduceat(values, _FIRST)[0])


_FIRST = np.zeros(1, dtype=np.intp)


def _as_float_array(values: Any) -> FloatArray:
    """Flatten ``values`` (numpy / list / pyarrow / pandas / scalar) into a float64 array.

    pyarrow and pandas nulls become NaN (``np.asarray`` on a pyarrow array does that), so they
    follow the NaN policy of :meth:`TDigest.update`.
    """
    arr = np.asarray(values, dtype=np.float64)
    return arr.reshape(-1)


def _kappa(q: FloatArray) -> FloatArray:
    """Normalised scale function, 0 at q=0, 1/2 at the median, 1 at q=1 (see module docstring)."""
    # sqrt(sqrt()) is the 1/4 power of _SCALE_POWER, several times faster than ** 0.25.
    half = np.sqrt(np.sqrt(2.0 * np.minimum(q, 1.0 - q))) * 0.5
    return np.where(q <= 0.5, half, 1.0 - half)


def _kappa_inverse(kappa: FloatArray) -> FloatArray:
    """The quantile at which :func:`_kappa` reaches ``kappa`` (closed form)."""
    half = (2.0 * np.minimum(kappa, 1.0 - kappa)) ** (1.0 / _SCALE_POWER) * 0.5
    return np.where(kappa <= 0.5, half, 1.0 - half)


@functools.lru_cache(maxsize=32)
def _boundaries(compression: float) -> tuple[FloatArray, FloatArray]:
    """Quantiles of the centroid boundaries (integer k strictly inside (0, compression / 2)).

    Also returns, per boundary, the shorter quantile length of the two unit-k intervals either
    side of it. A point holding that boundary can only span more than one unit of k if it
    holds more data than this, because the length of a unit-k interval rises towards the median
    and falls after it, so any unit interval within reach of the boundary is at least this long.
    """
    k_range = compression / 2.0
    n_cuts = math.ceil(k_range) - 1
    q = _kappa_inverse(np.arange(1, n_cuts + 1, dtype=np.float64) / k_range)
    edges = np.concatenate(([0.0], q, [1.0]))
    gaps = np.diff(edges)
    shortest = np.minimum(gaps[:-1], gaps[1:]) * (1.0 - 1e-9)  # margin for rounding
    q.flags.writeable = False  # shared by every digest with this compression
    shortest.flags.writeable = False
    return q, shortest


def _group_starts(
    n: int,
    holder: npt.NDArray[np.intp],
    holder_right: FloatArray,
    holder_weight: FloatArray,
    cuts: FloatArray,
    total: float,
    compression: float,
) -> npt.NDArray[np.intp]:
    """Indices where centroids start, from the points that hold each boundary.

    ``holder[j]`` is the point whose cumulative-weight range ``(right - weight, right]``
    contains ``cuts[j]``. Points before it end below the cut and points after it start at or
    above it, so the first point whose centre reaches the cut is the holder or the next one;
    everything here is O(number of boundaries), never O(number of points).
    """
    centre = holder_right - 0.5 * holder_weight
    # Flags rather than np.unique: one byte per point, cheaper than sorting for small inputs.
    is_start = np.zeros(n + 1, dtype=np.bool_)
    is_start[[0, 1, n - 1]] = True
    is_start[holder + (centre < cuts)] = True
    # A point spanning more than one unit of k contains a boundary strictly inside, so it is
    # among the holders; it becomes a singleton rather than stretching its neighbours' centroid.
    # Only holders heavier than the shortest nearby unit interval can qualify (see _boundaries).
    candidate = (holder_right > cuts) & (holder_weight > total * _boundaries(compression)[1])
    if candidate.any():
        right = holder_right[candidate]
        both = _kappa(np.concatenate((right, right - holder_weight[candidate])) / total)
        span = both[: right.shape[0]] - both[right.shape[0] :]
        heavy = holder[candidate][span * (compression / 2.0) > 1.0]
        is_start[heavy] = True
        is_start[heavy + 1] = True
    return np.flatnonzero(is_start[:n])


def _finish_means(
    means: FloatArray,
    weights: FloatArray | None,
    starts: npt.NDArray[np.intp],
    new_weights: FloatArray,
) -> FloatArray:
    """Weighted mean of each group (``weights=None``: all 1), sorted and inside [min, max]."""
    with np.errstate(over="ignore", invalid="ignore"):
        sums = np.add.reduceat(means if weights is None else means * weights, starts)
        new_means = sums / new_weights
    if not np.isfinite(new_means).all():
        # The sums overflowed (|x| near 1e308). Redo them on values scaled by a power of two,
        # which is exact, so the weighted sums stay finite for any finite input.
        _, exponent = math.frexp(max(abs(float(means[0])), abs(float(means[-1]))))
        scaled = np.ldexp(means, -exponent)
        if weights is not None:
            scaled *= weights
        new_means = np.ldexp(np.add.reduceat(scaled, starts) / new_weights, exponent)
    # Rounding may nudge a mean by an ulp past its neighbour or past min/max; keep them sorted
    # and inside the data range so interpolation and the next merge see ordered centroids.
    np.maximum.accumulate(new_means, out=new_means)
    return np.minimum(np.maximum(new_means, means[0]), means[-1])


def _exact_up_to(compression: float) -> float:
    """The most values a digest keeps one centroid each (module docstring, "Small digests")."""
    return compression


def _compress(
    means: FloatArray, weights: FloatArray, compression: float
) -> tuple[FloatArray, FloatArray]:
    """Group sorted weighted points (old centroids) into k-bounded centroids.

    O(n) array passes for the cumulative weights and group sums, plus O(compression * log n)
    to locate the boundaries: they are few, so we search them in the points, not the reverse.
    """
    n = means.shape[0]
    if n <= 2:
        return means.copy(), weights.copy()
    right = np.cumsum(weights)
    total = float(right[-1])
    if total <= _exact_up_to(compression):  # a small digest keeps its points as they are
        return means.copy(), weights.copy()
    cuts = total * _boundaries(compression)[0]
    holder = np.minimum(np.searchsorted(right, cuts, "left"), n - 1)
    starts = _group_starts(n, holder, right[holder], weights[holder], cuts, total, compression)
    new_weights = np.add.reduceat(weights, starts)
    return _finish_means(means, weights, starts, new_weights), new_weights


def _compress_values(values: FloatArray, compression: float) -> tuple[FloatArray, FloatArray]:
    """:func:`_compress` for sorted raw values (all weights 1), the hot path of ``update``.

    With unit weights the cumulative weight of point i is i + 1, so the boundary holders are
    plain arithmetic and the only passes over the values are the group sums.
    """
    n = values.shape[0]
    if n <= 2 or n <= _exact_up_to(compression):
        return values.copy(), np.ones(n)
    cuts = float(n) * _boundaries(compression)[0]
    holder = np.minimum(np.ceil(cuts).astype(np.intp) - 1, n - 1)
    ones = np.ones(holder.shape[0])
    starts = _group_starts(n, holder, holder + 1.0, ones, cuts, float(n), compression)
    new_weights = np.empty(starts.shape[0])
    new_weights[:-1] = starts[1:] - starts[:-1]
    new_weights[-1] = n - starts[-1]
    return _finish_means(values, None, starts, new_weights), new_weights


class TDigest:
    """A merging t-digest: mergeable quantile and CDF estimates from about a hundred centroids.

    A value object with the shared sketch verbs (``update``, ``merge``, ``quantile``/``cdf``,
    ``copy``, ``to_bytes``/``from_bytes``). Build one per partition on an executor, ship it as
    bytes, merge on the driver or reader; merging is associative up to the compression error.

    Feed it batches: each :meth:`update` call compresses immediately (no hidden buffer, so the
    structure is a deterministic function of the calls made), costing ~0.15 ms of fixed
    numpy overhead plus a few nanoseconds per value. Batches of 10,000 values or more run at
    tens of millions of values per second; calling it once per value does not.

    Args:
        compression: the t-digest delta, in [10, 1e6]. Larger means more centroids (at most
            ``2 * ceil(compression / 2) + 1``) and smaller errors (worst p99.9 rank error
            0.38, 0.18, 0.12 of our bound at 100, 200, 400; docs/sketches.md). See
            :data:`DEFAULT_COMPRESSION` for why 200.

    """

    __slots__ = (
        "_compression",
        "_count",
        "_max",
        "_means",
        "_min",
        "_nan_count",
        "_sum",
        "_weights",
    )

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    def __init__(self, compression: float = DEFAULT_COMPRESSION) -> None:
        compression = float(compression)
        if not (_MIN_COMPRESSION <= compression <= _MAX_COMPRESSION):
            raise ValueError(
                f"compression must be in [{_MIN_COMPRESSION:g}, {_MAX_COMPRESSION:g}], "
                f"got {compression!r}"
            )
        self._compression = compression
        self._means: FloatArray = np.empty(0, dtype=np.float64)
        self._weights: FloatArray = np.empty(0, dtype=np.float64)
        self._count = 0
        self._nan_count = 0
        self._sum = 0.0
        # +/-inf sentinels make min/max merges a plain min()/max(); the properties hide them.
        self._min = math.inf
        self._max = -math.inf

    # --- statistics -------------------------------------------------------------------------

    @property
    def compression(self) -> float:
        """The t-digest delta this digest was built with; merges require equal values."""
        return self._compression

    @property
    def count(self) -> int:
        """Exact number of (non-NaN) values added."""
        return self._count

    @property
    def nan_count(self) -> int:
        """Number of NaN (and null) values skipped by :meth:`update`; tells bad data from none."""
        return self._nan_count

    @property
    def sum(self) -> float:
        """Float64 sum of the values added (0.0 when empty); tracked, not from centroids."""
        return self._sum

    @property
    def min(self) -> float:
        """Exact smallest value added, NaN when empty."""
        return self._min if self._count else math.nan

    @property
    def max(self) -> float:
        """Exact largest value added, NaN when empty."""
        return self._max if self._count else math.nan

    @property
    def mean(self) -> float:
        """``sum / count``, NaN when empty."""
        return self._sum / self._count if self._count else math.nan

    @property
    def centroids(self) -> tuple[FloatArray, FloatArray]:
        """Read-only views of the centroid means (ascending) and weights, for inspection."""
        means = self._means.view()
        weights = self._weights.view()
        means.flags.writeable = False
        weights.flags.writeable = False
        return means, weights

    # --- building ---------------------------------------------------------------------------

    def update(self, values: Any) -> None:
        """Add a batch of values (numpy array, list, pyarrow/pandas array, or a scalar).

        Values are converted to float64 (ints and float32 exactly, ints above 2**53 rounded).
        NaN and nulls are skipped and counted in :attr:`nan_count`, because a missing
        measurement is not a value but silently losing them would hide bad input.
        ``+inf``/``-inf`` raise ``ValueError`` (before anything changes): an infinite latency
        is a bug upstream, and one infinity would make the mean and interpolation meaningless.
        """
        batch = np.sort(_as_float_array(values))
        # np.sort puts NaN last, so the finite prefix ends at the first NaN.
        n_valid = int(np.searchsorted(batch, np.nan, "left")) if batch.size else 0
        if n_valid and (batch[0] == -math.inf or batch[n_valid - 1] == math.inf):
            raise ValueError("TDigest.update: +/-inf values are not allowed")
        n_nan = batch.shape[0] - n_valid
        batch = batch[:n_valid]

        self._nan_count += n_nan
        if n_valid == 0:
            return
        self._count += n_valid
        self._sum += _batch_sum(batch)
        self._min = min(self._min, float(batch[0]))
        self._max = max(self._max, float(batch[-1]))

        if not self._means.shape[0]:
            # First batch: the unit-weight fast path, one pass over the values.
            means, weights = _compress_values(batch, self._compression)
        elif n_valid <= _SMALL_BATCH:
            # Small batch: one sort of centroids + values and one regrouping is cheapest.
            means, weights = _compress(
                *_sorted_union([self._means, batch], [self._weights, np.ones(n_valid)]),
                self._compression,
            )
        else:
            # Large batch: compress it alone (fast path), then regroup its centroids with ours,
            # the same rule as a merge. The batch gets finer centroids than ours so the second
            # step sees small points, as it would raw values (with equal sizes the p99.9 error
            # doubled in our accuracy study).
            batch_means, batch_weights = _compress_values(
                batch, self._compression * _BATCH_REFINEMENT
            )
            means, weights = _compress(
                *_sorted_union([self._means, batch_means], [self._weights, batch_weights]),
                self._compression,
            )
        self._means, self._weights = means, weights

    def merge(self, *others: TDigest) -> None:
        """Merge other digests into this one, in place; they are left unchanged.

        Raises ``ValueError`` if a digest has a different compression (its centroid sizes
        follow a different rule, so the result would honour neither), ``TypeError`` if an
        argument is not a :class:`TDigest`.
        """
        self._check_compatible(others)
        if not others:
            return
        parts = [self, *others]
        means, weights = _sorted_union([p._means for p in parts], [p._weights for p in parts])
        for other in others:
            self._count += other._count
            self._nan_count += other._nan_count
            self._sum += other._sum
            self._min = min(self._min, other._min)
            self._max = max(self._max, other._max)
        self._means, self._weights = _compress(means, weights, self._compression)

    @classmethod
    def merged(cls, digests: Iterable[TDigest]) -> TDigest:
        """Merge many digests at once: one concatenation, one sort, one compression.

        Cheaper and slightly more accurate than merging pairwise, because centroids are only
        regrouped once. The result is a new digest; the inputs are unchanged. An empty iterable
        gives an empty digest with the default compression.
        """
        parts = list(digests)
        if not parts:
            return cls()
        result = parts[0].copy()
        result.merge(*parts[1:])
        return result

    def copy(self) -> TDigest:
        """An independent copy (centroid arrays are copied, not shared)."""
        other = type(self).__new__(type(self))
        other._compression = self._compression
        other._means = self._means.copy()
        other._weights = self._weights.copy()
        other._count = self._count
        other._nan_count = self._nan_count
        other._sum = self._sum
        other._min = self._min
        other._max = self._max
        return other

    def shifted(self, delta: float) -> TDigest:
        """A copy with every value moved by `delta`: quantiles move by `delta`, ranks stay.

        Exact (centroids keep their weights), so a digest of "x relative to point A" becomes one
        of "x relative to point B" by adding A - B; the job uses it to re-base lateness measured
        against a pane's end onto the end of each window the pane belongs to.
        """
        delta = float(delta)
        if not math.isfinite(delta):
            raise ValueError(f"shift must be finite, got {delta!r}")
        other = self.copy()
        if self._count:
            other._means = self._means + delta
            other._sum = self._sum + delta * self._count
            other._min = self._min + delta
            other._max = self._max + delta
        return other

    # --- queries ----------------------------------------------------------------------------

    @overload
    def quantile(self, q: float) -> float: ...
    @overload
    def quantile(self, q: npt.ArrayLike) -> FloatArray: ...

    def quantile(self, q: Any) -> Any:
        """Estimated value at quantile ``q`` in [0, 1] (scalar or array); NaN when empty.

        Interpolates linearly between centroid means placed at the centre of their weight
        (a weight-1 centroid is an exact value and covers its whole rank), anchored at the
        exact ``min`` (rank 0) and ``max`` (rank ``count``). So ``quantile(0) == min``,
        ``quantile(1) == max`` and the result is non-decreasing in ``q``.
        Raises ``ValueError`` for q outside [0, 1] or NaN.
        """
        qs = np.asarray(q, dtype=np.float64)
        if not ((qs >= 0.0) & (qs <= 1.0)).all():
            raise ValueError("quantile: q must be within [0, 1]")
        if self._count == 0:
            out = np.full(qs.shape, np.nan)
        else:
            ranks, values = self._knots()
            total = float(self._count)
            t = qs * total
            # For 0 < t < count: hi is the first knot at or beyond t and lo lies strictly
            # before it, so 0 < frac <= 1. The ends (where frac may be 0/0) are set exactly.
            hi = np.minimum(np.maximum(np.searchsorted(ranks, t, "left"), 1), ranks.shape[0] - 1)
            lo = hi - 1
            r_lo, v_lo = ranks[lo], values[lo]
            with np.errstate(divide="ignore", invalid="ignore"):
                out = v_lo + (t - r_lo) / (ranks[hi] - r_lo) * (values[hi] - v_lo)
            out = np.where(t <= 0.0, self._min, np.where(t >= total, self._max, out))
        return float(out) if out.ndim == 0 else out

    @overload
    def cdf(self, x: float) -> float: ...
    @overload
    def cdf(self, x: npt.ArrayLike) -> FloatArray: ...

    def cdf(self, x: Any) -> Any:
        """Estimated fraction of values ``<= x`` (scalar or array); NaN when empty or x is NaN.

        The inverse of :meth:`quantile`'s interpolation: exactly 0 below ``min`` and 1 from
        ``max`` on, so with all values equal the CDF is a step at that value.
        """
        xs = np.asarray(x, dtype=np.float64)
        if self._count == 0:
            out = np.full(xs.shape, np.nan)
        else:
            ranks, values = self._knots()
            # For min <= x < max: hi is the first knot strictly above x (at a repeated value
            # this takes its highest rank) and lo is at or below x, so 0 <= frac < 1.
            hi = np.minimum(
                np.maximum(np.searchsorted(values, xs, "right"), 1), values.shape[0] - 1
            )
            lo = hi - 1
            r_lo, v_lo = ranks[lo], values[lo]
            with np.errstate(divide="ignore", invalid="ignore"):
                rank = r_lo + (xs - v_lo) / (values[hi] - v_lo) * (ranks[hi] - r_lo)
            # NaN x fails both comparisons and keeps its NaN rank.
            out = np.where(xs < self._min, 0.0, np.where(xs >= self._max, 1.0, rank / self._count))
        return float(out) if out.ndim == 0 else out

    def _knots(self) -> tuple[FloatArray, FloatArray]:
        """Piecewise-linear (rank, value) knots shared by quantile() and cdf().

        Each centroid contributes two knots: at its centre rank (both knots equal) if it holds
        several values, or at its left and right rank edges (a flat step) if it holds exactly
        one value, which it then reproduces exactly. Both arrays are non-decreasing.
        """
        w = self._weights
        right = np.cumsum(w)
        left = right - w
        centre = left + 0.5 * w
        single = w == 1.0
        ranks = np.empty(2 * w.shape[0] + 2)
        values = np.empty_like(ranks)
        ranks[0], values[0] = 0.0, self._min
        ranks[-1], values[-1] = float(self._count), self._max
        ranks[1:-1:2] = np.where(single, left, centre)
        ranks[2:-1:2] = np.where(single, right, centre)
        values[1:-1:2] = self._means
        values[2:-1:2] = self._means
        return ranks, values

    # --- serialisation ----------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Compact, versioned little-endian encoding; :meth:`from_bytes` restores it exactly.

        Version 4: magic ``b"TDGT"``, version byte, a header of varints (flags, compression,
        count, nan_count, centroid count, the layout of the means and weights; then the sum as
        its distance in ulps from the centroids' own sum, the min as an integer at the means'
        decimal scale, the max the last mean, each an f64 instead when it cannot be so), then
        the means and the weights, each in the narrowest form that gives them back bit for
        bit. Means are the data's own values in a small digest; values recorded to the ms or
        µs (every real producer's) are stored as integer offsets from the min at that decimal
        scale (1, 2 or 4 bytes, or the gaps between them as varints, when shorter), others as
        f64. Weights are counts: nothing when every weight is 1, else the narrowest unsigned
        width. A window of 30 latencies in µs takes ~75 bytes, 30 latenesses in ms ~58.
        A digest whose counts pass the varints' range is written as version 2 (compression
        f64, count, nan_count u64, sum, min, max f64, centroid count u32, means f64, a
        weight-width byte and the weights). Versions 1 to 3 are still read.
        """
        return encode_digest(
            self._compression,
            self._count,
            self._nan_count,
            self._sum,
            self._min,
            self._max,
            self._means,
            self._weights,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> TDigest:
        """Decode :meth:`to_bytes` output; ``ValueError`` names what is wrong with bad input."""
        buf = bytes(data)
        version = TDIGEST.check(buf)
        if version == 4:
            return cls._from_v4(buf)
        if version == 3:
            return cls._from_v3(buf)
        if len(buf) < _HEADER_END:
            raise ValueError(
                f"TDigest.from_bytes: {len(buf)} bytes is shorter than the "
                f"{_HEADER_END}-byte header"
            )
        compression, count, nan_count, total, lo, hi, n = _HEADER.unpack_from(buf, TDIGEST.size)
        at = _HEADER_END + 8 * n
        width, kind = 8, "<f8"
        if version >= 2:
            if len(buf) <= at:
                raise ValueError(
                    f"TDigest.from_bytes: {len(buf)} bytes, expected more than {at} for {n} "
                    "centroids"
                )
            width = buf[at]
            kind = _WIDTHS.get(width, "")
            if not kind:
                raise ValueError(f"TDigest.from_bytes: bad weight width {width}")
            at += 1
        expected = at + width * n
        if len(buf) != expected:
            raise ValueError(
                f"TDigest.from_bytes: {len(buf)} bytes, expected {expected} for {n} centroids"
            )
        means = np.frombuffer(buf, dtype="<f8", count=n, offset=_HEADER_END).astype(np.float64)
        weights = np.frombuffer(buf, dtype=kind, count=n, offset=at).astype(np.float64)
        return cls._restored(compression, count, nan_count, total, lo, hi, means, weights)

    @classmethod
    def _from_v3(cls, buf: bytes) -> TDigest:
        if len(buf) < _HEADER3_END:
            raise ValueError(
                f"TDigest.from_bytes: {len(buf)} bytes is shorter than the "
                f"{_HEADER3_END}-byte header"
            )
        fields = _HEADER3.unpack_from(buf, TDIGEST.size)
        compression, count, nan_count, n, total, lo, hi, mean_width, exponent, weight_width = fields
        means, weights = _read_centroids(
            buf, _HEADER3_END, n, mean_width, weight_width, exponent, lo
        )
        return cls._restored(float(compression), count, nan_count, total, lo, hi, means, weights)

    @classmethod
    def _from_v4(cls, buf: bytes) -> TDigest:
        pos = TDIGEST.size
        fields = []
        try:
            flags, pos = varint.unpack_from(buf, pos)
            if flags >= 2 * MAX_F64:
                raise ValueError(f"bad flags {flags}")
            for _ in range(5 - (flags & COMPRESSION_F64)):
                value, pos = varint.unpack_from(buf, pos)
                fields.append(value)
            if not flags & SUM_F64:
                zigzag, pos = varint.unpack_from(buf, pos)
            if not flags & MIN_F64:
                base, pos = varint.unpack_from(buf, pos)
        except ValueError as e:
            raise ValueError(f"TDigest.from_bytes: header: {e}") from None
        count, nan_count, n, layout = fields[-4:]
        doubles = bin(flags).count("1")
        if len(buf) < pos + 8 * doubles:
            raise ValueError(f"TDigest.from_bytes: {len(buf)} bytes is shorter than the header")
        stored = iter(struct.unpack_from(f"<{doubles}d", buf, pos))
        compression = next(stored) if flags & COMPRESSION_F64 else float(fields[0])
        total = next(stored) if flags & SUM_F64 else math.nan
        exponent, mean_code, weight_code = layout & 7, layout >> 3 & 7, layout >> 6
        if mean_code >= len(CODE_WIDTHS) or weight_code >= len(CODE_WIDTHS):
            raise ValueError(f"TDigest.from_bytes: bad layout {layout}")
        mean_width, weight_width = CODE_WIDTHS[mean_code], CODE_WIDTHS[weight_code]
        if flags & MIN_F64:
            lo = next(stored)
        elif mean_width == 8 or not 0 <= exponent <= _EXPONENTS[-1]:
            raise ValueError("TDigest.from_bytes: a min at a scale without integer means")
        else:
            lo = base / 10.0**exponent
        hi = next(stored) if flags & MAX_F64 else math.nan
        at = pos + 8 * doubles
        means, weights = _read_centroids(buf, at, n, mean_width, weight_width, exponent, lo)
        if not flags & MAX_F64:
            if not n:
                raise ValueError("TDigest.from_bytes: no centroid to be the max")
            hi = float(means[-1])
        if not flags & SUM_F64:
            ulps = zigzag >> 1 ^ -(zigzag & 1)
            bits = _bits(weighted_sum(means, weights)) + ulps
            if not -(2**63) <= bits < 2**63:
                raise ValueError("TDigest.from_bytes: bad sum")
            total = float(np.int64(bits).view(np.float64))
        return cls._restored(compression, count, nan_count, total, lo, hi, means, weights)

    @classmethod
    def _restored(
        cls,
        compression: float,
        count: int,
        nan_count: int,
        total: float,
        lo: float,
        hi: float,
        means: FloatArray,
        weights: FloatArray,
    ) -> TDigest:
        """A digest of decoded fields, after `from_bytes`'s consistency checks."""
        n = len(means)
        digest = cls(compression)  # validates compression
        if not (
            np.all(np.isfinite(means))
            and np.all(weights > 0)
            and np.all(means[1:] >= means[:-1])
            and float(np.sum(weights)) == float(count)
            and (n == 0) == (count == 0)
            and (count == 0 or (lo <= means[0] and means[-1] <= hi))
        ):
            raise ValueError("TDigest.from_bytes: inconsistent centroids or statistics")
        digest._means, digest._weights = means, weights
        digest._count, digest._nan_count, digest._sum = count, nan_count, total
        digest._min, digest._max = lo, hi
        return digest

    # --- dunder -----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of centroids."""
        return int(self._means.shape[0])

    def __eq__(self, other: object) -> bool:
        """Structural equality: same parameters, statistics and centroids (bit for bit)."""
        if not isinstance(other, TDigest):
            return NotImplemented
        return (
            self._compression == other._compression
            and self._count == other._count
            and self._nan_count == other._nan_count
            and _same_float(self._sum, other._sum)
            and self._min == other._min
            and self._max == other._max
            and np.array_equal(self._means, other._means)
            and np.array_equal(self._weights, other._weights)
        )

    def __repr__(self) -> str:
        return (
            f"TDigest(compression={self._compression:g}, count={self._count}, "
            f"centroids={len(self)}, min={self.min:g}, max={self.max:g})"
        )

    def __getstate__(self) -> bytes:
        # Pickle (Spark ships digests between executors and driver) via the versioned format.
        return self.to_bytes()

    def __setstate__(self, state: bytes) -> None:
        restored = TDigest.from_bytes(state)
        for name in TDigest.__slots__:
            setattr(self, name, getattr(restored, name))

    def _check_compatible(self, others: Iterable[object]) -> None:
        for other in others:
            if not isinstance(other, TDigest):
                raise TypeError(f"can only merge TDigest, got {type(other).__name__}")
            if other._compression != self._compression:
                raise ValueError(
                    f"cannot merge TDigest with compression {other._compression:g} into one "
                    f"with compression {self._compression:g}"
                )


def _same_float(a: float, b: float) -> bool:
    """Float equality where NaN equals NaN (a sum overflowed to inf - inf is still the same)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def _sorted_union(
    means: list[FloatArray], weights: list[FloatArray]
) -> tuple[FloatArray, FloatArray]:
    """Centroid runs (each sorted by mean) as one run in ascending order of mean."""
    all_means = np.concatenate(means)
    all_weights = np.concatenate(weights)
    # Stable sort finds the already-sorted runs, so sorting k runs costs little more than
    # merging them, and ties keep their input order (deterministic results).
    order = np.argsort(all_means, kind="stable")
    return all_means[order], all_weights[order]
