"""Late events kept for people to read (jobs/summary/late_events.py): which, and their form."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa

from jobs.summary.late_events import concat, late_columns, members, newest, stored
from tests.fixtures import T


def _events(rng: np.random.Generator, n: int) -> dict[str, object]:
    kafka = (T + rng.integers(0, 50, n)).astype(np.float64)  # many ties
    kafka[rng.random(n) < 0.2] = np.nan
    return {
        "partition": rng.integers(0, 3, n),
        "offset": rng.permutation(n).astype(np.int64),
        "kafka_ms": kafka,
        "event_ms": T - rng.integers(0, 90_000, n),
        "event_id": pa.array([f"e{i}" for i in range(n)]),
        "clock_offset_ms": np.where(rng.random(n) < 0.5, np.nan, 7.0),
    }


def _positions(cols: dict[str, object]) -> list[tuple[int, int]]:
    parts, offsets = np.asarray(cols["partition"]).tolist(), np.asarray(cols["offset"]).tolist()
    return list(zip(parts, offsets, strict=True))


def test_newest_is_by_broker_time_then_partition_then_offset_unknown_oldest() -> None:
    cols = {
        "partition": np.array([0, 1, 0, 2, 1]),
        "offset": np.array([5, 1, 9, 0, 2]),
        "kafka_ms": np.array([T, T, math.nan, T - 1, T]),
    }
    assert _positions(newest(cols, 5)) == [(1, 2), (1, 1), (0, 5), (2, 0), (0, 9)]
    assert _positions(newest(cols, 2)) == [(1, 2), (1, 1)]
    assert _positions(newest(cols, 0)) == []


def test_the_newest_of_parts_newest_are_the_newest_of_all() -> None:
    """Why every step may cut on its own: chunks, services and groups change nothing kept."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        cols = _events(rng, int(rng.integers(1, 300)))
        n = int(rng.integers(0, 40))
        whole = _positions(newest(cols, n))
        cut = np.sort(rng.choice(len(cols["offset"]), size=3))  # type: ignore[arg-type]
        bounds = [0, *cut.tolist(), len(cols["offset"])]  # type: ignore[arg-type]
        parts = [
            newest(late_columns(cols, np.arange(a, b), np.zeros(b - a, np.int64), n)[0], n)
            for a, b in zip(bounds, bounds[1:], strict=False)
            if b > a
        ]
        assert _positions(newest(concat(parts), n)) == whole


def test_a_stored_member_is_the_sorted_compact_json_of_the_event() -> None:
    cols = stored(
        {
            "partition": np.array([2, 0]),
            "offset": np.array([41, 7]),
            "kafka_ms": np.array([T + 1_500.0, math.nan]),
            "event_ms": np.array([T - 25_000, T - 61_000]),
            "event_id": pa.array(['a "quoted" id ü\n', None]),
            "clock_offset_ms": np.array([math.nan, -4.0]),
            "service": pa.array(["pay/eu", "api"]),
        },
        watermark_ms=T - 10_000,
        size_ms=10_000,
    )
    got = members(cols, 12)
    expected = [
        {
            "batch_id": 12,
            "behind_ms": 10_000,  # watermark T-10s passed the window [T-30s, T-20s) by 10 s
            "clock_offset_ms": None,
            "event_id": 'a "quoted" id ü\n',
            "event_time": T - 25_000,
            "kafka_timestamp": T + 1_500,
            "lateness_ms": 26_500,
            "offset": 41,
            "partition": 2,
            "service": "pay/eu",
            "watermark": T - 10_000,
            "window_end": T - 20_000,
            "window_start": T - 30_000,
        },
        {
            "batch_id": 12,
            "behind_ms": 50_000,
            "clock_offset_ms": -4,
            "event_id": None,
            "event_time": T - 61_000,
            "kafka_timestamp": None,
            "lateness_ms": None,
            "offset": 7,
            "partition": 0,
            "service": "api",
            "watermark": T - 10_000,
            "window_end": T - 60_000,
            "window_start": T - 70_000,
        },
    ]
    texts = [json.dumps(e, separators=(",", ":"), sort_keys=True) for e in expected]
    # byte for byte what json.dumps writes, scored by broker time (0 when unknown)
    assert got == {texts[0]: T + 1_500, texts[1]: 0}


def test_late_columns_without_clock_correction_have_no_offsets() -> None:
    cols = _events(np.random.default_rng(2), 10)
    del cols["clock_offset_ms"]
    picked, _ = late_columns(cols, np.array([1, 3]), np.array([0, 0]), 10)
    assert np.isnan(picked["clock_offset_ms"]).all() and len(picked["clock_offset_ms"]) == 2


def test_late_columns_are_each_owners_newest_in_owner_order() -> None:
    """A chunk's late events cut per service in one pass: each service's newest, in turn."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        cols = _events(rng, int(rng.integers(1, 400)))
        size = len(cols["offset"])  # type: ignore[arg-type]
        rows = np.flatnonzero(rng.random(size) < 0.6)
        owners = rng.integers(0, int(rng.integers(1, 30)), len(rows))
        n = int(rng.integers(0, 12))
        picked, of = late_columns(cols, rows, owners, n)
        expected, expected_of = [], []
        for owner in sorted(set(owners.tolist())):
            at = rows[owners == owner]
            mine = newest(
                {k: v.take(at) if isinstance(v, pa.Array) else v[at] for k, v in cols.items()}, n
            )  # type: ignore[attr-defined,index]
            expected += _positions(mine)
            expected_of += [owner] * len(mine["offset"])
        assert _positions(picked) == expected
        assert of.tolist() == expected_of
        ids = dict(zip(_positions(cols), cols["event_id"].to_pylist(), strict=True))  # type: ignore[attr-defined]
        assert picked["event_id"].to_pylist() == [ids[p] for p in expected]
