"""Digests (sketches/digests.py): many t-digests as columns give what TDigest gives, bit for bit.

Every check compares the columns with `TDigest` objects fed the same values: the object is the
reference, the columns are how the job computes at scale.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from sketches import TDigest
from sketches.digests import Digests, _by_group_then_value
from tests.unit.sketches.fixtures import fixed_width_bytes, version_4_head

Dist = Callable[[np.random.Generator, int], np.ndarray]

DISTS: dict[str, Dist] = {
    "lognormal": lambda rng, n: rng.lognormal(4, 1, n),
    "whole ms": lambda rng, n: np.round(rng.exponential(100, n)),
    "three values": lambda rng, n: rng.integers(0, 3, n).astype(float),
}
SHAPES = [(1, 5), (3, 1), (50, 3), (200, 17), (60, 300), (4, 30_000)]


def objects(values: np.ndarray, groups: np.ndarray, n: int) -> list[TDigest]:
    out = []
    for g in range(n):
        d = TDigest()
        mine = values[groups == g]
        if len(mine):
            d.update(mine)
        out.append(d)
    return out


def case(shape: tuple[int, int], dist: str, seed: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    n, per = shape
    groups = rng.integers(0, n, n * per)
    values = DISTS[dist](rng, n * per)
    values[rng.random(values.size) < 0.01] = np.nan  # absent latencies are counted, not added
    return values, groups, n


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_build_encode_and_quantiles_equal_the_objects(shape: tuple[int, int], dist: str) -> None:
    values, groups, n = case(shape, dist)
    columns = Digests.build(values, groups, n)
    expected = objects(values, groups, n)
    assert [columns.digest(i) for i in range(n)] == expected
    blobs = columns.encode()
    assert blobs == [d.to_bytes() for d in expected]
    decoded = Digests.decode(blobs)
    assert [decoded.digest(i) for i in range(n)] == expected
    qs = [0.0, 0.001, 0.5, 0.9, 0.99, 0.999, 1.0]
    got = columns.quantiles(qs)
    for i, d in enumerate(expected):
        want = d.quantile(np.array(qs)) if d.count else np.full(len(qs), np.nan)
        np.testing.assert_array_equal(got[i], want)


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_combine_with_shifts_equals_merged_objects(shape: tuple[int, int], dist: str) -> None:
    values, groups, n = case(shape, dist, seed=2)
    rng = np.random.default_rng(3)
    k = max(1, n // 3)
    keys = rng.integers(0, k, n)
    shifts = rng.choice([0.0, -1000.0, 250.5], n)
    got = Digests.build(values, groups, n).shifted(shifts).combine(keys, k)
    digests = objects(values, groups, n)
    for key in range(k):
        parts = [
            digests[i].shifted(shifts[i]) if shifts[i] else digests[i]
            for i in range(n)
            if keys[i] == key
        ]
        assert got.digest(key) == (TDigest.merged(parts) if parts else TDigest())


def test_combine_of_combined_digests_equals_merging_twice() -> None:
    values, groups, n = case((40, 500), "lognormal", seed=4)
    first = Digests.build(values, groups, n).combine(np.arange(n) // 4, n // 4)
    second = first.combine(np.arange(n // 4) // 2, n // 8)
    digests = objects(values, groups, n)
    for key in range(n // 8):
        halves = [TDigest.merged(digests[j * 4 : j * 4 + 4]) for j in (2 * key, 2 * key + 1)]
        assert second.digest(key) == TDigest.merged(halves)


def test_take_of_and_concat_keep_each_digest() -> None:
    values, groups, n = case((30, 50), "whole ms", seed=5)
    columns = Digests.build(values, groups, n)
    expected = objects(values, groups, n)
    rows = [5, 0, 5, 29, 3]
    assert [columns.take(rows).digest(i) for i in range(len(rows))] == [expected[r] for r in rows]
    again = Digests.concat([Digests.of(expected[:10]), Digests.of(expected[10:])])
    assert [again.digest(i) for i in range(n)] == expected


def test_bad_input_is_refused_with_the_objects_errors() -> None:
    with pytest.raises(ValueError, match="inf"):
        Digests.build(np.array([1.0, np.inf]), np.array([0, 1]), 2)
    blob = Digests.build(np.arange(10.0), np.zeros(10, int), 1).encode()[0]
    with pytest.raises(ValueError, match="expected"):
        Digests.decode([blob[:-1]])
    tampered = bytearray(blob)
    assert tampered[8] == 10  # the count, after the preamble, the flags and the compression
    tampered[8] = 11  # not the weights' sum

    with pytest.raises(ValueError, match="inconsistent"):
        Digests.decode([bytes(tampered)])
    with pytest.raises(ValueError, match="compressions"):
        Digests.of([TDigest(100), TDigest(200)])
    with pytest.raises(ValueError, match="one key per digest"):
        Digests.empty(3).combine([0, 1], 2)


def _one(values: np.ndarray) -> TDigest:
    d = TDigest()
    d.update(values)
    return d


def test_gap_varints_and_fixed_widths_decode_together_and_bad_varints_are_named() -> None:
    rng = np.random.default_rng(9)
    digests = [_one(np.round(rng.lognormal(4, 0.6, n), 3)) for n in (1, 30, 100, 400)]
    digests.append(_one(rng.integers(1_000, 1_200, 30).astype(float)))  # 1-byte offsets
    blobs = Digests.of(digests).encode()
    assert blobs == [d.to_bytes() for d in digests]
    top = digests[3].centroids[1].max()
    layouts = [(1, 3, 0), (0, 3, 0), (0, 3, 0), (8, 0, 1 if top < 256 else 2), (1, 0, 0)]
    for blob, d, layout in zip(blobs, digests, layouts, strict=True):  # 1 byte, gaps, f64 means
        assert blob.startswith(version_4_head(d, *layout))
    fixed = [fixed_width_bytes(d, 3) for d in digests[1:3]]  # as stored before gaps
    got = Digests.decode([*blobs, *fixed])
    assert [got.digest(i) for i in range(len(got))] == [*digests, *digests[1:3]]
    broken = bytearray(blobs[1])
    broken[-1] |= 0x80  # the last value never ends
    with pytest.raises(ValueError, match="varints"):
        Digests.decode([blobs[0], bytes(broken)])


def test_merging_small_digests_of_raw_values_equals_the_objects() -> None:
    rng = np.random.default_rng(8)
    n = 400
    groups = rng.integers(0, n, 3 * n)  # ~3 values a digest: every centroid a raw value
    values = np.round(rng.lognormal(3, 1, groups.size))
    keys = np.arange(n) // 8
    got = Digests.build(values, groups, n).combine(keys, n // 8)
    digests = objects(values, groups, n)
    for key in range(n // 8):
        assert got.digest(key) == TDigest.merged(digests[key * 8 : key * 8 + 8])


def test_digests_of_up_to_two_hundred_values_stay_exact_as_the_objects() -> None:
    """Groups of 120 to 280 values, built and then combined in pairs: those of at most 200
    values keep every value in both paths, the rest compress the same way."""
    rng = np.random.default_rng(9)
    sizes = rng.integers(60, 141, 40)
    groups = np.repeat(np.arange(40), sizes)
    values = np.round(rng.lognormal(3, 1, groups.size), 3)
    built = Digests.build(values, groups, 40)
    got = built.combine(np.arange(40) // 2, 20)
    digests = objects(values, groups, 40)
    for key in range(20):
        want = TDigest.merged(digests[2 * key : 2 * key + 2])
        assert got.digest(key) == want
        total = int(sizes[2 * key] + sizes[2 * key + 1])
        assert (len(want.centroids[0]) == total) == (total <= 200)
    assert got.encode() == [d.to_bytes() for d in (got.digest(k) for k in range(20))]


def test_a_key_of_many_rows_sums_them_in_row_order_as_the_objects() -> None:
    values, groups, n = case((300, 20), "lognormal", seed=9)
    keys = np.zeros(n, np.int64)  # one key of 300 rows: a `*` of every service
    keys[:7] = 1  # and a key of a few
    got = Digests.build(values, groups, n).combine(keys, 2)
    digests = objects(values, groups, n)
    assert got.digest(0) == TDigest.merged(digests[7:])
    assert got.digest(1) == TDigest.merged(digests[:7])


@pytest.mark.parametrize("weight", [1.0, 300.0, 70_000.0, 2.0**33, 0.5])
def test_encode_lays_out_every_weight_width_as_the_objects(weight: float) -> None:
    # an empty digest, one of a value, one of 50 centroids of the given weight (0.5 is not
    # whole: such digests are written one by one)
    objs = [TDigest(), TDigest(), TDigest()]
    objs[1].update(np.array([3.5]))
    objs[2].update(np.arange(50.0))
    digests = Digests.of(objs)
    last = slice(int(digests.offsets[2]), int(digests.offsets[3]))
    digests.weights[last] = weight
    digests.count[2] = int(digests.weights[last].sum())
    blobs = digests.encode()
    assert blobs == digests._encode_each()
    assert blobs == [digests.digest(i).to_bytes() for i in range(3)]
    assert [Digests.decode(blobs).digest(i).to_bytes() for i in range(3)] == blobs


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("in_runs", [False, True])
def test_the_group_then_value_order_is_lexsorts(seed: int, in_runs: bool) -> None:
    """The sort under `of` and `combine`: by group, then value, equal values in input order
    (which point of a tie goes first decides which centroid a weight joins). `combine`'s
    groups come in runs, often of hundreds of points (sorted a run at a time)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400)) * (10 if in_runs else 1)
    values = np.round(rng.normal(0, 3, n), int(rng.integers(0, 2)))  # many ties
    values[rng.random(n) < 0.05] = -0.0
    values[rng.random(n) < 0.02] = np.nan
    groups = rng.integers(0, int(rng.integers(1, 30)), n)
    if in_runs:
        groups.sort()
    want = np.lexsort((values, groups))
    assert _by_group_then_value(values, groups).tolist() == want.tolist()


