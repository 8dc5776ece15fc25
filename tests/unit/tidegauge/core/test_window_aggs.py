"""WindowAggs (tidegauge/core/window_aggs.py): many aggregates as columns, bit for bit WindowAgg.

`WindowAgg` objects fed the same events are the reference for every verb: build, combine (with
overdue shifts), results, bytes; with the built-in metrics only, with a sliding window's
timeline, and with a plugin's metric registered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from sketches.tg64 import hash32
from tidegauge.core.registry import Batch, Metric, metrics, register_metric, unregister_metric
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.window_aggs import WindowAggs, merge_encoded


def _sum_update(state: float, batch: Batch) -> float:
    values = batch.get("bytes_sent")
    return state if values is None else state + float(np.nansum(values))


def _sum_merge(states: Any) -> float:
    return float(sum(states))


BYTES = Metric(
    name="bytes_sent_total",
    empty=float,
    update=_sum_update,
    merge=_sum_merge,
    results=lambda s, _: {"bytes_sent": s},
    fields=("bytes_sent",),
    encode=lambda s: np.float64(s).tobytes(),
    decode=lambda b: float(np.frombuffer(b, np.float64)[0]),
)


@pytest.fixture
def plugin() -> Iterator[None]:
    register_metric(BYTES)
    yield
    unregister_metric(BYTES.name)


def events(n_groups: int, n: int, seed: int, timeline: bool, extra: bool) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    users = np.array([f"u{i}" if i % 7 else None for i in rng.integers(0, 500, n)], dtype=object)
    e: dict[str, Any] = {
        "groups": rng.integers(0, n_groups, n),
        "latency_ms": np.where(rng.random(n) < 0.05, np.nan, np.round(rng.lognormal(4, 1, n))),
        "status": rng.choice([200, 200, 404, 500, 503, -1], n),
        "users": users,
        "lateness_ms": np.where(rng.random(n) < 0.1, np.nan, rng.exponential(300, n)),
        "overdue": rng.random(n) < 0.3,
        "overdue_ms": rng.exponential(1000, n),
        "timeline_ms": (rng.integers(0, 100, n) * 100) if timeline else None,
        "extra": {"bytes_sent": rng.exponential(1e4, n)} if extra else None,
    }
    return e


def built(e: dict[str, Any], n_groups: int) -> tuple[WindowAggs, list[WindowAgg]]:
    valid = np.array([u is not None for u in e["users"]])
    hashes = hash32(e["users"][valid])
    cols = WindowAggs.build(
        n_groups,
        e["groups"],
        e["latency_ms"],
        e["status"],
        e["groups"][valid],
        hashes,
        e["lateness_ms"],
        e["groups"][e["overdue"]],
        e["overdue_ms"][e["overdue"]],
        e["extra"],
        e["timeline_ms"],
    )
    objs = []
    for g in range(n_groups):
        mask = e["groups"] == g
        agg = WindowAgg()
        if mask.any():
            agg.add_hashed(
                e["latency_ms"][mask],
                e["status"][mask],
                hashes[mask[valid]],
                e["lateness_ms"][mask],
                e["overdue_ms"][mask & e["overdue"]] if (mask & e["overdue"]).any() else None,
                None if e["extra"] is None else {k: v[mask] for k, v in e["extra"].items()},
                None if e["timeline_ms"] is None else e["timeline_ms"][mask],
            )
        objs.append(agg)
    return cols, objs


SHAPES = [(1, 3), (40, 400), (300, 6000), (5, 40_000)]


def _compact(metrics: dict[str, object]) -> str:
    return json.dumps(metrics, separators=(",", ":"), sort_keys=True)


@pytest.mark.parametrize("timeline", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_build_results_and_bytes_equal_the_objects(shape: tuple[int, int], timeline: bool) -> None:
    n_groups, n = shape
    cols, objs = built(events(n_groups, n, 1, timeline, False), n_groups)
    assert [cols.agg(i) for i in range(n_groups)] == objs
    durations = np.full(n_groups, 10_000)
    assert [json.dumps(r) for r in cols.results(durations)] == [
        json.dumps(a.metrics(10_000)) for a in objs
    ]
    assert cols.results_json(durations) == [_compact(a.metrics(10_000)) for a in objs]
    blobs = cols.encode()
    assert blobs == [a.to_bytes() for a in objs]
    assert [WindowAggs.decode(blobs).agg(i) for i in range(n_groups)] == objs
    # the rows' reading: sketches estimated where they lie (full ones among them), same values
    assert [json.dumps(r) for r in WindowAggs.results_of(blobs, durations)] == [
        json.dumps(a.metrics(10_000)) for a in objs
    ]


@pytest.mark.parametrize("shape", SHAPES)
def test_combine_with_shifts_equals_merged_objects(shape: tuple[int, int]) -> None:
    n_groups, n = shape
    cols, objs = built(events(n_groups, n, 2, True, False), n_groups)
    rng = np.random.default_rng(3)
    k = max(1, n_groups // 4)
    keys = rng.integers(0, k, n_groups)
    shifts = rng.choice([0.0, -10_000.0, -20_000.0], n_groups)
    merged = cols.combine(keys, k, shifts)
    for key in range(k):
        rows = np.flatnonzero(keys == key)
        expected = WindowAgg.merged([objs[r] for r in rows], [shifts[r] for r in rows])
        assert merged.agg(key) == expected
    rows = [3 % n_groups, 0, 0]
    assert [cols.take(rows).agg(i) for i in range(3)] == [objs[r] for r in rows]
    both = WindowAggs.concat([WindowAggs.of(objs[:1]), WindowAggs.of(objs[1:])])
    assert [both.agg(i) for i in range(n_groups)] == objs


@pytest.mark.parametrize("shape", SHAPES)
def test_merge_encoded_is_each_keys_merge_and_the_same_cut_at_any_key(
    shape: tuple[int, int],
) -> None:
    n_groups, n = shape
    cols, objs = built(events(n_groups, n, 5, True, False), n_groups)
    blobs = cols.encode()
    k = max(1, n_groups // 3)
    keys = np.sort(np.random.default_rng(6).integers(0, k, n_groups))
    whole = merge_encoded(blobs, keys, k)
    for key in set(keys.tolist()):
        parts = [objs[r] for r in np.flatnonzero(keys == key)]
        assert WindowAgg.from_bytes(whole[key]) == WindowAgg.merged(parts)
    for half in sorted({0, 1, k // 2, k}):
        cut = int(np.searchsorted(keys, half))
        first = merge_encoded(blobs[:cut], keys[:cut], half)
        assert first + merge_encoded(blobs[cut:], keys[cut:] - half, k - half) == whole


@pytest.mark.usefixtures("plugin")
def test_a_plugins_metric_goes_through_its_own_functions() -> None:
    cols, objs = built(events(30, 900, 4, False, True), 30)
    assert [cols.agg(i) for i in range(30)] == objs
    assert cols.results(5_000) == [a.metrics(5_000) for a in objs]
    assert cols.results_json(5_000) == [_compact(a.metrics(5_000)) for a in objs]
    assert cols.encode() == [a.to_bytes() for a in objs]
    merged = cols.combine(np.arange(30) % 4, 4)
    for key in range(4):
        assert merged.agg(key) == WindowAgg.merged(objs[key::4])
    assert merged.results(5_000)[0]["bytes_sent"] == pytest.approx(
        sum(a.states[BYTES.name] for a in objs[0::4])
    )


def test_blobs_of_an_older_registry_read_with_the_missing_metrics_empty() -> None:
    older = WindowAgg(registered=metrics()[:4])  # count, errors, latency, users: no lateness
    older.add(np.array([5.0]), np.array([200]), np.array(["u"], dtype=object))
    blob = older.to_bytes()
    got = WindowAggs.decode([blob, WindowAgg().to_bytes()])
    assert got.agg(0) == WindowAgg.from_bytes(blob)
    assert got.agg(0).lateness.count == 0 and got.agg(0).count == 1
    with pytest.raises(ValueError):
        WindowAggs.decode([blob[:-3]])


def test_decode_reads_mixed_versions_and_names_a_bad_entry() -> None:
    cols, objs = built(events(6, 200, 5, False, False), 6)
    blobs = cols.encode()
    older = WindowAgg(registered=metrics()[:4])
    older.add(np.array([5.0]), np.array([200]), np.array(["u"], dtype=object))
    mixed = [*blobs, older.to_bytes()]  # the fast path cannot read these together
    assert [WindowAggs.decode(mixed).agg(i) for i in range(7)] == [
        *objs,
        WindowAgg.from_bytes(older.to_bytes()),
    ]
    assert WindowAggs.results_of(mixed, 10_000) == [
        *(a.metrics(10_000) for a in objs),
        WindowAgg.from_bytes(older.to_bytes()).metrics(10_000),
    ]
    assert WindowAggs.results_of([], 10_000) == []
    agg = objs[0]
    tampered = bytearray(agg.to_bytes())
    latency = agg.latency.to_bytes()
    at = bytes(tampered).index(latency) + 8  # the count: after the preamble, flags, compression
    assert tampered[at] == agg.latency.count < 127
    tampered[at] += 1  # the weights no longer add up to the count
    with pytest.raises(ValueError, match="'latency'"):
        WindowAggs.decode([*blobs, bytes(tampered)])


def test_blobs_holding_an_entry_or_not_are_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty state has no entry (no errors, no overdue events, no events at all): blobs with
    and without each entry are still read together, each absent state empty."""
    cols, objs = built(events(40, 120, 6, True, False), 40)
    objs = [*objs, WindowAgg()]
    blobs = [a.to_bytes() for a in objs]
    assert {a.errors == 0 for a in objs} == {True, False}
    assert {a.overdue.count == 0 for a in objs} == {True, False}

    def one_at_a_time(*_: object) -> None:
        pytest.fail("read one blob at a time")

    monkeypatch.setattr(WindowAggs, "_decode_each", classmethod(one_at_a_time))
    got = WindowAggs.decode(blobs)
    assert [got.agg(i) for i in range(len(objs))] == objs
    assert got.encode() == blobs
    assert WindowAggs.results_of(blobs, 10_000) == [a.metrics(10_000) for a in objs]
    monkeypatch.setattr(WindowAggs, "decode", classmethod(one_at_a_time))
    count, errors = WindowAggs.counts(blobs)
    assert count.tolist() == [a.count for a in objs]
    assert errors.tolist() == [a.errors for a in objs]


def test_a_count_entry_of_another_length_is_refused_not_read_as_zero() -> None:
    bad = b"TGWA\x04\x01" + b"\x01\x04" + bytes(4)  # one entry: count, 4 bytes long
    with pytest.raises(ValueError, match="'count'"):
        WindowAggs.counts([bad, WindowAgg(count=3).to_bytes()])
