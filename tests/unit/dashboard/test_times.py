"""Times for display (dashboard/times.py): epoch ms to naive UTC, ages at a glance."""

from __future__ import annotations

import pandas as pd
import pytest

from dashboard.times import format_age, to_utc

pytestmark = pytest.mark.unit


def test_to_utc_is_utc_wall_clock_not_local_time() -> None:
    # 0 ms is midnight UTC whatever the machine's time zone
    assert to_utc([0]).iloc[0] == pd.Timestamp("1970-01-01T00:00:00")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0.0s"),
        (450, "0.4s"),
        (59_999, "59.9s"),
        (60_000, "1m00s"),
        (185_000, "3m05s"),
        (7_800_000, "2h10m"),
        (3 * 86_400_000 + 4 * 3_600_000, "3d4h"),
        (-1500, "-1.5s"),
    ],
)
def test_format_age(ms: int, text: str) -> None:
    assert format_age(ms) == text
