"""WindowAgg (tidegauge/core/window_agg.py): adding events, merging, bytes, lateness digests.

One window's aggregate is exact counts plus two sketches (latency t-digest, users HyperLogLog).
Executors merge panes into windows, the sink merges services into `*` and the read API merges
windows into ranges, all with `merge`/`merged`; these tests pin that a merge of parts agrees with
one aggregate fed every row: counts exactly, HyperLogLog registers exactly (merge is an
element-wise max), quantiles within the t-digest's stated rank-error bounds. The fields the
built-in metrics report are tested in test_metrics.py.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from sketches.hll import HyperLogLog
from sketches.tdigest import TDigest
from sketches.tg64 import hash32
from tests.unit.sketches.fixtures import leb128
from tests.unit.tidegauge.core.fixtures import NAN, agg_of, exact_values, f64, i64, users
from tidegauge.core.metrics import PERCENTILES
from tidegauge.core.registry import metrics
from tidegauge.core.window_agg import WindowAgg

#: Rank-error bounds of the t-digest (docs/sketches.md, tests/accuracy): quantile -> bound.
#: p90/p95 have no documented bound; they get one between the p50 and p99 bounds.
RANK_BOUNDS = {0.5: 0.01, 0.9: 0.005, 0.95: 0.005, 0.99: 0.002, 0.999: 0.0005}


def random_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Realistic rows: lognormal latencies (5 % absent), mostly 2xx (some 5xx, some absent),
    users from a pool of 3000 (10 % anonymous). Seeded, so every run sees the same rows."""
    rng = np.random.default_rng(seed)
    latency = rng.lognormal(3.0, 1.0, n)
    latency[rng.random(n) < 0.05] = NAN
    status = rng.choice(i64(200, 201, 404, 500, 503, -1), n, p=[0.7, 0.1, 0.1, 0.04, 0.03, 0.03])
    user_ids = np.array([f"user-{k}" for k in rng.integers(0, 3000, n)], dtype=object)
    user_ids[rng.random(n) < 0.1] = None
    return latency, status, user_ids


def rank_error(sorted_data: np.ndarray, estimate: float, q: float) -> float:
    """|F(estimate) - q| against the exact empirical CDF (0 within the estimate's rank range)."""
    n = sorted_data.shape[0]
    lo = np.searchsorted(sorted_data, estimate, "left") / n
    hi = np.searchsorted(sorted_data, estimate, "right") / n
    return max(lo - q, q - hi, 0.0)


# --- add ----------------------------------------------------------------------------------------


def test_add_counts_every_event_and_skips_what_is_absent() -> None:
    # 4 events: one without a latency (NaN), one without a status (-1), one without a user
    a = agg_of(f64(12.5, NAN, 30.0, 7.5), i64(200, 503, -1, 200), users("u1", None, "u2", "u1"))
    assert a.count == 4  # every event counts, whatever is missing
    assert a.errors == 1
    assert a.latency.count == 3  # NaN is no latency, not a zero
    assert a.latency.nan_count == 0  # dropped before the digest, not counted as bad data there
    assert (a.latency.min, a.latency.max, a.latency.sum) == (7.5, 30.0, 50.0)
    assert round(a.users.estimate()) == 2  # None is not a user; duplicates count once


@pytest.mark.parametrize(
    ("status", "errors"),
    [
        (i64(200, 201, 302, 404, 499), 0),  # 4xx are the client's problem, not errors
        (i64(500), 1),  # the boundary is an error
        (i64(499, 500, 501, 503, 599), 4),
        (i64(-1, -1), 0),  # absent status: unknown, not an error
        (i64(), 0),
    ],
)
def test_errors_are_status_500_and_above(status: np.ndarray, errors: int) -> None:
    a = agg_of(np.full(len(status), 1.0), status, None)
    assert (a.count, a.errors) == (len(status), errors)


