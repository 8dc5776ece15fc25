"""HyperLogLog accuracy against exact distinct counts (sketches/hll.py).

Tolerance: relative error <= 3 x 1.04 / sqrt(2^p) (three standard errors; 2.44 % at p = 14).
Inputs are distinct strings ``user-<i>`` built by Arrow compute, so 10^7 of them take ~2 s; the
hash is deterministic, so every check here is one fixed draw that passes or fails forever.
Whole module: ~8 s on the 2-core CI machine (most of it building and hashing 10^7 strings).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sketches.hll import HyperLogLog


def bound(p: int) -> float:
    return 3 * 1.04 / math.sqrt(2**p)


def ids(start: int, stop: int) -> pa.Array:
    """Distinct user ids ``user-<i>`` for i in [start, stop), without a Python loop."""
    numbers = pc.cast(pa.array(np.arange(start, stop, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(pa.scalar("user-"), numbers, "")


@cache
def universe() -> pa.Array:
    return ids(0, 10**7)


def rel_error(estimate: float, exact: int) -> float:
    return estimate / exact - 1.0


@pytest.mark.parametrize("n", [10**2, 10**3, 10**4, 10**5, 10**6, 10**7])
def test_count_within_three_standard_errors_at_p14(n: int) -> None:
    values = universe().slice(0, n)
    s = HyperLogLog(14)
    s.update(values)
    assert abs(rel_error(s.count(), n)) <= bound(14)
    assert abs(rel_error(s.estimate(), n)) <= bound(14)
    # Duplicates (a reversed half, again) must not move the registers, hence the estimate.
    before = s.copy()
    s.update(pc.take(values, pa.array(np.arange(n // 2)[::-1])))
    assert s == before
    again = HyperLogLog(14)
    again.update(pa.chunked_array([values, values.slice(0, n // 3)]))
    assert again == s


@pytest.mark.parametrize("p", [10, 12, 16])
@pytest.mark.parametrize("n", [10**3, 10**4, 10**5, 10**6])
def test_other_precisions_within_their_bound(p: int, n: int) -> None:
    s = HyperLogLog(p)
    s.update(universe().slice(0, n))
    assert abs(rel_error(s.count(), n)) <= bound(p)
    assert abs(rel_error(s.estimate(), n)) <= bound(p)


def test_estimate_within_bound_on_a_dense_sweep_including_the_transition() -> None:
    """80 cardinalities 10^2..10^7, one growing sketch; the classic count() is only checked
    away from ~2.5 m, where it switches estimator and is biased (documented)."""
    m = 2**14
    s, seen = HyperLogLog(14), 0
    for n in np.unique(np.logspace(2, 7, 80).astype(np.int64)).tolist():
        s.update(universe().slice(seen, n - seen))
        seen = n
        assert abs(rel_error(s.estimate(), n)) <= bound(14), n
        if not 2 * m <= n <= 3 * m:
            assert abs(rel_error(s.count(), n)) <= bound(14), n


def test_merge_of_20_partitions_matches_the_exact_union() -> None:
    """20 parts of 0..2e6 as windows x partitions produce them: disjoint runs, runs that overlap
    their neighbours, a part contained in another, and a repeated part."""
    rng = np.random.default_rng(20)
    step = 100_000
    ranges: list[tuple[int, int]] = []
    for j in range(17):
        lo, hi = j * step, (j + 1) * step
        if j % 2:  # odd parts overlap both neighbours
            lo, hi = lo - int(rng.integers(1, 30_000)), hi + int(rng.integers(1, 30_000))
        ranges.append((lo, hi))
    ranges.append((250_000, 260_000))  # inside part 2
    ranges.append(ranges[5])  # the same part twice (a replayed batch)
    ranges.append((1_900_000, 2_150_000))  # past everything else
    covered = np.zeros(2_200_000, dtype=bool)
    sketches = []
    for lo, hi in ranges:
        covered[lo:hi] = True
        part = HyperLogLog(14)
        part.update(ids(lo, hi))
        sketches.append(part)
    exact = int(covered.sum())

    merged = HyperLogLog.merged(sketches)
    assert abs(rel_error(merged.count(), exact)) <= bound(14)
    assert abs(rel_error(merged.estimate(), exact)) <= bound(14)
    # Exactly the sketch of the union itself, whatever the merge order or grouping.
    whole = HyperLogLog(14)
    whole.update(ids(0, 2_200_000).filter(pa.array(covered)))
    assert merged == whole
    order = rng.permutation(len(sketches))
    halves = [
        HyperLogLog.merged([sketches[i] for i in order[:7]]),
        HyperLogLog.merged([sketches[i] for i in order[7:]]),
    ]
    assert HyperLogLog.merged(halves) == merged
    # ... and after a trip through bytes, as windows are stored in Redis.
    assert HyperLogLog.merged(HyperLogLog.from_bytes(s.to_bytes()) for s in sketches) == merged
