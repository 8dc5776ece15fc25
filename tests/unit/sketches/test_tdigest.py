"""TDigest (sketches/tdigest.py) as a value object: edge cases, exact stats, merging, bytes.

Accuracy on large data lives in tests/accuracy/test_tdigest_accuracy.py; these tests are fast.
"""

from __future__ import annotations

import math
import pickle
import struct

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sketches import TDigest
from sketches.tdigest import DEFAULT_COMPRESSION, FORMAT_VERSION
from tests.unit.sketches.fixtures import fixed_width_bytes, version_3_bytes, version_4_head

QS = np.linspace(0.0, 1.0, 101)


def digest_of(values: object, compression: float = DEFAULT_COMPRESSION) -> TDigest:
    d = TDigest(compression)
    d.update(values)
    return d


def rank_error(sorted_data: np.ndarray, estimates: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """|F(estimate) - q|, zero when q falls anywhere within the estimate's rank range."""
    n = sorted_data.shape[0]
    lo = np.searchsorted(sorted_data, estimates, "left") / n
    hi = np.searchsorted(sorted_data, estimates, "right") / n
    return np.maximum(np.maximum(lo - qs, qs - hi), 0.0)


# --- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [0, 9.9, -1, math.nan, math.inf, 2e6])
def test_compression_out_of_range_is_refused(compression: float) -> None:
    with pytest.raises(ValueError, match="compression"):
        TDigest(compression)


def test_default_compression() -> None:
    assert TDigest().compression == DEFAULT_COMPRESSION == 200.0


# --- empty, one value, two values, all equal ---------------------------------------------------


def test_empty_digest() -> None:
    d = TDigest()
    assert (d.count, d.nan_count, d.sum, len(d)) == (0, 0, 0.0, 0)
    assert math.isnan(d.min) and math.isnan(d.max) and math.isnan(d.mean)
    assert math.isnan(d.quantile(0.5))
    assert np.isnan(d.quantile([0.0, 1.0])).all()
    assert math.isnan(d.cdf(0.0))
    assert np.isnan(d.cdf(np.array([1.0, 2.0]))).all()
    assert "count=0" in repr(d)


@pytest.mark.parametrize("batch", [[], np.array([]), np.empty((0, 3))])
def test_empty_batch_changes_nothing(batch: object) -> None:
    d = digest_of([1.0, 2.0])
    before = d.copy()
    d.update(batch)
    assert d == before


def test_single_value() -> None:
    d = digest_of([7.5])
    assert (d.count, d.sum, d.min, d.max, d.mean, len(d)) == (1, 7.5, 7.5, 7.5, 7.5, 1)
    np.testing.assert_array_equal(d.quantile(QS), np.full(QS.shape, 7.5))
    assert d.cdf(7.4) == 0.0
    assert d.cdf(7.5) == 1.0


def test_two_values() -> None:
    d = digest_of([2.0, 1.0])
    assert (d.min, d.max, d.sum, len(d)) == (1.0, 2.0, 3.0, 2)
    # Inverse-CDF convention: F(1) = 0.5, so q <= 0.5 gives 1 and q > 0.5 gives 2.
    assert d.quantile(0.0) == 1.0
    assert d.quantile(0.25) == 1.0
    assert d.quantile(0.5) == 1.0
    assert d.quantile(0.75) == 2.0
    assert d.quantile(1.0) == 2.0
    #     1.0       2.0
    # 0 --x---------x-- 1     CDF steps: 0 below 1, 1/2 from 1, 1 from 2
    np.testing.assert_array_equal(d.cdf([0.5, 1.0, 1.5, 2.0, 3.0]), [0.0, 0.5, 0.5, 1.0, 1.0])


def test_small_inputs_are_kept_exactly() -> None:
    # Up to `compression` values a digest keeps each one: 200 with the default compression.
    for n in (25, 100, 200):
        values = np.arange(float(n))
        d = digest_of(values)
        means, weights = d.centroids
        np.testing.assert_array_equal(means, values)
        np.testing.assert_array_equal(weights, np.ones(n))
    assert len(digest_of(np.arange(201.0)).centroids[0]) < 201  # then it compresses


def test_a_digest_stays_its_values_through_batches_and_merges_up_to_two_hundred() -> None:
    rng = np.random.default_rng(5)
    values = np.round(rng.lognormal(4, 0.6, 200), 3)  # latencies to the µs
    fed = TDigest()
    for part in np.array_split(values, 7):
        fed.update(part)
    parts = [digest_of(p) for p in np.array_split(values, 4)]
    for d in (fed, TDigest.merged(parts)):
        np.testing.assert_array_equal(d.centroids[0], np.sort(values))
        assert d.quantile(0.99) == pytest.approx(float(np.quantile(values, 0.99)), rel=0.02)
        data = d.to_bytes()
        head = version_4_head(d, 0, 3, 0)  # the values at the µs, no weights
        assert data.startswith(head) and len(data) == len(head) + _gap_bytes(values, 3)
        assert TDigest.from_bytes(data) == d
    wide = TDigest.merged([*parts, digest_of(values[:1])])  # 201 values: compressed
    assert len(wide.centroids[0]) < 201


@pytest.mark.parametrize("n", [2, 10, 1000, 100_000])
def test_all_equal_values(n: int) -> None:
    d = digest_of(np.full(n, 3.25))
    np.testing.assert_array_equal(d.quantile(QS), np.full(QS.shape, 3.25))
    np.testing.assert_array_equal(d.cdf([3.0, np.nextafter(3.25, 0.0), 3.25, 4.0]), [0, 0, 1, 1])
    assert (d.count, d.min, d.max, d.mean) == (n, 3.25, 3.25, 3.25)


# --- exact statistics --------------------------------------------------------------------------


def test_count_sum_min_max_are_exact_through_updates_and_merges() -> None:
    rng = np.random.default_rng(1)
    chunks = [rng.integers(-1000, 1000, size=s).astype(np.float64) for s in (1, 500, 20_000, 3)]
    digests = [digest_of(c) for c in chunks]
    everything = np.concatenate(chunks)

    merged = TDigest.merged(digests)
    in_place = TDigest()
    in_place.merge(*digests)
    fed = TDigest()
    for c in chunks:
        fed.update(c)

    for d in (merged, in_place, fed):
        assert d.count == everything.size
        assert d.sum == float(everything.sum())  # integers: float64 sums are exact
        assert d.min == everything.min()
        assert d.max == everything.max()
        assert d.mean == pytest.approx(everything.mean(), rel=1e-15)
        assert float(np.sum(d.centroids[1])) == d.count


# --- merging -----------------------------------------------------------------------------------


def test_merge_is_order_insensitive_within_tolerance() -> None:
    rng = np.random.default_rng(2)
    data = rng.lognormal(0.0, 1.0, 60_000)
    a, b, c = (digest_of(part) for part in np.split(data, 3))
    orders = [(a, b, c), (c, b, a), (b, a, c)]
    results = [TDigest.merged(order) for order in orders]
    pairwise = a.copy()
    pairwise.merge(b)
    pairwise.merge(c)
    results.append(pairwise)

    truth = np.sort(data)
    qs = np.array([0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999])
    estimates = [r.quantile(qs) for r in results]
    for est in estimates:
        assert rank_error(truth, est, qs).max() < 0.002
    spread = rank_error(truth, estimates[0], qs) - rank_error(truth, estimates[1], qs)
    assert np.abs(spread).max() < 0.002
    for r in results:
        assert r.count == data.size
        assert r.sum == pytest.approx(data.sum(), rel=1e-12)  # float sums depend on order


def test_merge_leaves_others_unchanged() -> None:
    a, b = digest_of(np.arange(1000.0)), digest_of(np.arange(500.0, 3000.0))
    b_before = b.copy()
    a.merge(b)
    assert b == b_before
    assert a.count == 3500


def test_merge_nothing_is_a_no_op() -> None:
    d = digest_of(np.random.default_rng(3).random(10_000))
    before = d.copy()
    d.merge()
    assert d == before


def test_merge_with_empty_digests() -> None:
    d = digest_of([1.0, 2.0, 3.0])
    before = d.copy()
    d.merge(TDigest(), TDigest())
    assert d == before
    assert TDigest.merged([TDigest(), TDigest()]) == TDigest()
    assert TDigest.merged([]) == TDigest()


def test_merge_refuses_other_compression() -> None:
    d = TDigest(200)
    with pytest.raises(ValueError, match="compression 100 into one with compression 200"):
        d.merge(TDigest(100))
    with pytest.raises(ValueError, match="compression"):
        TDigest.merged([TDigest(200), TDigest(300)])


def test_merge_refuses_non_digest() -> None:
    with pytest.raises(TypeError, match="TDigest"):
        TDigest().merge([1.0, 2.0])  # type: ignore[arg-type]


def test_merged_does_not_mutate_inputs() -> None:
    parts = [digest_of(np.arange(i, i + 100.0)) for i in range(5)]
    snapshots = [p.copy() for p in parts]
    TDigest.merged(parts)
    assert parts == snapshots


# --- bytes, pickle, copy, equality -------------------------------------------------------------


def test_to_bytes_round_trip_is_exact() -> None:
    d = TDigest(150)
    d.update(np.random.default_rng(4).exponential(size=50_000))
    d.update([math.nan])
    data = d.to_bytes()
    back = TDigest.from_bytes(data)
    assert back == d
    assert (back.count, back.nan_count, back.sum, back.min, back.max, back.compression) == (
        d.count,
        d.nan_count,
        d.sum,
        d.min,
        d.max,
        d.compression,
    )
    np.testing.assert_array_equal(back.centroids[0], d.centroids[0])
    np.testing.assert_array_equal(back.centroids[1], d.centroids[1])
    width = next(w for w in (1, 2, 4) if d.centroids[1].max() < 256**w)  # weights are counts
    head = version_4_head(d, 8, 0, width)  # means of merged values: f64
    assert data.startswith(head) and len(data) == len(head) + (8 + width) * len(d)
    assert len(head) <= 5 + 12 + 8  # the min as an f64: no decimal scale holds the means
    assert data[:4] == b"TDGT" and data[4] == FORMAT_VERSION == 4
    assert back.to_bytes() == data


def _gap_bytes(values: object, exponent: int) -> int:
    """LEB128 bytes of the gaps between sorted values at 10^exponent (7 bits a byte)."""
    scaled = np.sort(np.rint(np.asarray(values, float) * 10.0**exponent).astype(np.int64))
    gaps = np.diff(scaled, prepend=scaled[0])
    return sum(max(1, -(-int(g).bit_length() // 7)) for g in gaps)


_LATENCIES = np.round(np.random.default_rng(1).lognormal(4, 0.6, 30), 3)
_LATENESSES = np.random.default_rng(2).integers(-20, 5_000, 30).astype(float)
_CLOSE = np.random.default_rng(3).integers(1_000, 1_200, 30).astype(float)


@pytest.mark.parametrize(
    ("values", "layout", "size"),
    [
        # 30 latencies to the µs (the generator's, OpenTelemetry's): the gaps between the sorted
        # values as varints (mostly 2 bytes) instead of 4-byte offsets, unit weights
        (_LATENCIES, (0, 3, 0), _gap_bytes(_LATENCIES, 3)),
        # 30 latenesses in whole ms up to 5 s: the gaps (mostly one byte), not 2-byte offsets
        (_LATENESSES, (0, 0, 0), _gap_bytes(_LATENESSES, 0)),
        # within 255 ms of each other: 1-byte offsets, which no varint beats
        (_CLOSE, (1, 0, 0), 30),
        # no decimal scale holds them: f64
        (np.random.default_rng(4).lognormal(4, 0.6, 30), (8, 0, 0), 8 * 30),
        ([], (1, 0, 0), 0),
    ],
)
def test_a_small_digest_takes_the_bytes_its_values_need(
    values: list[float], layout: tuple[int, int, int], size: int
) -> None:
    d = digest_of(values)
    data = d.to_bytes()
    head = version_4_head(d, *layout)
    assert data.startswith(head) and len(data) == len(head) + size
    if len(values) and layout[0] != 8:  # the min a varint, the max the last value
        assert len(head) <= 5 + 12
    back = TDigest.from_bytes(data)
    assert back == d and back.to_bytes() == data
    np.testing.assert_array_equal(back.centroids[0], d.centroids[0])  # bit for bit


@pytest.mark.parametrize("seed", range(8))
def test_merged_digests_of_rounded_values_round_trip_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = [digest_of(np.round(rng.lognormal(4, 1, rng.integers(1, 400)), 3)) for _ in range(6)]
    parts.append(digest_of(-np.round(rng.exponential(1e6, 50))))  # negatives, large values
    d = TDigest.merged(parts)
    back = TDigest.from_bytes(d.to_bytes())
    assert back == d
    np.testing.assert_array_equal(back.centroids[0], d.centroids[0])


def _v2_bytes(d: TDigest) -> bytes:
    """`d` in format version 2 (f64 means, u8 weight width), as stores written before hold."""
    means, weights = d.centroids
    head = struct.pack("<4sBdQQdddI", b"TDGT", 2, d.compression, d.count, d.nan_count, d.sum,
                       d._min, d._max, len(means))  # fmt: skip
    return head + means.astype("<f8").tobytes() + b"\x04" + weights.astype("<u4").tobytes()


def test_version_2_is_still_read() -> None:
    d = digest_of(np.random.default_rng(6).normal(size=3_000))
    assert TDigest.from_bytes(_v2_bytes(d)) == d
    assert TDigest.from_bytes(_v2_bytes(TDigest())) == TDigest()


def test_version_3_is_still_read() -> None:
    d = digest_of(_LATENCIES)
    for old in (fixed_width_bytes(d, 3), version_3_bytes(d, 3)):
        assert len(old) >= 46 + _gap_bytes(_LATENCIES, 3) > len(d.to_bytes())
        assert TDigest.from_bytes(old) == d
        assert TDigest.from_bytes(old).to_bytes() == d.to_bytes()  # written again: version 4


def test_bad_gap_varints_are_refused() -> None:
    d = digest_of(_LATENCIES)
    data, head = d.to_bytes(), version_4_head(d, 0, 3, 0)
    with pytest.raises(ValueError, match="varints"):
        TDigest.from_bytes(data[:-1])  # the last value cut short
    with pytest.raises(ValueError, match="do not fit"):
        TDigest.from_bytes(data[: len(head) + 1])  # fewer bytes than values


def test_a_digest_too_large_for_varints_is_written_as_version_2() -> None:
    d = digest_of([1.0, 2.0])
    d._count, d._weights = 2**35 + 1, np.array([1.0, 2.0**35])
    data = d.to_bytes()
    assert data[4] == 2 and TDigest.from_bytes(data) == d


@pytest.mark.parametrize("compression", [37.5, 100.25])
def test_a_compression_no_varint_holds_is_an_f64(compression: float) -> None:
    d = digest_of(_LATENCIES, compression)
    data = d.to_bytes()
    assert data.startswith(version_4_head(d, 0, 3, 0)) and data[5] & 1
    assert TDigest.from_bytes(data) == d


def test_empty_round_trip() -> None:
    assert TDigest.from_bytes(TDigest().to_bytes()) == TDigest()
    assert TDigest.from_bytes(bytearray(TDigest(50).to_bytes())).compression == 50


def _valid() -> bytes:
    return fixed_width_bytes(digest_of([1.0, 2.0, 3.0]), 0)


def _with_header(**fields: float) -> bytes:
    """A valid version-3 encoding of [1, 2, 3] with some header fields replaced."""
    data = _valid()
    names = ("magic", "version", "compression", "count", "nan_count", "n", "sum", "min", "max")
    names += ("mean_width", "exponent", "weight_width")
    header = struct.Struct("<4sBfIIHdddBbB")
    values = dict(zip(names, header.unpack_from(data), strict=True))
    values.update(fields)
    return header.pack(*values.values()) + data[header.size :]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "shorter than"),
        (b"TDGT\x01", "shorter than"),
        (b"\x00" * 200, "bad magic"),
        (b"JUNK" + _valid()[4:], "bad magic"),
        (_valid()[:4] + b"\x09" + _valid()[5:], "version 9"),
        (_valid()[:-1], "expected"),
        (_valid() + b"\x00", "expected"),
        (_with_header(n=4), "expected"),
        (_with_header(weight_width=3), "bad widths"),
        (_with_header(mean_width=3), "bad widths"),
        (_with_header(exponent=9), "bad exponent"),
        (_with_header(count=4), "inconsistent"),
        (_with_header(min=1.5), "inconsistent"),
        (_with_header(compression=1.0), "compression"),
    ],
)
def test_from_bytes_rejects_garbage(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TDigest.from_bytes(data)


def _v4(head: bytes, body: bytes = b"") -> bytes:
    return b"TDGT\x04" + head + body


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"TDGT\x04", "header: varints: truncated"),
        (_v4(bytes([0, 200, 1, 3, 0, 3])), "header: varints: truncated"),  # no layout
        (_v4(bytes([16, 200, 1, 3, 0, 3, 0, 0])), "bad flags 16"),
        (_v4(bytes([0, 200, 1, 3, 0, 3, 0x28, 0, 1]), b"\x01\x01\x01"), "bad layout"),
        (_v4(bytes([0, 200, 1, 3, 0, 3, 0x20, 0, 1]), b"\x00" * 24), "integer means"),
        (_v4(bytes([0, 200, 1, 0, 0, 0, 0, 0, 1])), "no centroid"),
        (_v4(bytes([12, 200, 1, 3, 0, 3, 0, 0])), "shorter than the header"),
        (_v4(bytes([0, 200, 1, 3, 0, 3, 0, 0, 1]), b"\x00\x01"), "do not fit"),
        (_v4(bytes([0, 200, 1, 3, 0, 3, 0, 0, 1]), b"\x00\x01\x01\x00"), "varints"),
        (_v4(bytes([0, 200, 1, 4, 0, 3, 0, 0, 1]), b"\x00\x01\x01"), "inconsistent"),
    ],
)
def test_a_bad_version_4_header_is_refused(data: bytes, message: str) -> None:
    assert TDigest.from_bytes(_v4(bytes([0, 200, 1, 3, 0, 3, 0, 0, 1]), b"\x00\x01\x01")) == (
        digest_of([1.0, 2.0, 3.0])
    )  # the header they break, which reads: [1, 2, 3] in whole ms
    with pytest.raises(ValueError, match=message):
        TDigest.from_bytes(data)


