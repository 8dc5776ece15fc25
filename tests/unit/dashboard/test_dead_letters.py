"""Dead letters as tables (dashboard/dead_letters.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from dashboard.dead_letters import RAW_PREVIEW_CHARS, dead_counts_frame, dead_letters_frame
from tests.unit.dashboard.fixtures import T0
from tidegauge.core.store import DeadLetter

pytestmark = pytest.mark.unit


def test_dead_frames() -> None:
    counts = dead_counts_frame({"invalid_json": 3, "empty": 9, "wrong_type": 3})
    assert counts.to_dict("records") == [
        {"reason": "empty", "count": 9},
        {"reason": "invalid_json", "count": 3},
        {"reason": "wrong_type", "count": 3},
    ]
    letters = [
        DeadLetter(1, 42, T0, "invalid_utf8", "byte 0xff", b"\xff{" + b"x" * 200, 202, 3),
        DeadLetter(0, 7, T0 - 1000, "empty", "no bytes", b"", 0, 2),
    ]
    df = dead_letters_frame(letters)
    assert list(df.columns) == ["Kafka time (UTC)", "reason", "detail", "partition:offset", "raw"]
    assert list(df["partition:offset"]) == ["1:42", "0:7"]
    assert df.loc[0, "raw"].startswith("\\xff{x")
    assert len(df.loc[0, "raw"]) == RAW_PREVIEW_CHARS
    assert df.loc[0, "raw"].endswith("…")
    assert df.loc[1, "raw"] == "(empty)"
    assert df.loc[0, "Kafka time (UTC)"] == pd.Timestamp("2026-11-18T11:06:40")
    assert dead_letters_frame([]).empty