def _with(values: list[float], **fields: float) -> TDigest:
    d = _one(np.array(values))
    for name, value in fields.items():
        setattr(d, f"_{name}", value)
    return d


def test_version_4_fields_that_need_an_f64_are_laid_out_as_the_objects() -> None:
    """Each header field the varints cannot say (flags 1, 2, 4, 8), alone and together."""
    rng = np.random.default_rng(3)
    digests = [
        _one(np.round(rng.lognormal(4, 0.6, 40), 3)),  # every field a varint
        TDigest(),  # empty: min and max f64
        _with([-0.0, 2.0], min=-0.0),  # a min its scale cannot give back (the sign)
        _with([1.5, 2.25], sum=1e9),  # a sum far from the centroids' own
        _with([1.5, 2.25], max=7.0),  # a max that is not the last mean
        _one(np.array([1e300, 1.7e308])),  # near the float max: no decimal scale
        _one(np.round(rng.lognormal(4, 0.6, 5_000), 3)),  # merged centroids: an f64 min
        _one(-np.round(rng.exponential(1e6, 50))),  # negative values
    ]
    blobs = Digests.of(digests).encode()
    assert blobs == [d.to_bytes() for d in digests]
    assert [b[5] for b in blobs] == [0, 12, 4, 2, 8, 4, 4, 4]  # the flags
    back = Digests.decode(blobs)
    assert [back.digest(i) for i in range(len(digests))] == digests
    odd = [_one(np.array([1.0, 2.0, 3.0]))]
    odd[0]._compression = 37.5
    blob = Digests.of(odd).encode()[0]
    assert blob == odd[0].to_bytes() and blob[5] == 1 and Digests.decode([blob]).digest(0) == odd[0]