def test_pickle_round_trip() -> None:
    d = digest_of(np.random.default_rng(5).normal(size=5_000))
    assert pickle.loads(pickle.dumps(d)) == d


def test_copy_is_independent() -> None:
    d = digest_of(np.arange(100.0))
    c = d.copy()
    assert c == d and c is not d
    c.update([1e6])
    assert c != d
    assert d.max == 99.0


def test_equality_is_structural_and_digests_are_unhashable() -> None:
    assert digest_of([1.0, 2.0]) == digest_of([2.0, 1.0])
    assert digest_of([1.0, 2.0]) != digest_of([1.0, 3.0])
    assert TDigest(100) != TDigest(200)
    assert TDigest() != "TDigest()"
    with pytest.raises(TypeError):
        hash(TDigest())


def test_centroids_are_read_only_views() -> None:
    means, _ = digest_of([1.0, 2.0]).centroids
    with pytest.raises(ValueError):
        means[0] = 5.0


# --- input validation and NaN policy -----------------------------------------------------------


@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_infinity_is_rejected_and_nothing_changes(bad: float) -> None:
    d = digest_of([1.0, 2.0])
    before = d.copy()
    with pytest.raises(ValueError, match="inf"):
        d.update([3.0, bad, math.nan])
    assert d == before


def test_nan_is_skipped_and_counted() -> None:
    d = digest_of([1.0, math.nan, 2.0, math.nan])
    assert (d.count, d.nan_count, d.sum, d.min, d.max) == (2, 2, 3.0, 1.0, 2.0)
    d.update([math.nan])
    assert (d.count, d.nan_count, len(d)) == (2, 3, 2)
    other = digest_of([math.nan])
    assert (other.count, other.nan_count, len(other)) == (0, 1, 0)
    assert TDigest.merged([d, other]).nan_count == 4
    assert TDigest.from_bytes(d.to_bytes()).nan_count == 3


