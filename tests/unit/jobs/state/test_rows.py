"""The stateful step's output rows (jobs/state/rows.py): window metrics as JSON text."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from jobs.state.rows import metrics_json
from tidegauge.core.window_agg import WindowAgg


def _window_metrics() -> dict[str, Any]:
    agg = WindowAgg()
    agg.add(np.array([1.5, 2.0, np.nan]), np.array([200, 500, -1]), np.array(["a", None, "b"]))
    return agg.metrics(10_000)


@pytest.mark.parametrize(
    "metrics",
    [
        {},
        _window_metrics(),
        WindowAgg().metrics(10_000),  # nothing in it: the nulls
        {"count": 3, "p99": 0.1 + 0.2, "flag": True, "note": 'a "b"', "big": 2**70},
        {"z": -0.0, "a": 1e-320, "m": math.inf},  # json's own spelling of what it allows
        {"nested": {"b": 1, "a": [1, 2.5]}, "x": None},
    ],
)
def test_metrics_json_is_jsons_sorted_compact_text(metrics: dict[str, Any]) -> None:
    expected = json.dumps(metrics, separators=(",", ":"), sort_keys=True)
    assert metrics_json(metrics) == expected
    assert metrics_json(metrics) == expected  # the cached key order too
