"""Freshness per batch (tidegauge/core/freshness.py): broker-time histograms merged, by rank."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidegauge.core.freshness import encode_times, freshness, merge_times

pytestmark = pytest.mark.unit


def _nearest_rank(values: list[int], q: float) -> int:
    return sorted(values)[max(1, math.ceil(q * len(values))) - 1]


@pytest.mark.parametrize("seed", range(20))
def test_merged_groups_give_the_exact_percentiles_of_all_records(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5_000))
    times = 1_700_000_000_000 + rng.integers(0, int(rng.choice([1, 50, 5_000, 600_000])), n)
    groups = np.array_split(rng.permutation(times), int(rng.integers(1, 6)))
    commit = int(times.max()) + int(rng.integers(0, 3_000))
    got = freshness(merge_times(encode_times(g) for g in groups), commit, batch_id=seed)
    ages = [commit - int(t) for t in times]
    assert got is not None
    assert (got.records, got.p50_ms, got.p99_ms, got.max_ms) == (
        n,
        _nearest_rank(ages, 0.5),
        _nearest_rank(ages, 0.99),
        max(ages),
    )
    assert got.commit_time == commit and got.batch_id == seed


def test_records_without_a_broker_time_are_not_counted() -> None:
    got = freshness(merge_times([encode_times([np.nan, 1_000.0, None])]), 1_500, batch_id=1)
    assert got is not None and got.records == 1 and got.max_ms == 500


def test_a_batch_without_records_has_no_freshness() -> None:
    assert freshness(merge_times([]), 1_000, batch_id=0) is None
    assert freshness(merge_times([encode_times([])]), 1_000, batch_id=0) is None


def test_a_distinct_ms_costs_16_bytes_whatever_the_number_of_records() -> None:
    same_ms = encode_times(np.full(50_000, 1_700_000_000_000))
    spread = encode_times(1_700_000_000_000 + np.arange(1_000))
    assert len(same_ms) == 8 + 16 and len(spread) == 8 + 16 * 1_000


def test_bytes_of_something_else_are_refused() -> None:
    with pytest.raises(ValueError):
        merge_times([b"TGFX" + bytes(4)])