@pytest.mark.parametrize(
    "values",
    [
        np.arange(10, dtype=np.int64),
        np.arange(10, dtype=np.int32),
        np.arange(10, dtype=np.float32),
        list(range(10)),
        pa.array(np.arange(10.0)),
        pa.array(list(range(10)), type=pa.int64()),
        pa.chunked_array([list(range(5)), list(range(5, 10))]),
        np.arange(10.0).reshape(2, 5),
        pd.Series(range(10)),
    ],
    ids=[
        "int64",
        "int32",
        "float32",
        "list",
        "arrow-f64",
        "arrow-i64",
        "arrow-chunked",
        "2d",
        "pandas",
    ],
)
def test_input_types(values: object) -> None:
    d = digest_of(values)
    assert (d.count, d.sum, d.min, d.max) == (10, 45.0, 0.0, 9.0)
    assert d == digest_of(np.arange(10.0))


def test_float32_values_are_taken_exactly() -> None:
    values = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    d = digest_of(values)
    assert d.min == float(values[0]) and d.max == float(values[2])


def test_scalar_input() -> None:
    d = TDigest()
    d.update(3)
    d.update(4.5)
    assert (d.count, d.sum) == (2, 7.5)


@pytest.mark.parametrize(
    "values",
    [pa.array([1.0, None, 3.0]), pa.array([1, None, 3]), pd.Series([1, None, 3], dtype="Int64")],
    ids=["arrow-f64", "arrow-i64", "pandas-Int64"],
)
def test_nulls_follow_the_nan_policy(values: object) -> None:
    d = digest_of(values)
    assert (d.count, d.nan_count, d.sum) == (2, 1, 4.0)


