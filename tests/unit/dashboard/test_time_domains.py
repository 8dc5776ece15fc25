"""Event time vs processing time as tables (dashboard/time_domains.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from dashboard.time_domains import arrivals_frame, watermark_frame
from tests.unit.dashboard.fixtures import T, W
from tidegauge.core.store import ArrivalRow

pytestmark = pytest.mark.unit


def test_arrivals_frame_takes_the_total_or_sums_the_chosen_services() -> None:
    arrivals = {
        "event": [
            ArrivalRow("event", T, T + W, "*", 30, 1, 2),
            ArrivalRow("event", T, T + W, "api", 10, 1, 0),
            ArrivalRow("event", T, T + W, "web", 20, 0, 2),
        ],
        "processing": [
            ArrivalRow("processing", T + W, T + 2 * W, "*", 30, 1, 2),
            ArrivalRow("processing", T + W, T + 2 * W, "api", 10, 1, 0),
            ArrivalRow("processing", T + W, T + 2 * W, "web", 20, 0, 2),
        ],
    }
    total = arrivals_frame(arrivals)
    assert total[["domain", "events", "late", "stragglers"]].values.tolist() == [
        ["event", 30, 1, 2],
        ["processing", 30, 1, 2],
    ]
    assert total["events_per_s"].tolist() == [3.0, 3.0]
    assert total["window_start"].iloc[1] == pd.Timestamp("2026-01-01T00:00:10")
    web = arrivals_frame(arrivals, ["web"])
    assert web["events"].tolist() == [20, 20]
    both = arrivals_frame(arrivals, ["api", "web"])
    assert both["events"].tolist() == [30, 30] and both["late"].tolist() == [1, 1]


def test_watermark_frame_skips_batches_before_the_first_event() -> None:
    batches = [
        {"batch_time": T, "watermark": 0, "max_event_time": None},
        {"batch_time": T + 1000, "watermark": T - 30_000, "max_event_time": T},
        {"batch_time": T + 2000, "watermark": T - 25_000, "max_event_time": T + 5000},
    ]
    wm = watermark_frame(batches)
    assert len(wm) == 2
    assert wm["watermark"].tolist() == [
        pd.Timestamp("2025-12-31T23:59:30"),
        pd.Timestamp("2025-12-31T23:59:35"),
    ]
    assert wm["max_event_time"].iloc[1] == pd.Timestamp("2026-01-01T00:00:05")
