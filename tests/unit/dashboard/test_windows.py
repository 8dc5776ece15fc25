"""The windows as tables (dashboard/windows.py), against the rows they come from."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dashboard.windows import WINDOW_COLUMNS, metrics_frame, stable_order, users_band, windows_frame
from tests.unit.dashboard.fixtures import T, rows_for
from tests.unit.dashboard.fixtures import plain_row as row

pytestmark = pytest.mark.unit


def test_windows_frame_columns_types_and_order() -> None:
    rows = rows_for({"web": [10, 20], "api": [5, 0]})
    df = windows_frame(list(reversed(rows)))
    assert list(df.columns) == WINDOW_COLUMNS
    assert list(df["service"]) == ["*", "*", "api", "api", "web", "web"]
    assert df["window_start"].dt.tz is None  # naive, meaning UTC
    assert df.loc[0, "window_start"] == pd.Timestamp("2026-11-18T11:06:40")
    assert df.loc[0, "window_end"] == pd.Timestamp("2026-11-18T11:06:50")
    assert list(df[df["service"] == "web"]["events_per_s"]) == [1.0, 2.0]
    assert df["count"].dtype == "int64"


def test_windows_frame_leaves_out_the_other_metrics() -> None:
    rows = rows_for({"web": [10, 20]})
    assert rows[0].p99 is not None and rows[0].spec == "10000"  # the rows carry them...
    df = windows_frame(rows)
    assert list(df.columns) == WINDOW_COLUMNS  # ...the chart's frame does not
    assert list(df["count"]) == [10, 20, 10, 20]  # `*` then web


def test_windows_frame_empty_keeps_columns() -> None:
    df = windows_frame([])
    assert df.empty
    assert list(df.columns) == WINDOW_COLUMNS


def test_users_band_is_two_standard_errors_of_the_hll() -> None:
    frame = metrics_frame([row(T, "*", 10, distinct_users=10_000)])
    band = users_band(frame)
    se = 1.04 / np.sqrt(2**14)
    assert band["users_hi"].iloc[0] == pytest.approx(10_000 * (1 + 2 * se))
    assert band["users_lo"].iloc[0] == pytest.approx(10_000 * (1 - 2 * se))


def test_stable_order_appends_newcomers_sorted() -> None:
    assert stable_order([], ["web", "api"]) == ["api", "web"]
    assert stable_order(["web", "api"], ["db", "api", "auth"]) == [
        "web",
        "api",
        "auth",
        "db",
    ]
    assert stable_order(["web"], []) == ["web"]