def test_non_numeric_input_is_refused() -> None:
    with pytest.raises((ValueError, TypeError)):
        TDigest().update(["a", "b"])


def test_values_near_float_max_do_not_overflow_means() -> None:
    d = TDigest()
    with np.errstate(over="ignore", invalid="ignore"):
        d.update(np.tile([-1.7e308, 1.0e308, 1.7e308], 2000))
    means, _ = d.centroids
    assert np.isfinite(means).all()
    assert d.quantile(0.0) == -1.7e308 and d.quantile(1.0) == 1.7e308
    assert TDigest.from_bytes(d.to_bytes()) == d


# --- quantile and cdf shape --------------------------------------------------------------------


@pytest.fixture(scope="module")
def skewed() -> TDigest:
    d = TDigest()
    rng = np.random.default_rng(6)
    for _ in range(10):
        d.update(rng.lognormal(0.0, 1.5, 10_000))
    return d


def test_quantile_is_monotone_and_hits_min_and_max(skewed: TDigest) -> None:
    qs = np.linspace(0.0, 1.0, 10_001)
    est = skewed.quantile(qs)
    assert np.all(np.diff(est) >= 0)
    assert skewed.quantile(0.0) == skewed.min
    assert skewed.quantile(1.0) == skewed.max
    assert est[0] == skewed.min and est[-1] == skewed.max
    assert isinstance(skewed.quantile(0.5), float)
    assert skewed.quantile(np.array([[0.1, 0.2]])).shape == (1, 2)


