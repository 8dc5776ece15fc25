"""The pipeline's health per batch, and the job's starts (dashboard/health.py)."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.health import health_frame, job_starts
from tests.unit.dashboard.fixtures import T

pytestmark = pytest.mark.unit


def test_health_frame_orders_batches_and_keeps_rates() -> None:
    batches = [
        {
            "batch_id": 2,
            "batch_time": T + 1000,
            "input_rows": 5,
            "input_rows_per_s": 5.0,
            "processed_rows_per_s": 50.0,
            "batch_duration_ms": 100,
        },
        {"batch_id": 1, "batch_time": T, "input_rows": 3, "batch_duration_ms": 90},
    ]
    h = health_frame(batches)
    assert h["batch_id"].tolist() == [1, 2]
    assert h["processed_rows_per_s"].tolist() == [0.0, 50.0]
    assert h["batch_duration_ms"].tolist() == [90, 100]
    # history written before the job measured freshness: NaN, not a fake zero
    assert h[["freshness_p50_ms", "freshness_p99_ms", "freshness_max_ms"]].isna().all().all()


def test_health_frame_freshness_per_batch_nan_without_records() -> None:
    def fresh(batch_id: int, p50: int, p99: int, top: int) -> dict[str, int]:
        return {
            "batch_id": batch_id,
            "commit_time": T + batch_id * 1000 + 300,
            "records": 10,
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": top,
        }

    batches: list[dict[str, object]] = [
        {"batch_id": 3, "batch_time": T + 3000, "freshness": fresh(3, 900, 1700, 1750)},
        {"batch_id": 1, "batch_time": T + 1000, "freshness": fresh(1, 400, 650, 700)},
        {"batch_id": 2, "batch_time": T + 2000, "freshness": None},  # no records
        {"batch_id": 4, "batch_time": T + 4000},  # written by an older job: no key at all
    ]
    h = health_frame(batches)
    assert h["batch_id"].tolist() == [1, 2, 3, 4]
    for col in ("freshness_p50_ms", "freshness_p99_ms", "freshness_max_ms"):
        assert h[col].dtype == np.float64
        assert h[col].isna().tolist() == [False, True, False, True]
    got = h.loc[[0, 2], ["freshness_p50_ms", "freshness_p99_ms", "freshness_max_ms"]]
    assert got.values.tolist() == [[400, 650, 700], [900, 1700, 1750]]


def test_job_starts_are_the_first_batch_of_each_run() -> None:
    def b(i: int, run: str | None) -> dict[str, object]:
        return {"batch_id": i, "batch_time": 1_000 * i, "run_id": run}

    starts = job_starts([b(0, "r1"), b(1, "r1"), b(2, "r2"), b(3, "r2"), b(4, None)])
    assert [(a.start, a.label, a.domain) for a in starts] == [
        (0, "job started (batch 0)", "processing"),
        (2_000, "job restarted (batch 2)", "processing"),
    ]
    # a history trimmed before the first batch does not invent a start
    assert job_starts([b(7, "r1"), b(8, "r1")]) == []
