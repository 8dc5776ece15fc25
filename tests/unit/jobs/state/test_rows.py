"""The stateful step's output rows (jobs/state/rows.py): metrics as JSON text, rows in bulk."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from jobs.state.rows import (
    append_row,
    decode_rows,
    decode_table,
    extend_rows,
    metrics_json,
    new_rows,
    output_table,
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
    ("late", "stragglers", "proc_ms"), [(0, 0, None), (4, 9, 1_780_000_000_123)]
)
def test_arrival_rows_read_back_as_their_metrics(
    late: int, stragglers: int, proc_ms: int | None
) -> None:
    rows = new_rows()
    append_row(
        rows,
        kind="arrivals",
        spec="broker",
        service="api",
        window_start=0,
        count=7,
        late=late,
        stragglers=stragglers,
        proc_ms=proc_ms,
    )
    (arrival,) = decode_rows(
        [dict(zip(rows, values, strict=True)) for values in zip(*rows.values(), strict=True)], 1
    ).arrivals
    assert (arrival.domain, arrival.start_ms, arrival.service, arrival.count) == (
        "broker",
        0,
        "api",
        7,
    )
    assert arrival.metrics == {"late": late, "stragglers": stragglers, "proc_ms": proc_ms}


def test_decode_table_is_decode_rows_on_an_arrow_table() -> None:
    rows = new_rows()
    for i in range(5):
        append_row(
            rows,
            kind="window",
            spec="10000",
            service=f"s{i}",
            window_start=i * 10_000,
            count=i,
            metrics=metrics_json({"count": i}),
            agg=b"w%d" % i,
        )
    for shard in (0, 1):  # the overflow service's parts of two shards
        append_row(
            rows,
            kind="window",
            spec="10000",
            service="(other)",
            window_start=0,
            count=2,
            metrics='{"count":2}',
            agg=b"o",
            partition=shard,
        )
        append_row(
            rows,
            kind="arrivals",
            spec="broker",
            service="(other)",
            window_start=0,
            count=3,
            late=1,
            stragglers=shard,
            proc_ms=5,
        )
    append_row(
        rows,
        kind="arrivals",
        spec="processing",
        service="s1",
        window_start=0,
        count=4,
        late=0,
        stragglers=0,
        proc_ms=None,
    )
    append_row(rows, kind="straggler", spec="10000", service="s2", window_start=0, count=6)
    append_row(rows, kind="duplicate_events", service="s2", count=2)
    append_row(rows, kind="broker_times", agg=b"t", count=9)
    append_row(rows, kind="dead_count", reason="invalid_json", count=3)
    out = output_table(rows)
    got, want = decode_table(out, 7), decode_rows(out.to_pylist(), 7)
    assert got == want
    assert len(got.windows) == 7 and len(got.arrivals) == 2  # (other)'s broker rows summed
    assert {a.service: a.metrics["stragglers"] for a in got.arrivals} == {"(other)": 1, "s1": 0}