def test_cdf_is_monotone_and_pinned_at_the_ends(skewed: TDigest) -> None:
    xs = np.geomspace(skewed.min, skewed.max, 5_000)
    f = skewed.cdf(xs)
    assert np.all(np.diff(f) >= 0)
    assert np.all((f >= 0) & (f <= 1))
    assert skewed.cdf(skewed.min - 1) == 0.0
    assert skewed.cdf(skewed.max) == 1.0
    assert skewed.cdf(-math.inf) == 0.0 and skewed.cdf(math.inf) == 1.0
    assert math.isnan(skewed.cdf(math.nan))
    assert isinstance(skewed.cdf(1.0), float)


def test_cdf_inverts_quantile(skewed: TDigest) -> None:
    qs = np.linspace(0.01, 0.99, 99)
    np.testing.assert_allclose(skewed.cdf(skewed.quantile(qs)), qs, atol=1e-9)


@pytest.mark.parametrize("q", [-0.1, 1.1, math.nan])
def test_quantile_outside_unit_interval_is_refused(skewed: TDigest, q: float) -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        skewed.quantile(q)


# --- size --------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [50.0, 100.0, 200.0, 333.0])
def test_centroid_count_is_bounded_after_a_million_values(compression: float) -> None:
    rng = np.random.default_rng(7)
    d = TDigest(compression)
    for _ in range(100):
        d.update(rng.pareto(1.5, 10_000))
    bound = 2 * math.ceil(compression / 2) + 1
    assert len(d) <= bound
    # In practice about compression / 2 (200 -> ~100 centroids, ~1.6 kB serialised).
    assert len(d) <= 0.6 * compression + 5
    single_shot = digest_of(rng.pareto(1.5, 1_000_000), compression)
    assert len(single_shot) <= 0.6 * compression + 5
    merged = TDigest.merged([d, single_shot])
    assert len(merged) <= bound


