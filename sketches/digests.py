"""Many t-digests at once, as columns: `Digests`.

A `TDigest` is one object, and each of its verbs costs tens of microseconds of fixed numpy
overhead whatever it holds. A micro-batch that touches 10,000 (window, group) pairs pays that
10,000 times per verb, which is what bounds the job when groups are many. `Digests` holds the
digests of many groups as flat arrays (digest i's centroids are `means[offsets[i]:offsets[i+1]]`)
and builds, merges, reads and encodes all of them with a fixed number of numpy passes.

Same answers as `TDigest`, bit for bit, so either may be used anywhere and a replay is
byte-identical: `Digests.build` gives, per group, the digest a new `TDigest` updated once with
that group's values holds; `combine` gives `TDigest.merged` of each key's rows in row order;
`quantiles` gives `TDigest.quantile`; `encode` gives `TDigest.to_bytes`
(tests/unit/sketches/test_digests.py compares each with the object). The centroid rule is the
one in sketches/tdigest.py; only its bookkeeping is spread over groups: cumulative weights are
taken once over all groups, which is exact because weights are counts (integers), and each
group's boundary holders are found by one search of the whole array. Digests whose weights are
not integers (none that Tidegauge builds) go through `TDigest` one by one.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import sketches.varint as varint
from sketches.packed import Packed, joined_offsets, ranges
from sketches.preamble import TDIGEST
from sketches.tdigest import (
    _EXPONENTS,
    _HEADER,
    _HEADER3,
    _HEADER3_END,
    _HEADER_END,
    _OFFSET_WIDTHS,
    _WIDTHS,
    CODE_WIDTHS,
    COMPRESSION_F64,
    DEFAULT_COMPRESSION,
    MAX_F64,
    MIN_F64,
    SUM_F64,
    SUM_ULPS,
    VARINT_GAPS,
    TDigest,
    _boundaries,
    _compress_values,
    _exact_up_to,
    _finish_means,
    _kappa,
    decode_means,
    encode_digest,
)

__all__ = ["Digests"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(eq=False)
class Digests:
    """The t-digests of `len(self)` groups, one compression, as columns.

    `min`/`max` hold +inf/-inf for an empty digest (as `TDigest` keeps them internally).
    """

    compression: float
    offsets: IntArray
    means: FloatArray
    weights: FloatArray
    count: IntArray
    nan_count: IntArray
    sum: FloatArray
    min: FloatArray
    max: FloatArray

    def __len__(self) -> int:
        return int(self.count.shape[0])

    @property
    def sizes(self) -> IntArray:
        """Centroids per digest."""
        return np.diff(self.offsets)

    # --- building ---------------------------------------------------------------------------

    @classmethod
    def empty(cls, n: int, compression: float = DEFAULT_COMPRESSION) -> Digests:
        """`n` empty digests."""
        return cls(
            float(compression),
            np.zeros(n + 1, np.int64),
            np.empty(0),
            np.empty(0),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n),
            np.full(n, math.inf),
            np.full(n, -math.inf),
        )

    @classmethod
    def build(
        cls,
        values: npt.ArrayLike,
        groups: npt.ArrayLike,
        n: int,
        compression: float = DEFAULT_COMPRESSION,
    ) -> Digests:
        """Digest g of the values whose group is g (groups in [0, n)); NaN counted, not added.

        Per group: what `TDigest(compression)` holds after one `update` with its values.
        """
        TDigest(compression)  # validates it
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        g = np.asarray(groups, dtype=np.int64).reshape(-1)
        nan = np.isnan(v)
        nan_count = np.bincount(g[nan], minlength=n).astype(np.int64)
        if nan.any():
            v, g = v[~nan], g[~nan]
        if v.size and not np.isfinite(v).all():
            raise ValueError("TDigest.update: +/-inf values are not allowed")
        order = _by_group_then_value(v, g)
        v, g = v[order], g[order]
        count = np.bincount(g, minlength=n).astype(np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(count, out=offsets[1:])
        out = cls.empty(n, compression)
        out.nan_count = nan_count
        if not v.size:
            return out
        filled = np.flatnonzero(count)
        firsts, lasts = offsets[filled], offsets[filled + 1] - 1
        out.count = count
        out.sum[filled] = np.add.reduceat(v, firsts)
        out.min[filled], out.max[filled] = v[firsts], v[lasts]
        out.offsets, out.means, out.weights = _compress_many(
            v, np.ones(v.size), offsets, compression, unit=True
        )
        return out

    @classmethod
    def of(cls, digests: Sequence[TDigest]) -> Digests:
        """The columns of these digests (all of one compression), in order."""
        if not digests:
            return cls.empty(0)
        compression = digests[0].compression
        if any(d.compression != compression for d in digests):
            raise ValueError("Digests.of: digests of different compressions")
        sizes = [len(d) for d in digests]
        offsets = np.zeros(len(digests) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(
            compression,
            offsets,
            np.concatenate([d._means for d in digests]) if offsets[-1] else np.empty(0),
            np.concatenate([d._weights for d in digests]) if offsets[-1] else np.empty(0),
            np.array([d._count for d in digests], np.int64),
            np.array([d._nan_count for d in digests], np.int64),
            np.array([d._sum for d in digests], np.float64),
            np.array([d._min for d in digests], np.float64),
            np.array([d._max for d in digests], np.float64),
        )

    def digest(self, i: int) -> TDigest:
        """Group i's digest as a `TDigest` (a copy)."""
        d = TDigest(self.compression)
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        d._means, d._weights = self.means[lo:hi].copy(), self.weights[lo:hi].copy()
        d._count, d._nan_count = int(self.count[i]), int(self.nan_count[i])
        d._sum, d._min, d._max = float(self.sum[i]), float(self.min[i]), float(self.max[i])
        return d

    @classmethod
    def concat(cls, parts: Sequence[Digests]) -> Digests:
        """The groups of `parts`, one after another."""
        if not parts:
            return cls.empty(0)
        if len(parts) == 1:
            return parts[0]
        compression = parts[0].compression
        if any(p.compression != compression for p in parts):
            raise ValueError("Digests.concat: digests of different compressions")
        return cls(
            compression,
            joined_offsets([p.offsets for p in parts]),
            np.concatenate([p.means for p in parts]),
            np.concatenate([p.weights for p in parts]),
            np.concatenate([p.count for p in parts]),
            np.concatenate([p.nan_count for p in parts]),
            np.concatenate([p.sum for p in parts]),
            np.concatenate([p.min for p in parts]),
            np.concatenate([p.max for p in parts]),
        )

    def take(self, rows: npt.ArrayLike) -> Digests:
        """The digests of `rows`, in that order (a row may repeat)."""
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        sizes = self.sizes[idx]
        offsets = np.zeros(idx.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        points = _ranges(self.offsets[idx], sizes)
        return Digests(
            self.compression,
            offsets,
            self.means[points],
            self.weights[points],
            self.count[idx],
            self.nan_count[idx],
            self.sum[idx],
            self.min[idx],
            self.max[idx],
        )

    def shifted(self, delta_ms: npt.ArrayLike) -> Digests:
        """Each digest moved by its own delta, as `TDigest.shifted` (0: unchanged)."""
        d = np.asarray(delta_ms, dtype=np.float64).reshape(-1)
        if d.size != len(self):
            raise ValueError("Digests.shifted: one delta per digest")
        if not np.isfinite(d).all():
            raise ValueError("shift must be finite")
        moved = (d != 0) & (self.count > 0)
        if not moved.any():
            return self
        per_point = np.repeat(np.where(moved, d, 0.0), self.sizes)
        means = np.where(np.repeat(moved, self.sizes), self.means + per_point, self.means)
        return Digests(
            self.compression,
            self.offsets,
            means,
            self.weights,
            self.count,
            self.nan_count,
            np.where(moved, self.sum + d * self.count, self.sum),
            np.where(moved, self.min + d, self.min),
            np.where(moved, self.max + d, self.max),
        )

    def combine(self, keys: npt.ArrayLike, n: int) -> Digests:
        """Digest k: `TDigest.merged` of the rows whose key is k, in row order (empty if none)."""
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        if k.size != len(self):
            raise ValueError("Digests.combine: one key per digest")
        order = np.argsort(k, kind="stable")
        rows = self.take(order)
        key = k[order]
        parts = np.bincount(key, minlength=n)
        first = np.zeros(n + 1, np.int64)
        np.cumsum(parts, out=first[1:])
        out = Digests.empty(n, self.compression)
        has = np.flatnonzero(parts)
        if not has.size:
            return out
        starts = first[has]
        out.count[has] = np.add.reduceat(rows.count, starts)
        out.nan_count[has] = np.add.reduceat(rows.nan_count, starts)
        out.min[has] = np.minimum.reduceat(rows.min, starts)
        out.max[has] = np.maximum.reduceat(rows.max, starts)
        # Sums in row order, one row at a time per key, as TDigest.merge adds them: a rank at
        # a time for all keys, and keys of many rows (a `*` of every service) in Python.
        rank = np.arange(key.size) - first[key]
        out.sum[has] = rows.sum[starts]
        many = parts > _RANKED
        for r in range(1, min(int(parts.max()), _RANKED + 1)):
            at = (rank == r) & ~many[key]
            out.sum[key[at]] += rows.sum[at]
        for big in np.flatnonzero(many).tolist():
            part = rows.sum[first[big] : first[big + 1]].tolist()
            out.sum[big] = functools.reduce(operator.add, part)
        # Centroids: a key's rows' runs in row order, sorted stably by mean, then compressed
        # (a key of one row keeps its digest as it is, as TDigest.merged does).
        point_key = np.repeat(key, rows.sizes)
        by_mean = _by_group_then_value(rows.means, point_key)
        means, weights = rows.means[by_mean], rows.weights[by_mean]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(point_key, minlength=n), out=offsets[1:])
        single = parts == 1
        out.offsets, out.means, out.weights = _compress_many(
            means, weights, offsets, self.compression, unit=False, keep=single
        )
        return out

    # --- reading ----------------------------------------------------------------------------

    def quantiles(self, qs: Sequence[float]) -> FloatArray:
        """`TDigest.quantile(qs)` of every digest: shape (len(self), len(qs)); NaN when empty."""
        q = np.asarray(qs, dtype=np.float64).reshape(-1)
        if not ((q >= 0.0) & (q <= 1.0)).all():
            raise ValueError("quantile: q must be within [0, 1]")
        out = np.full((len(self), q.size), np.nan)
        filled = np.flatnonzero(self.count)
        if not filled.size:
            return out
        if not _integer(self.weights):
            for i in filled.tolist():
                out[i] = self.digest(i).quantile(q)
            return out
        d = self.take(filled)
        ranks, values, knot_offsets = _knots(d)
        total = d.count.astype(np.float64)
        t = total[:, None] * q[None, :]
        # Ranks are multiples of 1/2 (weights are integers), so "the first knot at or beyond t"
        # is the first at or beyond ceil(2t)/2, which lifts exactly onto a global rank axis.
        base = np.zeros(len(d))
        np.cumsum(total[:-1] + 1.0, out=base[1:])
        lifted = ranks + np.repeat(base, np.diff(knot_offsets))
        target = base[:, None] + np.ceil(2.0 * t) / 2.0
        first_knot = knot_offsets[:-1, None]
        last_local = np.diff(knot_offsets)[:, None] - 1
        local = np.searchsorted(lifted, target, "left") - first_knot
        hi = np.minimum(np.maximum(local, 1), last_local) + first_knot
        lo = hi - 1
        r_lo, v_lo = ranks[lo], values[lo]
        with np.errstate(divide="ignore", invalid="ignore"):
            res = v_lo + (t - r_lo) / (ranks[hi] - r_lo) * (values[hi] - v_lo)
        res = np.where(t <= 0.0, d.min[:, None], np.where(t >= total[:, None], d.max[:, None], res))
        out[filled] = res
        return out

    # --- bytes ------------------------------------------------------------------------------

    def encode(self) -> list[bytes]:
        """`TDigest.to_bytes` of every digest.

        Digests of whole weights (every digest built from events, and their merges) are laid
        out as version 4 in one buffer with a fixed number of numpy passes; others one by one.
        """
        n = len(self.count)
        sizes = np.diff(self.offsets)
        if (
            not n
            or not _integer(self.weights)
            or int(self.count.max()) >= varint.LIMIT
            or int(self.nan_count.max()) >= varint.LIMIT
        ):
            return self._encode_each()
        digest = np.repeat(np.arange(n), sizes)
        rank = np.arange(len(digest)) - self.offsets[:-1][digest]
        some = sizes > 0
        top = np.zeros(n)
        low = np.ones(n)
        if some.any():
            top[some] = np.maximum.reduceat(self.weights, self.offsets[:-1][some])
            low[some] = np.minimum.reduceat(self.weights, self.offsets[:-1][some])
        wide = np.select([top < 256, top < 65536, top < 2.0**32], [1, 2, 4], 8).astype(np.int64)
        weight_width = np.where(some & (top == 1.0) & (low == 1.0), 0, wide)
        weight_width[~some] = 0
        mean_width, exponent, offsets = _scaled_means_many(
            self.means, self.min, digest, sizes, self.offsets
        )
        gaps, gap_bytes, gapped = _gap_varints(offsets, digest, sizes, self.offsets, mean_width)
        mean_bytes = np.where(gapped, gap_bytes, mean_width * sizes)
        head, head_bytes, doubles, double_count = self._headers_v4(
            sizes, np.where(gapped, VARINT_GAPS, mean_width), exponent, weight_width
        )
        pre = np.frombuffer(TDIGEST.preamble, np.uint8)
        means_at_head = len(pre) + head_bytes + 8 * double_count
        lengths = means_at_head + mean_bytes + weight_width * sizes
        starts = np.zeros(n, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        buf = np.empty(int(lengths.sum()), np.uint8)
        buf[starts[:, None] + np.arange(len(pre))] = pre
        _place(buf, starts + len(pre), head_bytes, head)
        _place(buf, starts + len(pre) + head_bytes, 8 * double_count, doubles)
        means_at = starts + means_at_head
        for w in (1, 2, 4, 8):
            mine = (mean_width == w)[digest] & ~gapped[digest]
            if mine.any():
                values = self.means[mine] if w == 8 else offsets[mine]
                raw = values.astype(_STORED_WIDTHS[w]).view(np.uint8).reshape(-1, w)
                at = means_at[digest[mine]] + w * rank[mine]
                buf[at[:, None] + np.arange(w)] = raw
        if gapped.any():
            owners = np.flatnonzero(gapped)
            _place(buf, means_at[owners], gap_bytes[owners], varint.encode(gaps[gapped[digest]]))
        weights_at = means_at + mean_bytes
        for w in (1, 2, 4, 8):
            mine = weight_width[digest] == w
            if mine.any():
                raw = self.weights[mine].astype(_WIDTHS[w]).view(np.uint8).reshape(-1, w)
                at = weights_at[digest[mine]] + w * rank[mine]
                buf[at[:, None] + np.arange(w)] = raw
        data = buf.tobytes()
        ends = (starts + lengths).tolist()
        return [data[a:b] for a, b in zip(starts.tolist(), ends, strict=True)]

    def _headers_v4(
        self, sizes: IntArray, mean_width: IntArray, exponent: IntArray, weight_width: IntArray
    ) -> tuple[npt.NDArray[np.uint8], IntArray, npt.NDArray[np.uint8], IntArray]:
        """Every digest's version-4 header (sketches/tdigest.py), as columns.

        Its varints end to end and their bytes per digest, its f64s end to end and their
        number per digest.
        """
        n = len(sizes)
        some = sizes > 0
        layout = (
            exponent
            | np.searchsorted(CODE_WIDTHS, mean_width) << 3
            | np.searchsorted(CODE_WIDTHS, weight_width) << 6
        )
        c = self.compression
        whole = float(c).is_integer() and 0 < c < varint.LIMIT
        ref = np.zeros(n)
        if some.any():
            with np.errstate(over="ignore", invalid="ignore"):  # values near the float max
                ref[some] = np.add.reduceat(self.means * self.weights, self.offsets[:-1][some])
        ulps = self.sum.view(np.int64) - ref.view(np.int64)
        near = (ulps > -SUM_ULPS) & (ulps < SUM_ULPS)
        scale = 10.0**exponent
        with np.errstate(invalid="ignore", over="ignore"):  # empty digests' infinite min
            scaled = np.rint(self.min * scale)
        # an integer, as the reader has it: -0.0 is not 0 / 10^e
        base = np.where((scaled >= 0) & (scaled < varint.LIMIT), scaled, -1).astype(np.int64)
        exact_min = (
            some
            & (mean_width != 8)
            & (base >= 0)
            & ((base / scale).view(np.int64) == self.min.view(np.int64))
        )
        last = self.means[np.maximum(self.offsets[1:] - 1, 0)] if len(self.means) else ref
        last_is_max = some & (last.view(np.int64) == self.max.view(np.int64))
        flags = (
            (0 if whole else COMPRESSION_F64)
            + np.where(near, 0, SUM_F64)
            + np.where(exact_min, 0, MIN_F64)
            + np.where(last_is_max, 0, MAX_F64)
        )
        fields = np.stack(
            [
                flags,
                np.full(n, int(c) if whole else 0),
                self.count,
                self.nan_count,
                sizes,
                layout,
                np.where(near, ulps << 1 ^ ulps >> 63, 0),
                np.where(exact_min, base, 0),
            ],
            axis=1,
        )
        keep = np.ones(fields.shape, np.bool_)
        keep[:, 1], keep[:, 6], keep[:, 7] = whole, near, exact_min
        head_bytes = (varint.lengths(fields.reshape(-1)).reshape(n, -1) * keep).sum(axis=1)
        floats = np.stack([np.full(n, float(c)), self.sum, self.min, self.max], axis=1)
        stored = np.stack([~np.full(n, whole), ~near, ~exact_min, ~last_is_max], axis=1)
        doubles = floats[stored].astype("<f8").view(np.uint8)
        return varint.encode(fields[keep]), head_bytes, doubles, stored.sum(axis=1)

    def _encode_each(self) -> list[bytes]:
        """`encode`, one digest at a time (any weights)."""
        return [
            encode_digest(
                self.compression,
                int(self.count[i]),
                int(self.nan_count[i]),
                float(self.sum[i]),
                float(self.min[i]),
                float(self.max[i]),
                self.means[lo:hi],
                self.weights[lo:hi],
            )
            for i, (lo, hi) in enumerate(itertools.pairwise(self.offsets.tolist()))
        ]

    @classmethod
    def decode(cls, blobs: Sequence[bytes]) -> Digests:
        """Digests of `TDigest.to_bytes` blobs (every version `TDigest.from_bytes` reads).

        The checks are `TDigest.from_bytes`'s; ValueError names the blob at fault.
        """
        fast = cls.unpack(Packed(blobs)) if blobs else None
        return fast if fast is not None else cls._decode_each(blobs)

    @classmethod
    def unpack(cls, blobs: Packed) -> Digests | None:
        """`decode` of blobs of versions 2 and 3, all fields read at once (sketches/packed.py).

        None when some blob is of another version or layout: `decode` then reads them one by
        one and names what is wrong.
        """
        n = len(blobs.starts)
        starts, sizes = blobs.starts, blobs.sizes
        magic = TDIGEST.magic
        if not n or (sizes < TDIGEST.size).any() or not blobs.equal_at(starts, magic):
            return None
        version = blobs.buf[starts + len(magic)]
        readers = {2: cls._unpack_v2, 3: cls._unpack_v3, 4: cls._unpack_v4}
        if not np.isin(version, list(readers)).all():
            return None
        present = np.unique(version).tolist()
        if len(present) == 1:
            return readers[present[0]](blobs)
        parts, order = [], []
        for v in present:
            sel = np.flatnonzero(version == v)
            got = readers[v](Packed.of(blobs.buf, starts[sel], sizes[sel]))
            if got is None:
                return None
            parts.append(got)
            order.append(sel)
        if any(p.compression != parts[0].compression for p in parts):
            return None
        where = np.empty(n, np.int64)
        where[np.concatenate(order)] = np.arange(n)
        return cls.concat(parts).take(where)

    @classmethod
    def _unpack_v3(cls, blobs: Packed) -> Digests | None:
        starts, sizes = blobs.starts, blobs.sizes
        if (sizes < _HEADER3_END).any():
            return None
        head = np.ascontiguousarray(blobs.bytes_at(starts + TDIGEST.size, _HEADER3.size))
        fields = head.view(_HEADER3_DTYPE).reshape(-1)
        compression = fields["compression"]
        if not (compression == compression[0]).all():
            return None
        lo = fields["min"].astype(np.float64)
        columns = _read_centroids(
            blobs,
            starts + _HEADER3_END,
            fields["n"].astype(np.int64),
            fields["mean_width"].astype(np.int64),
            fields["weight_width"].astype(np.int64),
            fields["exponent"].astype(np.int64),
            lo,
        )
        if columns is None:
            return None
        offsets, means, weights = columns
        out = cls(
            float(compression[0]),
            offsets,
            means,
            weights,
            fields["count"].astype(np.int64),
            fields["nan"].astype(np.int64),
            fields["sum"].astype(np.float64),
            lo,
            fields["max"].astype(np.float64),
        )
        TDigest(out.compression)  # validates the compression
        out._check()
        return out

    @classmethod
    def _unpack_v4(cls, blobs: Packed) -> Digests | None:
        starts, ends = blobs.starts, blobs.starts + blobs.sizes
        n = len(starts)
        buf = blobs.buf
        try:
            flags, pos = varint.read_at(buf, starts + TDIGEST.size, ends)
            if (flags >= 2 * MAX_F64).any():
                return None
            # the fields a flag can leave out start at 0 for the digests that do
            fields = {name: np.zeros(n, np.int64) for name in ("compression", "ulps", "base")}
            for name, absent in (
                ("compression", COMPRESSION_F64),
                ("count", 0),
                ("nan", 0),
                ("n", 0),
                ("layout", 0),
                ("ulps", SUM_F64),
                ("base", MIN_F64),
            ):
                sel = (flags & absent) == 0 if absent else np.ones(n, np.bool_)
                if sel.all():
                    fields[name], pos = varint.read_at(buf, pos, ends)
                elif sel.any():
                    fields[name][sel], pos[sel] = varint.read_at(buf, pos[sel], ends[sel])
        except ValueError:
            return None
        doubles = {}
        for name, flag in (
            ("compression", COMPRESSION_F64),
            ("sum", SUM_F64),
            ("min", MIN_F64),
            ("max", MAX_F64),
        ):
            sel = (flags & flag) != 0
            doubles[name] = np.full(n, np.nan)
            if sel.any():
                if (pos[sel] + 8 > ends[sel]).any():
                    return None
                doubles[name][sel] = blobs.read(pos[sel], "<f8")
                pos[sel] += 8
        compression = np.where(
            (flags & COMPRESSION_F64) != 0, doubles["compression"], fields["compression"]
        )
        if not (compression == compression[0]).all():
            return None
        layout = fields["layout"]
        exponent, mean_code, weight_code = layout & 7, layout >> 3 & 7, layout >> 6
        if (mean_code >= len(CODE_WIDTHS)).any() or (weight_code >= len(CODE_WIDTHS)).any():
            return None
        widths = np.array(CODE_WIDTHS, np.int64)
        mean_width, weight_width = widths[mean_code], widths[weight_code]
        from_base = (flags & MIN_F64) == 0
        if (from_base & ((mean_width == 8) | (exponent > _EXPONENTS[-1]))).any():
            return None
        lo = np.where(from_base, fields["base"] / 10.0 ** np.minimum(exponent, 9), doubles["min"])
        size = fields["n"]
        columns = _read_centroids(
            Packed.of(buf, pos, ends - pos), pos, size, mean_width, weight_width, exponent, lo
        )
        if columns is None:
            return None
        offsets, means, weights = columns
        last_is_max = (flags & MAX_F64) == 0
        if (last_is_max & (size == 0)).any():
            return None
        hi = np.where(
            last_is_max,
            means[np.maximum(offsets[1:] - 1, 0)] if len(means) else 0.0,
            doubles["max"],
        )
        ref = np.zeros(n)
        some = size > 0
        if some.any():
            with np.errstate(over="ignore", invalid="ignore"):
                ref[some] = np.add.reduceat(means * weights, offsets[:-1][some])
        z = fields["ulps"]
        ulps = (z >> 1) ^ -(z & 1)
        bits = ref.view(np.int64)
        if ((bits + ulps < bits) != (ulps < 0)).any():  # past the ends of int64: no such sum
            return None
        total = np.where((flags & SUM_F64) == 0, (bits + ulps).view(np.float64), doubles["sum"])
        out = cls(
            float(compression[0]),
            offsets,
            means,
            weights,
            fields["count"],
            fields["nan"],
            total,
            lo,
            hi,
        )
        TDigest(out.compression)  # validates the compression
        out._check()
        return out

    @classmethod
    def _unpack_v2(cls, blobs: Packed) -> Digests | None:
        n = len(blobs.starts)
        starts, sizes = blobs.starts, blobs.sizes
        if (sizes < _HEADER_END + 1).any():
            return None
        head = np.ascontiguousarray(blobs.bytes_at(starts + TDIGEST.size, _HEADER.size))
        fields = head.view(_HEADER_DTYPE).reshape(-1)
        compression = fields["compression"]
        if not (compression == compression[0]).all():
            return None
        size = fields["n"].astype(np.int64)
        width_at = starts + _HEADER_END + 8 * size
        if (width_at >= starts + sizes).any():
            return None
        width = blobs.buf[width_at].astype(np.int64)
        if (
            not np.isin(width, (1, 2, 4, 8)).all()
            or (sizes != _HEADER_END + 8 * size + 1 + width * size).any()
        ):
            return None
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(size, out=offsets[1:])
        weights = np.empty(int(offsets[-1]))
        for w in np.unique(width).tolist():
            sel = width == w
            values = blobs.runs(width_at[sel] + 1, size[sel], _WIDTHS[w])
            weights[_ranges(offsets[:-1][sel], size[sel])] = values
        out = cls(
            float(compression[0]),
            offsets,
            blobs.runs(starts + _HEADER_END, size, "<f8").astype(np.float64),
            weights,
            fields["count"].astype(np.int64),
            fields["nan"].astype(np.int64),
            fields["sum"].astype(np.float64),
            fields["min"].astype(np.float64),
            fields["max"].astype(np.float64),
        )
        TDigest(out.compression)  # validates the compression
        out._check()
        return out

    @classmethod
    def _decode_each(cls, blobs: Sequence[bytes]) -> Digests:
        """`decode`, one blob at a time (older versions; precise errors)."""
        n = len(blobs)
        heads = np.empty((n, 7))
        counts = np.zeros(n, np.int64)
        nans = np.zeros(n, np.int64)
        sizes = np.zeros(n, np.int64)
        means: list[FloatArray] = []
        weights: list[FloatArray] = []
        compression = DEFAULT_COMPRESSION
        for i, blob in enumerate(blobs):
            if TDIGEST.check(blob) != 2 or len(blob) < _HEADER_END:
                d = TDigest.from_bytes(blob)  # other versions and short blobs: the object's way
                comp, count, nan, total, lo, hi, size = (
                    d.compression,
                    d.count,
                    d.nan_count,
                    d.sum,
                    d._min,
                    d._max,
                    len(d),
                )
                m, w = d._means, d._weights
            else:
                comp, count, nan, total, lo, hi, size = _HEADER.unpack_from(blob, TDIGEST.size)
                at = _HEADER_END + 8 * size
                if len(blob) <= at:
                    raise ValueError(f"TDigest.from_bytes: blob {i} is truncated")
                width = blob[at]
                kind = _WIDTHS.get(width, "")
                if not kind or len(blob) != at + 1 + width * size:
                    raise ValueError(f"TDigest.from_bytes: blob {i} has a bad length or width")
                m = np.frombuffer(blob, "<f8", size, _HEADER_END)
                w = np.frombuffer(blob, kind, size, at + 1)
            if i == 0:
                compression = comp
            elif comp != compression:
                raise ValueError("Digests.decode: digests of different compressions")
            heads[i, 2:6] = (total, lo, hi, 0.0)
            counts[i], nans[i], sizes[i] = count, nan, size
            means.append(m)
            weights.append(w)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        out = cls(
            float(compression),
            offsets,
            np.concatenate(means).astype(np.float64) if n else np.empty(0),
            np.concatenate(weights).astype(np.float64) if n else np.empty(0),
            counts,
            nans,
            heads[:, 2].copy(),
            heads[:, 3].copy(),
            heads[:, 4].copy(),
        )
        if n:
            TDigest(out.compression)  # validates the compression
            out._check()
        return out

    def _check(self) -> None:
        """`TDigest.from_bytes`'s consistency checks, over every digest at once."""
        sizes = self.sizes
        filled = np.flatnonzero(sizes)
        inner = np.ones(self.means.size, bool)
        inner[self.offsets[:-1][sizes > 0]] = False  # a group's first centroid has no left
        ok = (
            np.isfinite(self.means).all()
            and (self.weights > 0).all()
            and (self.means[1:] >= self.means[:-1])[inner[1:]].all()
            and ((sizes == 0) == (self.count == 0)).all()
        )
        if ok and filled.size:
            starts = self.offsets[filled]
            sums = np.add.reduceat(self.weights, starts)
            ok = (
                bool((sums == self.count[filled].astype(np.float64)).all())
                and bool((self.min[filled] <= self.means[starts]).all())
                and bool((self.means[self.offsets[filled + 1] - 1] <= self.max[filled]).all())
            )
        if not ok:
            raise ValueError("TDigest.from_bytes: inconsistent centroids or statistics")


#: Keys merging more rows than this sum them in Python (`combine`): the rank-at-a-time loop
#: would take a numpy pass per row.
_RANKED = 32

#: `_HEADER` as a numpy record: what `unpack` reads from every blob at once.
_HEADER_DTYPE = np.dtype(
    [
        ("compression", "<f8"),
        ("count", "<u8"),
        ("nan", "<u8"),
        ("sum", "<f8"),
        ("min", "<f8"),
        ("max", "<f8"),
        ("n", "<u4"),
    ]
)
assert _HEADER_DTYPE.itemsize == _HEADER.size

#: `_HEADER3` (version 3) as a numpy record.
_HEADER3_DTYPE = np.dtype(
    [
        ("compression", "<f4"),
        ("count", "<u4"),
        ("nan", "<u4"),
        ("n", "<u2"),
        ("sum", "<f8"),
        ("min", "<f8"),
        ("max", "<f8"),
        ("mean_width", "u1"),
        ("exponent", "i1"),
        ("weight_width", "u1"),
    ]
)
assert _HEADER3_DTYPE.itemsize == _HEADER3.size

#: Fixed widths of version 3's means: integer offsets (1, 2, 4 bytes) or f64 (0: gap varints).
_STORED_WIDTHS = {**_OFFSET_WIDTHS, 8: "<f8"}


def _scaled_means_many(
    means: FloatArray, lo: FloatArray, digest: IntArray, sizes: IntArray, offsets: IntArray
) -> tuple[IntArray, IntArray, FloatArray]:
    """`sketches.tdigest._scaled_means` of every digest: widths, exponents and offsets.

    A mean exact at 10^e is exact at every larger exponent too (while the numbers stay below
    2^53), so a digest that fails at the largest exponent with room to spare is f64 at once:
    the merged centroids of busy windows cost one pass, not one per exponent.
    """
    n = len(sizes)
    exponent = np.full(n, -1, np.int64)
    stored = np.zeros(len(means))
    first = True
    for e in (_EXPONENTS[-1], *_EXPONENTS):
        open_ = exponent == -1
        if not open_.any():
            break
        scale = 10.0**e
        base = np.rint(lo * scale)
        with np.errstate(invalid="ignore", over="ignore"):
            q = np.rint(means * scale) - base[digest]
            exact = (base[digest] + q) / scale == means
        if first:  # not exact at the largest exponent: at none (numbers far below 2^53)
            exponent[np.bincount(digest[~exact], minlength=n) > 0] = -2
            first = False
            continue
        ok = exact & (q >= 0) & (q < 2.0**32)
        bad = np.bincount(digest[~ok], minlength=n) > 0
        won = open_ & ~bad
        exponent[won] = e
        take = won[digest]
        stored[take] = q[take]
    top = np.zeros(n)
    some = sizes > 0
    if some.any():
        top[some] = np.maximum.reduceat(stored, offsets[:-1][some])
    width = np.select([top < 256, top < 65536], [1, 2], 4).astype(np.int64)
    width[exponent < 0] = 8
    exponent[exponent < 0] = 0
    return width, exponent, stored


def _read_centroids(
    blobs: Packed,
    means_at: IntArray,
    size: IntArray,
    mean_width: IntArray,
    weight_width: IntArray,
    exponent: IntArray,
    lo: FloatArray,
) -> tuple[IntArray, FloatArray, FloatArray] | None:
    """Versions 3 and 4: every digest's means and weights, from `means_at` to its blob's end.

    (offsets, means, weights), or None when a digest's widths, exponent or length do not fit.
    """
    n = len(size)
    starts, ends = blobs.starts, blobs.starts + blobs.sizes
    gapped = mean_width == VARINT_GAPS
    tail = ends - means_at
    mean_bytes = np.where(gapped, tail - weight_width * size, mean_width * size)
    if (
        not np.isin(mean_width, CODE_WIDTHS).all()
        or not np.isin(weight_width, (0, 1, 2, 4, 8)).all()
        or (exponent < 0).any()
        or (exponent > _EXPONENTS[-1]).any()
        or (means_at < starts).any()
        or (tail != mean_bytes + weight_width * size).any()
        or (gapped & ((mean_bytes < size) | (mean_bytes > varint.MAX_BYTES * size))).any()
    ):
        return None
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(size, out=offsets[1:])
    total = int(offsets[-1])
    means = np.empty(total)
    for w in np.unique(mean_width).tolist():
        sel = mean_width == w
        at = _ranges(offsets[:-1][sel], size[sel])
        if w == VARINT_GAPS:
            gapped_offsets = _read_gap_varints(blobs, means_at[sel], mean_bytes[sel], size[sel])
            if gapped_offsets is None:
                return None
            digest = np.repeat(np.flatnonzero(sel), size[sel])
            means[at] = decode_means(gapped_offsets, lo[digest], exponent[digest])
            continue
        values = blobs.runs(means_at[sel], size[sel], _STORED_WIDTHS[w])
        if w == 8:
            means[at] = values
        else:
            digest = np.repeat(np.flatnonzero(sel), size[sel])
            means[at] = decode_means(values, lo[digest], exponent[digest])
    weights = np.ones(total)
    weights_at = means_at + mean_bytes
    for w in np.unique(weight_width).tolist():
        if w:
            sel = weight_width == w
            values = blobs.runs(weights_at[sel], size[sel], _WIDTHS[w])
            weights[_ranges(offsets[:-1][sel], size[sel])] = values
    return offsets, means, weights


def _place(
    buf: npt.NDArray[np.uint8], at: IntArray, nbytes: IntArray, stream: npt.NDArray[np.uint8]
) -> None:
    """Cut `stream` into runs of `nbytes[i]` bytes and write run i at `buf[at[i]:]`."""
    if not len(stream):
        return
    chunk = np.zeros(len(at), np.int64)
    np.cumsum(nbytes[:-1], out=chunk[1:])
    owner = np.repeat(np.arange(len(at)), nbytes)
    buf[at[owner] + np.arange(len(stream)) - chunk[owner]] = stream


def _gap_varints(
    stored: FloatArray, digest: IntArray, sizes: IntArray, offsets: IntArray, width: IntArray
) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
    """`sketches.tdigest._gap_varints` of every digest: the gaps, their bytes, which are shorter.

    A digest's offsets are stored as varints of their gaps where that takes fewer bytes than
    their fixed width (never for f64 means).
    """
    n = len(sizes)
    values = stored.astype(np.int64)
    gaps = varint.gaps(values, offsets[:-1])
    negative = np.bincount(digest[gaps < 0], minlength=n) > 0
    gaps[gaps < 0] = 0
    gap_bytes = np.bincount(digest, weights=varint.lengths(gaps), minlength=n).astype(np.int64)
    gapped = (width != 8) & (sizes > 0) & ~negative & (gap_bytes < width * sizes)
    return gaps, gap_bytes, gapped


def _read_gap_varints(
    blobs: Packed, at: IntArray, nbytes: IntArray, counts: IntArray
) -> IntArray | None:
    """The offsets of digests stored as varints of their gaps; None if a digest's do not fit."""
    raw = blobs.runs(at, nbytes, "u1").astype(np.uint8, copy=False)
    try:
        return varint.ungap(varint.decode_runs(raw, nbytes, counts), counts)
    except ValueError:
        return None  # a digest whose bytes hold another number of values, or end mid-value


#: From how many points per group on (on average) groups that lie in runs are sorted one at a
#: time: one small stable sort per group (a roll-up's group is a few sorted digests, which the
#: sort merges as runs) costs ~6 µs of Python each, against ~150-250 ns a point for sorting all
#: of them at once (the crossover measured at ~32).
_SORT_EACH_FROM = 48


def _by_group_then_value(values: FloatArray, groups: IntArray) -> IntArray:
    """`np.lexsort((values, groups))`: by group, then value, ties in input order.

    Groups in runs (`combine`'s points) with many points each: each run sorted on its own,
    7x faster for a 10-minute roll-up of 10,000 services (1,800 values a group). Otherwise
    each value replaced by its rank among the distinct values, one integer key per point
    sorted in one stable pass: about twice lexsort's speed.
    """
    if values.size < 2:
        return np.arange(values.size, dtype=np.int64)
    bounds = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    if values.size >= _SORT_EACH_FROM * (bounds.size + 1) and bool(
        (groups[1:] >= groups[:-1]).all()
    ):
        return _sorted_each(values, bounds)
    distinct, rank = np.unique(values, return_inverse=True)
    return np.argsort(groups.astype(np.int64) * distinct.size + rank, kind="stable")


def _sorted_each(values: FloatArray, bounds: IntArray) -> IntArray:
    """The stable order by value within each run of points that `bounds` (run starts) cut."""
    out = np.empty(values.size, np.int64)
    edges = [0, *bounds.tolist(), values.size]
    for lo, hi in itertools.pairwise(edges):
        order = np.argsort(values[lo:hi], kind="stable")
        order += lo
        out[lo:hi] = order
    return out


def _integer(weights: FloatArray) -> bool:
    return bool(np.array_equal(weights, np.floor(weights)))


_ranges = ranges


def _knots(d: Digests) -> tuple[FloatArray, FloatArray, IntArray]:
    """`TDigest._knots` of every (non-empty) digest, concatenated, with their offsets."""
    w = d.weights
    g = np.repeat(np.arange(len(d)), d.sizes)
    right = np.cumsum(w)
    base = np.concatenate(([0.0], right))[d.offsets[:-1]]
    right = right - base[g]
    left = right - w
    centre = left + 0.5 * w
    single = w == 1.0
    k = 2 * d.sizes + 2
    offsets = np.zeros(len(d) + 1, np.int64)
    np.cumsum(k, out=offsets[1:])
    ranks = np.empty(int(offsets[-1]))
    values = np.empty_like(ranks)
    ranks[offsets[:-1]], values[offsets[:-1]] = 0.0, d.min
    ranks[offsets[1:] - 1] = d.count.astype(np.float64)
    values[offsets[1:] - 1] = d.max
    point = np.arange(w.size) - d.offsets[g]
    odd = offsets[g] + 1 + 2 * point
    ranks[odd] = np.where(single, left, centre)
    ranks[odd + 1] = np.where(single, right, centre)
    values[odd] = d.means
    values[odd + 1] = d.means
    return ranks, values, offsets


def _compress_many(
    means: FloatArray,
    weights: FloatArray,
    offsets: IntArray,
    compression: float,
    *,
    unit: bool,
    keep: npt.NDArray[np.bool_] | None = None,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """sketches/tdigest.py's `_compress` (or `_compress_values` with `unit` weights) per group.

    Points are sorted by mean within each group (`offsets`); groups flagged in `keep` stay as
    they are. Returns the new offsets, means and weights.
    """
    n_points = means.size
    groups = offsets.shape[0] - 1
    if not n_points:
        return np.zeros(groups + 1, np.int64), means.copy(), weights.copy()
    if not unit and not _integer(weights):
        return _compress_each(means, weights, offsets, compression, keep)
    sizes = np.diff(offsets)
    cuts_q, shortest = _boundaries(compression)
    is_start = np.zeros(n_points + 1, np.bool_)
    filled = sizes > 0
    firsts = offsets[:-1][filled]
    is_start[firsts] = True
    is_start[firsts + 1] = True
    is_start[offsets[1:][filled] - 1] = True
    # Groups of at most two points, and kept groups, stay as they are: every point a start.
    # So do groups of raw values too few for any two to share a centroid.
    small = filled & (sizes <= (_singletons_up_to(compression) if unit else 2))
    if not unit and filled.any():
        # Merged raw values (every weight 1, as small panes hold) follow the unit-weight rule.
        few = filled & (sizes <= _singletons_up_to(compression))
        if few.any():
            top = np.zeros(groups)
            top[filled] = np.maximum.reduceat(weights, offsets[:-1][filled])
            small |= few & (top == 1.0)
    if not unit and filled.any():
        # A group of at most `compression` in weight keeps its points, as `_compress` does.
        weight = np.zeros(groups)
        weight[filled] = np.add.reduceat(weights, offsets[:-1][filled])
        small |= filled & (weight <= _exact_up_to(compression))
    if keep is not None:
        small |= filled & keep
    if small.any():
        is_start[_ranges(offsets[:-1][small], sizes[small])] = True
    big = np.flatnonzero(filled & ~small)
    if big.size:
        base = offsets[big]
        n_big = sizes[big]
        if unit:
            total = n_big.astype(np.float64)
            cuts = total[:, None] * cuts_q[None, :]
            holder = np.minimum(np.ceil(cuts).astype(np.int64) - 1, n_big[:, None] - 1)
            holder_right = holder + 1.0
            holder_weight = np.ones_like(holder_right)
        else:
            cum = np.cumsum(weights)
            below = np.concatenate(([0.0], cum))[base]
            total = cum[base + n_big - 1] - below
            cuts = total[:, None] * cuts_q[None, :]
            # right >= cut <=> right >= ceil(cut) for integer cumulative weights: exact on the
            # whole array's cumulative weights.
            found = np.searchsorted(cum, below[:, None] + np.ceil(cuts), "left")
            holder = np.minimum(found - base[:, None], n_big[:, None] - 1)
            at = holder + base[:, None]
            holder_right = cum[at] - below[:, None]
            holder_weight = weights[at]
        centre = holder_right - 0.5 * holder_weight
        is_start[(holder + (centre < cuts)) + base[:, None]] = True
        limit = total[:, None] * shortest[None, :]
        candidate = (holder_right > cuts) & (holder_weight > limit)
        if candidate.any():
            right = holder_right[candidate]
            tot = np.broadcast_to(total[:, None], cuts.shape)[candidate]
            both = _kappa(
                np.concatenate((right, right - holder_weight[candidate])) / np.tile(tot, 2)
            )
            span = both[: right.shape[0]] - both[right.shape[0] :]
            heavy = (holder + base[:, None])[candidate][span * (compression / 2.0) > 1.0]
            is_start[heavy] = True
            is_start[heavy + 1] = True
    # A group's end is the next group's start (or the end): local index n is never a start.
    is_start[offsets[1:]] = False
    is_start[firsts] = True
    starts = np.flatnonzero(is_start[:n_points])
    if unit:
        new_weights = np.diff(np.append(starts, n_points)).astype(np.float64)
    else:
        new_weights = np.add.reduceat(weights, starts)
    with np.errstate(over="ignore", invalid="ignore"):
        sums = np.add.reduceat(means if unit else means * weights, starts)
        new_means = sums / new_weights
    start_group = np.searchsorted(offsets, starts, "right") - 1
    new_offsets = np.zeros(groups + 1, np.int64)
    np.cumsum(np.bincount(start_group, minlength=groups), out=new_offsets[1:])
    # Per group, as `_finish_means`: redo overflowed groups on scaled values, keep the means
    # sorted and inside [min, max].
    bad = ~np.isfinite(new_means)
    out_of_order = np.zeros(new_means.size, np.bool_)
    out_of_order[1:] = new_means[1:] < new_means[:-1]
    out_of_order[new_offsets[:-1][new_offsets[:-1] < new_means.size]] = False
    fix = np.unique(start_group[bad | out_of_order])
    for g in fix.tolist():
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        nlo, nhi = int(new_offsets[g]), int(new_offsets[g + 1])
        new_means[nlo:nhi] = _finish_means(
            means[lo:hi],
            None if unit else weights[lo:hi],
            starts[nlo:nhi] - lo,
            new_weights[nlo:nhi],
        )
    sizes_new = np.diff(new_offsets)[filled]
    group_lo = np.repeat(means[offsets[:-1][filled]], sizes_new)
    group_hi = np.repeat(means[offsets[1:][filled] - 1], sizes_new)
    new_means = np.minimum(np.maximum(new_means, group_lo), group_hi)
    if small.any():
        # Copied, not recomputed: (mean * weight) / weight need not give the mean back.
        copied = _ranges(offsets[:-1][small], sizes[small])
        at = np.searchsorted(starts, copied)
        new_means[at], new_weights[at] = means[copied], weights[copied]
    return new_offsets, new_means, new_weights


@functools.lru_cache(maxsize=32)
def _singletons_up_to(compression: float) -> int:
    """The most raw values (unit weights) a digest keeps one centroid each, at any count up to it.

    Small groups are most of a batch of many groups; they skip the boundary search.
    """
    n = 2
    while n < 10_000 and len(_compress_values(np.arange(n + 1.0), compression)[0]) == n + 1:
        n += 1
    return n


def _compress_each(
    means: FloatArray,
    weights: FloatArray,
    offsets: IntArray,
    compression: float,
    keep: npt.NDArray[np.bool_] | None,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """`_compress_many` one group at a time (weights that are not integers)."""
    from sketches.tdigest import _compress

    out_m, out_w, sizes = [], [], []
    for g in range(offsets.shape[0] - 1):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        if keep is not None and keep[g]:
            m, w = means[lo:hi].copy(), weights[lo:hi].copy()
        else:
            m, w = _compress(means[lo:hi], weights[lo:hi], compression)
        out_m.append(m)
        out_w.append(w)
        sizes.append(m.size)
    new_offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    return new_offsets, np.concatenate(out_m), np.concatenate(out_w)
