"""The stateful step's output rows (jobs/state/rows.py): metrics as JSON text, rows in bulk."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from jobs.state.rows import (
    append_row,
    arrival_doc,
    arrival_metrics,
    decode_rows,
    extend_rows,
    metrics_json,
    new_rows,
)
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


@pytest.mark.parametrize(
    ("late", "stragglers", "proc_ms"), [(0, 0, None), (3, 12, 1_780_000_000_123)]
)
def test_arrival_metrics_are_metrics_json(late: int, stragglers: int, proc_ms: int | None) -> None:
    metrics = {"late": late, "stragglers": stragglers, "proc_ms": proc_ms}
    assert arrival_metrics(late, stragglers, proc_ms) == metrics_json(metrics)


def test_extend_rows_appends_what_append_row_would() -> None:
    one, many = new_rows(), new_rows()
    given = [
        {
            "kind": "straggler",
            "spec": "tumbling:10s",
            "service": "api",
            "window_start": 0,
            "count": 2,
        },
        {
            "kind": "duplicate_events",
            "spec": None,
            "service": "web",
            "window_start": None,
            "count": 1,
        },
    ]
    for row in given:
        append_row(one, **row)
    extend_rows(many, **{c: [row[c] for row in given] for c in given[0]})
    assert many == one
    with pytest.raises(ValueError, match="window_start"):
        extend_rows(many, kind=["late"], window_start=[])


@pytest.mark.parametrize(
    "metrics",
    [
        {"late": 0, "stragglers": 0, "proc_ms": None},
        {"late": 4, "stragglers": 9, "proc_ms": 1_780_000_000_123},
        {"late": 1, "stragglers": 2, "proc_ms": None, "other": 0.5},  # anything else: generic
    ],
)
def test_arrival_rows_read_back_and_store_as_json_would(metrics: dict[str, Any]) -> None:
    text = metrics_json(metrics)
    rows = new_rows()
    append_row(rows, kind="arrivals", spec="broker", service="api", window_start=0, count=7)
    rows["metrics"][-1] = text
    (arrival,) = decode_rows(
        [dict(zip(rows, values, strict=True)) for values in zip(*rows.values(), strict=True)], 1
    ).arrivals
    assert arrival.metrics == json.loads(text)
    assert arrival_doc(7, arrival.metrics) == metrics_json({**metrics, "events": 7})