# --- shifted -----------------------------------------------------------------------------------
#
#   original:   --x--x----x-------x-->        values v
#   shifted(d): ------x--x----x-------x-->    values v + d: same ranks, same weights
#
# The job re-bases "frontier - pane end" onto "frontier - window end" this way, so the shift must
# keep every rank and every exact statistic.

SMALL = np.array([0.0, 3.0, 3.0, 7.0, 12.0, 12.0, 12.0, 40.0, 41.0, 100.0])  # kept exactly


@pytest.mark.parametrize("delta", [0, 1, -1, 17, -40, 1_000_000, -1_795_341_600_000])
def test_shifted_small_digest_is_the_digest_of_the_shifted_values(delta: int) -> None:
    # Integer values and integer shifts are exact in float64, so the shifted digest is exactly
    # the digest one would have built from the shifted values.
    d = digest_of(SMALL)
    s = d.shifted(delta)
    assert s == digest_of(SMALL + delta)
    np.testing.assert_array_equal(s.quantile(QS), d.quantile(QS) + delta)
    xs = np.arange(-5.0, 106.0, 0.5)
    np.testing.assert_array_equal(s.cdf(xs + delta), d.cdf(xs))


@pytest.mark.parametrize("delta", [0.0, 0.25, -3.5, 12_345.0, -1e6])
def test_shifted_large_digest_moves_quantiles_and_keeps_ranks(delta: float) -> None:
    rng = np.random.default_rng(3)
    d = TDigest()
    for _ in range(5):
        d.update(rng.lognormal(3.0, 1.2, 20_000))
    s = d.shifted(delta)
    means, weights = d.centroids
    s_means, s_weights = s.centroids
    np.testing.assert_array_equal(s_weights, weights)  # ranks untouched
    np.testing.assert_array_equal(s_means, means + delta)
    np.testing.assert_allclose(s.quantile(QS), d.quantile(QS) + delta, rtol=0, atol=1e-9)
    xs = d.quantile(np.linspace(0.0005, 0.9995, 400))
    np.testing.assert_allclose(s.cdf(xs + delta), d.cdf(xs), rtol=0, atol=1e-9)
    # the ends stay pinned: 0 below min, 1 from max
    assert s.cdf(d.min + delta - 1e-3) == 0.0 and s.cdf(d.max + delta) == 1.0


