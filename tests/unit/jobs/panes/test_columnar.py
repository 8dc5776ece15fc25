"""The panes of many services at once (jobs/panes/columnar.py) against one service at a time."""

from __future__ import annotations

import numpy as np

from jobs.panes.columnar import Plan, add_events, encode_late, unique_rows
from sketches.tdigest import TDigest
from sketches.tg64 import hash32
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import HOPPING, TUMBLING
from tidegauge.core.late_agg import LateAgg, merge_late


def test_unique_rows_are_numpys_unique_rows() -> None:
    rng = np.random.default_rng(1)
    cols = [rng.integers(0, k, 500) * m for k, m in ((30, 1), (3, 1), (7, 10_000))]
    (a, b, c), inverse = unique_rows(*cols)
    rows, expected = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    assert np.array_equal(np.stack((a, b, c), axis=1), rows)
    assert np.array_equal(inverse, expected.reshape(-1))


def _add(cols: dict[str, np.ndarray], rows: np.ndarray, codes: np.ndarray, watermark: int):
    valid = np.array([u is not None for u in cols["users"][rows]])
    return add_events(
        Plan((TUMBLING, HOPPING)),
        codes,
        cols["event_ms"][rows],
        cols["latency"][rows],
        cols["status"][rows],
        valid,
        hash32(cols["users"][rows][valid]),
        watermark,
        cols["arrival"][rows],
        watermark + 15 * S,
    )


def test_many_services_at_once_equal_each_service_alone() -> None:
    rng = np.random.default_rng(2)
    n, services = 3_000, 40
    codes = np.sort(rng.integers(0, services, n))
    event_ms = T + rng.integers(0, 120 * S, n)
    cols = {
        "event_ms": event_ms,
        "users": np.array([f"u{i}" if i % 5 else None for i in rng.integers(0, 50, n)], object),
        "latency": np.round(rng.lognormal(3, 1, n)),
        "status": rng.choice([200, 500], n),
        "arrival": (event_ms + rng.integers(0, 5 * S, n)).astype(np.float64),
    }
    watermark = T + 60 * S  # some events late, some stragglers, some on time
    together = _add(cols, np.arange(n), codes, watermark)
    panes, late = together.aggs.encode(), encode_late(together)
    assert len(together.late_count) and len(together.straggler_count)
    for code in range(services):
        mine = np.flatnonzero(codes == code)
        alone = _add(cols, mine, np.zeros(len(mine), np.int64), watermark)
        rows = together.service == code
        assert alone.start.tolist() == together.start[rows].tolist()
        assert alone.aggs.encode() == [b for b, r in zip(panes, rows, strict=True) if r]
        lrows = together.late_service == code
        assert alone.late_start.tolist() == together.late_start[lrows].tolist()
        assert encode_late(alone) == [b for b, r in zip(late, lrows, strict=True) if r]
        srows = together.straggler_service == code
        assert alone.straggler_count.tolist() == together.straggler_count[srows].tolist()


def test_merge_late_adds_counts_and_merges_digests_in_order() -> None:
    rng = np.random.default_rng(4)
    aggs = []
    for _ in range(9):
        a = LateAgg()
        a.add(rng.exponential(100, rng.integers(1, 40)), float(rng.integers(0, 1000)))
        aggs.append(a)
    keys = np.array([0, 1, 0, 2, 2, 2, 0, 1, 2])
    merged = merge_late([a.to_bytes() for a in aggs], keys, 3)
    for k in range(3):
        parts = [a for a, key in zip(aggs, keys, strict=True) if key == k]
        got = LateAgg.from_bytes(merged[k])
        assert got.count == sum(a.count for a in parts)
        assert got.lateness == TDigest.merged([a.lateness for a in parts])
        assert got.overdue == TDigest.merged([a.overdue for a in parts])