@pytest.mark.parametrize(
    "user_ids",
    [None, users(), users(None, None, None)],
    ids=["no-column", "empty-column", "all-anonymous"],
)
def test_add_without_users_leaves_the_hll_empty(user_ids: np.ndarray | None) -> None:
    n = 0 if user_ids is not None and len(user_ids) == 0 else 3
    a = agg_of(np.full(n, 1.0), np.full(n, 200), user_ids)
    assert a.count == n
    assert a.users.is_empty()
    assert a.metrics(1000)["distinct_users"] == 0


def test_add_with_only_absent_latencies_keeps_the_digest_empty() -> None:
    a = agg_of(f64(NAN, NAN), i64(500, 200), users("u", "v"))
    assert (a.count, a.errors, a.latency.count) == (2, 1, 0)
    assert a.latency == TDigest()


def test_add_hashed_is_add_with_users_hashed_once() -> None:
    latency, status, user_ids = random_rows(500, seed=3)
    valid = np.array([u is not None for u in user_ids])
    by_ids = agg_of(latency, status, user_ids)
    by_hashes = WindowAgg()
    by_hashes.add_hashed(latency, status, hash32(user_ids[valid]))
    assert by_hashes == by_ids


def test_add_accumulates_across_calls() -> None:
    a = agg_of(f64(1.0, 2.0), i64(200, 500), users("a", "b"))
    a.add(f64(3.0), i64(502), users("a"))
    assert (a.count, a.errors, a.latency.count, a.latency.sum) == (3, 2, 3, 6.0)
    assert round(a.users.estimate()) == 2


# --- merge / merged -------------------------------------------------------------------------