@pytest.mark.parametrize("delta", [0, 5, -5, 0.5, -1e9])
def test_shifted_statistics(delta: float) -> None:
    d = digest_of([1.0, 2.0, 4.0, np.nan, 8.0, 100.0])
    s = d.shifted(delta)
    assert (s.count, s.nan_count, s.compression, len(s)) == (
        d.count,
        d.nan_count,
        d.compression,
        len(d),
    )
    assert (s.min, s.max) == (d.min + delta, d.max + delta)
    assert s.sum == d.sum + delta * d.count
    assert s.mean == pytest.approx(d.mean + delta, abs=1e-9)
    assert s.quantile(0.0) == s.min and s.quantile(1.0) == s.max


def test_shifted_keeps_the_compression() -> None:
    d = digest_of(np.arange(1000.0), compression=50)
    s = d.shifted(10)
    assert s.compression == 50
    d.merge(s)  # still compatible


@pytest.mark.parametrize("delta", [0, 3, -7.5])
def test_shifted_empty_digest_stays_empty(delta: float) -> None:
    for d in (TDigest(), digest_of([np.nan, np.nan]), TDigest(80)):
        s = d.shifted(delta)
        assert s == d
        assert s.count == 0 and len(s) == 0 and s.sum == 0.0
        assert math.isnan(s.min) and math.isnan(s.max) and math.isnan(s.mean)
        assert math.isnan(s.quantile(0.5))
        assert s.nan_count == d.nan_count


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, np.float64("nan")])
def test_shifted_refuses_a_non_finite_shift(bad: float) -> None:
    d = digest_of(SMALL)
    before = d.to_bytes()
    with pytest.raises(ValueError, match="finite"):
        d.shifted(bad)
    with pytest.raises(ValueError, match="finite"):
        TDigest().shifted(bad)
    assert d.to_bytes() == before


def test_shifted_leaves_the_original_unchanged_and_shares_nothing() -> None:
    rng = np.random.default_rng(4)
    d = digest_of(rng.normal(0.0, 1.0, 5_000))
    before = d.copy()
    s = d.shifted(2.5)
    assert d == before
    s.update(rng.normal(0.0, 1.0, 5_000))  # the copy is independent
    s.merge(digest_of([1.0]))
    assert d == before
    assert d.shifted(0) == d and d.shifted(0) is not d


def test_shifted_round_trips_through_bytes_and_pickle() -> None:
    rng = np.random.default_rng(5)
    for d in (digest_of(SMALL), digest_of(rng.exponential(50.0, 30_000)), TDigest()):
        for delta in (0, -123, 0.125, 1e7):
            s = d.shifted(delta)
            blob = s.to_bytes()
            assert TDigest.from_bytes(blob) == s
            assert TDigest.from_bytes(blob).to_bytes() == blob
            assert pickle.loads(pickle.dumps(s)) == s


def test_shifts_compose_and_undo() -> None:
    d = digest_of(SMALL)
    assert d.shifted(10).shifted(-3) == d.shifted(7)
    assert d.shifted(-30).shifted(30) == d
    # shift then merge == merge then shift (exact for digests that keep every value)
    a, b = digest_of(SMALL), digest_of([5.0, 6.0, 50.0])
    assert TDigest.merged([a.shifted(4), b.shifted(4)]) == TDigest.merged([a, b]).shifted(4)


def test_version_1_encodings_are_still_read() -> None:
    """Digests stored before the narrow weights (version 1: weights as f64) read back equal."""
    d = TDigest(150)
    d.update(np.random.default_rng(5).lognormal(3, 1, size=20_000))
    means, weights = d.centroids
    v2 = _v2_bytes(d)
    header = struct.Struct("<4sBdQQdddI")
    fields = list(header.unpack_from(v2))
    fields[1] = 1
    v1 = header.pack(*fields) + means.astype("<f8").tobytes() + weights.astype("<f8").tobytes()
    assert TDigest.from_bytes(v1) == d
    assert len(d.to_bytes()) < 0.8 * len(v1)