def _split(n: int, parts: int, seed: int) -> list[np.ndarray]:
    """Random, uneven index groups (one may be empty), as panes or services split rows."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, parts, n)
    owner[: n // 10] = 0  # part 0 is large...
    owner[owner == parts - 1] = 0  # ...and the last part empty
    return [np.flatnonzero(owner == k) for k in range(parts)]


@pytest.mark.parametrize("how", ["merged", "merge-in-place", "merge-one-by-one"])
def test_merge_of_parts_equals_one_aggregate_of_all_rows(how: str) -> None:
    latency, status, user_ids = random_rows(20_000, seed=11)
    whole = agg_of(latency, status, user_ids)
    parts = [agg_of(latency[i], status[i], user_ids[i]) for i in _split(20_000, 5, seed=12)]
    assert parts[-1].count == 0
    if how == "merged":
        got = WindowAgg.merged(parts)
    elif how == "merge-in-place":
        got = WindowAgg()
        got.merge(*parts)
    else:
        got = WindowAgg()
        for p in parts:
            got.merge(p)
    # counts exact
    assert (got.count, got.errors) == (whole.count, whole.errors) == (20_000, whole.errors)
    assert got.latency.count == whole.latency.count
    assert (got.latency.min, got.latency.max) == (whole.latency.min, whole.latency.max)
    assert got.latency.sum == pytest.approx(whole.latency.sum, rel=1e-12)
    # HyperLogLog merge is an element-wise max: exactly the registers of one sketch of all rows
    assert got.users == whole.users
    assert got.metrics(10_000)["distinct_users"] == whole.metrics(10_000)["distinct_users"]
    # quantiles: within the t-digest's bounds of the exact ones
    truth = np.sort(latency[~np.isnan(latency)])
    for name, q in PERCENTILES.items():
        assert rank_error(truth, got.metrics(10_000)[name], q) <= RANK_BOUNDS[q], name


def test_merge_and_merged_agree_exactly_and_leave_inputs_unchanged() -> None:
    latency, status, user_ids = random_rows(3000, seed=21)
    parts = [agg_of(latency[i], status[i], user_ids[i]) for i in _split(3000, 3, seed=22)]
    before = [p.to_bytes() for p in parts]
    in_place = WindowAgg.from_bytes(parts[0].to_bytes())
    in_place.merge(*parts[1:])
    assert WindowAgg.merged(parts) == in_place
    assert [p.to_bytes() for p in parts] == before


def test_merge_of_small_parts_is_exact() -> None:
    # a few values stay singleton centroids, so even the digest is the same as one of all rows
    latency = f64(3.5, 1.0, 8.0, 2.5, 9.0, 4.0, 7.5)
    status = i64(200, 500, 200, 200, 503, -1, 200)
    user_ids = users("a", "b", None, "a", "c", "d", "b")
    whole = agg_of(latency, status, user_ids)
    parts = [agg_of(latency[s], status[s], user_ids[s]) for s in (slice(0, 3), slice(3, 7))]
    assert WindowAgg.merged(parts) == whole
    assert WindowAgg.merged(parts).metrics(10_000) == whole.metrics(10_000)


def test_merged_of_nothing_and_of_one() -> None:
    assert WindowAgg.merged([]) == WindowAgg()
    one = agg_of(f64(1.0, 2.0), i64(200, 500), users("a", "b"))
    copy = WindowAgg.merged([one])
    assert copy == one
    copy.add(f64(3.0), i64(200), users("z"))  # a new object: the input is not aliased
    assert one.count == 2 and round(one.users.estimate()) == 2


def test_merge_with_empty_aggregates_changes_nothing() -> None:
    a = agg_of(f64(1.0, 2.0, 3.0), i64(200, 500, 200), users("a", "b", "c"))
    expected = a.to_bytes()
    a.merge(WindowAgg(), WindowAgg())
    a.merge()
    assert a.to_bytes() == expected


def test_merge_distinct_users_is_the_union_not_the_sum() -> None:
    a = agg_of(np.ones(100), np.full(100, 200), np.array([f"u{i}" for i in range(100)], object))
    b = agg_of(np.ones(100), np.full(100, 200), np.array([f"u{i}" for i in range(50, 150)], object))
    m = WindowAgg.merged([a, b]).metrics(10_000)
    assert m["count"] == 200
    assert m["distinct_users"] == pytest.approx(150, abs=2)


def test_merge_refuses_sketches_with_other_parameters() -> None:
    a = agg_of(f64(1.0), i64(200), users("a"))
    other_digest = WindowAgg(1, 0, TDigest(compression=100), HyperLogLog())
    other_hll = WindowAgg(1, 0, TDigest(), HyperLogLog(p=10))
    with pytest.raises(ValueError, match="compression"):
        WindowAgg.merged([a, other_digest])
    with pytest.raises(ValueError, match="p=10"):
        WindowAgg.merged([a, other_hll])


# --- to_bytes / from_bytes ------------------------------------------------------------------


def _cases() -> dict[str, WindowAgg]:
    big = random_rows(50_000, seed=31)  # enough users for a dense HyperLogLog encoding
    return {
        "empty": WindowAgg(),
        "no-latency": agg_of(f64(NAN), i64(500), users("u")),
        "one-event": agg_of(f64(12.25), i64(200), users("u")),
        "no-users": agg_of(f64(1.0, 2.0), i64(200, 404), None),
        "many": agg_of(*big),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_bytes_round_trip_is_exact(name: str) -> None:
    a = _cases()[name]
    blob = a.to_bytes()
    back = WindowAgg.from_bytes(blob)
    assert back == a
    assert back.to_bytes() == blob
    assert back.metrics(10_000) == a.metrics(10_000)
    assert WindowAgg.from_bytes(bytearray(blob)) == a  # Redis and Arrow may hand out copies


def _good() -> bytes:
    return agg_of(f64(1.0, 2.0), i64(200, 500), users("a", "b")).to_bytes()


#: The built-in metrics' ids in stored aggregates (version 4): part of the format, never renumbered.
IDS = {b"count": 0, b"errors": 1, b"latency": 2, b"users": 3, b"lateness": 4, b"overdue": 5}
IDS[b"timeline"] = 6


def _readleb128(blob: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = blob[pos]
        value, shift, pos = value | (byte & 0x7F) << shift, shift + 7, pos + 1
        if byte < 0x80:
            return value, pos


def _entries(blob: bytes) -> list[tuple[bytes, bytes]]:
    """The (name, payload) entries of a version-4 aggregate, read independently of the code."""
    assert blob[:5] == b"TGWA\x04"
    names = {i: name for name, i in IDS.items()}
    n, pos = _readleb128(blob, 5)
    out = []
    for _ in range(n):
        tag, pos = _readleb128(blob, pos)
        if tag % 2:
            name = names[tag // 2]
        else:
            name, pos = blob[pos : pos + tag // 2], pos + tag // 2
        size, pos = _readleb128(blob, pos)
        out.append((name, blob[pos : pos + size]))
        pos += size
    assert pos == len(blob)
    return out


def _pack(entries: list[tuple[bytes, bytes]], version: int = 4, magic: bytes = b"TGWA") -> bytes:
    """Entries as version 4 writes them (built-in metrics by id), or as version 3 (names)."""
    if version == 3:
        head = struct.pack("<4sBH", magic, version, len(entries))
        return head + b"".join(
            struct.pack("<B", len(n)) + n + struct.pack("<I", len(p)) + p for n, p in entries
        )
    out = struct.pack("<4sB", magic, version) + leb128(len(entries))
    for name, payload in entries:
        tag = leb128(2 * IDS[name] + 1) if name in IDS else leb128(2 * len(name)) + name
        out += tag + leb128(len(payload)) + payload
    return out


def _good_entries() -> list[tuple[bytes, bytes]]:
    return _entries(_good())


def _with_entry(name: bytes, payload: bytes) -> bytes:
    return _pack([(n, payload if n == name else p) for n, p in _good_entries()])


def test_stored_entries_are_the_built_in_metrics_in_order_each_tagged_by_one_byte() -> None:
    names = [n for n, _ in _good_entries()]
    assert names == [b"count", b"errors", b"latency", b"users"]  # the empty ones left out
    assert dict(_good_entries())[b"count"] == struct.pack("<q", 2)
    assert dict(_good_entries())[b"errors"] == struct.pack("<q", 1)
    head = len(b"TGWA\x04") + 1
    assert _good()[head : head + 2] == bytes([2 * IDS[b"count"] + 1, 8])
    assert WindowAgg().to_bytes() == b"TGWA\x04\x00"  # nothing held: no entry at all


def test_version_3_aggregates_still_read() -> None:
    # what the release before the one-byte tags wrote: every metric by name, empty ones too
    a = agg_of(f64(1.0, 2.0, 40.0), i64(200, 500, 503), users("a", "b", "c"))
    a.lateness.update(f64(5.0, 7.0))
    every = [(m, WindowAgg().states[m.decode()]) for m in IDS]
    payloads = dict(_entries(a.to_bytes()))
    v3 = _pack(
        [(m, payloads.get(m) or _metric_bytes(m.decode(), empty)) for m, empty in every],
        version=3,
    )
    assert len(_entries(a.to_bytes())) == 5 and v3[:5] == b"TGWA\x03"
    back = WindowAgg.from_bytes(v3)
    assert back == a and back.to_bytes() == a.to_bytes()
    assert back.metrics(10_000) == a.metrics(10_000)
    with pytest.raises(ValueError):
        WindowAgg.from_bytes(v3[:-1])


def _metric_bytes(name: str, state: object) -> bytes:
    return next(m for m in metrics() if m.name == name).encode(state)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"TGWA", id="magic-only"),
        pytest.param(b"\x00" * 64, id="zeros"),
        pytest.param(json.dumps({"count": 3}).encode(), id="json"),
        pytest.param(_pack(_good_entries(), magic=b"XXXX"), id="bad-magic"),
        pytest.param(_pack(_good_entries(), version=1), id="other-version"),
        pytest.param(_good()[:-1], id="truncated"),
        pytest.param(_good() + b"\x00", id="trailing-byte"),
        pytest.param(_good()[:6] + b"\x01" + leb128(9_999), id="lengths-disagree"),
        pytest.param(_good()[:6] + bytes([2 * 7 + 1, 0]), id="unknown-built-in"),
        pytest.param(_good()[:6] + b"\x01\xff\xff\xff\xff\xff\x01", id="overlong-varint"),
        pytest.param(
            _with_entry(b"latency", b"XXXX" + dict(_good_entries())[b"latency"][4:]),
            id="corrupt-digest-magic",
        ),
        pytest.param(
            _with_entry(b"users", dict(_good_entries())[b"users"][:-4] + b"\xff" * 4),
            id="corrupt-hll-body",
        ),
        pytest.param(_with_entry(b"count", b"\x01\x02"), id="short-count"),
    ],
)
def test_from_bytes_refuses_garbage(data: bytes) -> None:
    with pytest.raises(ValueError):
        WindowAgg.from_bytes(data)


def test_version_2_aggregates_still_read() -> None:
    # what the release before the registry wrote (checkpoints and Redis hold these)
    a = agg_of(f64(1.0, 2.0, 40.0), i64(200, 500, 503), users("a", "b", "c"))
    a.lateness.update(f64(5.0, 7.0))
    a.overdue.update(f64(100.0))
    blobs = [a.latency.to_bytes(), a.users.to_bytes(), a.lateness.to_bytes(), a.overdue.to_bytes()]
    v2 = struct.pack("<4sBqqIIII", b"TGWA", 2, a.count, a.errors, *map(len, blobs)) + b"".join(
        blobs
    )
    back = WindowAgg.from_bytes(v2)
    assert back == a
    assert back.metrics(10_000) == a.metrics(10_000)
    assert WindowAgg.from_bytes(v2, with_lateness=False).lateness.count == 0
    with pytest.raises(ValueError):
        WindowAgg.from_bytes(v2[:-1])


def test_an_aggregate_stored_before_a_metric_existed_reads_it_as_empty() -> None:
    a = agg_of(f64(1.0, 2.0), i64(200, 500), users("a", "b"))
    without_users = _pack([(n, p) for n, p in _entries(a.to_bytes()) if n != b"users"])
    back = WindowAgg.from_bytes(without_users)
    assert back.count == 2 and back.latency == a.latency
    assert back.users == HyperLogLog() and back.metrics(1_000)["distinct_users"] == 0


def test_an_entry_of_a_metric_not_registered_here_is_skipped() -> None:
    a = agg_of(f64(1.0, 2.0), i64(200, 500), users("a", "b"))
    extra = _pack([*_entries(a.to_bytes()), (b"from_a_plugin", b"\x00\x01\x02")])
    assert WindowAgg.from_bytes(extra) == a


# --- lateness and overdue digests ------------------------------------------------------------
#
# `lateness` = arrival (broker time) - event time; `overdue` = frontier - window end, by how much
# the event-time frontier had passed the event's window when it arrived. With allowed lateness L
# an event would have been late exactly when overdue >= L:
#
#   window [0, 10s)         frontier at arrival = 25s     -> overdue 15s
#   ----[=========)---------------|------->  late with L <= 15s, accepted with L > 15s


def _timed_agg(lateness: list[float], overdue: list[float], seed: int = 0) -> WindowAgg:
    """A WindowAgg of len(lateness) events, with their lateness and `overdue` values."""
    rng = np.random.default_rng(seed)
    n = len(lateness)
    agg = WindowAgg()
    agg.add_hashed(
        rng.integers(1, 100, n).astype(np.float64),
        np.full(n, 200, np.int64),
        hash32(np.array([f"u{i}" for i in range(n)], dtype=object)),
        np.array(lateness, dtype=np.float64),
        np.array(overdue, dtype=np.float64),
    )
    return agg


def test_add_hashed_fills_the_lateness_and_overdue_digests() -> None:
    agg = _timed_agg([100.0, NAN, 2_500.0], [0.0, 4_000.0])  # overdue only for those that have one
    assert agg.count == 3
    assert exact_values(agg.lateness) == [100.0, 2_500.0] and agg.lateness.nan_count == 1
    assert exact_values(agg.overdue) == [0.0, 4_000.0]
    m = agg.metrics(10_000)
    assert (m["lateness_p50"], m["lateness_max"]) == (agg.lateness.quantile(0.5), 2_500.0)
    # without them (sessions, old callers) the digests stay empty
    plain = WindowAgg()
    plain.add_hashed(f64(1.0), i64(200), None)
    assert plain.lateness.count == plain.overdue.count == 0
    assert plain.metrics(10_000)["lateness_max"] is None


@pytest.mark.parametrize(
    "agg",
    [
        WindowAgg(),
        _timed_agg([1.0], []),
        _timed_agg([], []),
        _timed_agg([5.0, 7.0, NAN], [-3.0, 0.0, 12_000.0]),
        _timed_agg(list(np.arange(0.0, 30_000.0, 3.0)), list(np.arange(0.0, 20_000.0, 2.0))),
    ],
    ids=["empty", "lateness-only", "no-events", "small", "many"],
)
def test_bytes_round_trip_keeps_lateness_and_overdue(agg: WindowAgg) -> None:
    blob = agg.to_bytes()
    back = WindowAgg.from_bytes(blob)
    assert back == agg
    assert back.lateness == agg.lateness and back.overdue == agg.overdue
    assert back.to_bytes() == blob


def test_merge_and_merged_combine_lateness_and_overdue() -> None:
    a = _timed_agg([1.0, 2.0], [10.0], seed=1)
    b = _timed_agg([3.0], [20.0, 30.0], seed=2)
    c = WindowAgg()
    before = [x.to_bytes() for x in (a, b, c)]
    merged = WindowAgg.merged([a, b, c])
    assert exact_values(merged.lateness) == [1.0, 2.0, 3.0]
    assert exact_values(merged.overdue) == [10.0, 20.0, 30.0]
    folded = WindowAgg.from_bytes(a.to_bytes())  # a copy
    folded.merge(b, c)
    assert folded == merged
    assert [x.to_bytes() for x in (a, b, c)] == before
    # no shifts (None) is a plain merge
    assert WindowAgg.merged([a, b, c], None) == merged


#   panes     |p0: [T, T+10s)   |p1: [T+10s, T+20s) |p2: [T+20s, T+30s) |
#   window    [T ............................................ T+30s)
#   each pane measures overdue against its own end; the window against T+30s, so p0's values
#   move by -20s, p1's by -10s and p2's by 0.
def test_merged_shifts_each_overdue_digest_before_merging() -> None:
    S = 1_000
    panes = [
        _timed_agg([1.0, 2.0], [0.0, 25 * S], seed=1),
        _timed_agg([3.0], [5 * S], seed=2),
        _timed_agg([4.0, 5.0], [0.0, 1.0], seed=3),
    ]
    shifts = [-20.0 * S, -10.0 * S, 0.0]
    before = [p.to_bytes() for p in panes]
    window = WindowAgg.merged(panes, shifts)
    assert exact_values(window.overdue) == sorted([-20 * S, 5 * S, -5 * S, 0.0, 1.0])
    assert window.overdue.sum == sum(p.overdue.sum for p in panes) + sum(
        s * p.overdue.count for s, p in zip(shifts, panes, strict=True)
    )
    # everything else is an ordinary merge: lateness is not re-based
    plain = WindowAgg.merged(panes)
    assert (window.count, window.errors) == (plain.count, plain.errors)
    assert window.latency == plain.latency and window.users == plain.users
    assert window.lateness == plain.lateness
    assert window.overdue == TDigest.merged(
        [p.overdue.shifted(s) for p, s in zip(panes, shifts, strict=True)]
    )
    assert [p.to_bytes() for p in panes] == before  # inputs untouched
    # zero shifts are the plain merge, byte for byte
    assert WindowAgg.merged(panes, [0.0, 0.0, 0.0]).to_bytes() == plain.to_bytes()


def test_merged_with_shifts_of_empty_overdue_digests() -> None:
    panes = [_timed_agg([1.0], []), _timed_agg([2.0], [7.0])]
    window = WindowAgg.merged(panes, [-100.0, -50.0])
    assert exact_values(window.overdue) == [-43.0]


def test_merged_refuses_a_shift_count_that_does_not_match() -> None:
    panes = [_timed_agg([1.0], [1.0]), _timed_agg([2.0], [2.0])]
    with pytest.raises(ValueError):
        WindowAgg.merged(panes, [1.0])
    with pytest.raises(ValueError):
        WindowAgg.merged(panes, [1.0, 2.0, 3.0])
