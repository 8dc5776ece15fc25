"""`ServiceWindows` (jobs/panes/windows.py): a service's panes and the windows built from them.

`ServiceWindows` keeps one WindowAgg per pane (a tumbling window of the gcd of every spec's size
and slide) and builds tumbling and hopping windows by merging panes; with a session spec it keeps
the service's sessions too, and its sliding windows are checked against a replay of the events.

Timelines in the comments and the window specs: tests/unit/jobs/fixtures.py.
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from jobs.panes.windows import ServiceWindows
from tests.fixtures import S, T
from tests.unit.fixtures import brute_peak
from tests.unit.jobs.fixtures import (
    HK,
    HOPPING,
    SIZE,
    TIMED_SPECS,
    TK,
    TUMBLING,
    add,
    check_digest,
    counts,
    filled,
    near_boundaries,
    size_of,
    timed_add,
    windows_of,
)
from tests.unit.jobs.panes.fixtures import lengths_of, open_of
from tidegauge.core.metrics import PERCENTILES
from tidegauge.core.sliding import frame_of
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import LATE, ON_TIME, STRAGGLER, WindowSpec, advance_watermark


def late_of(spec: WindowSpec, *starts: int, n: int = 1) -> Counter[tuple[str, int]]:
    return Counter({(spec.key, s): n for s in starts})


# --- ServiceWindows: pane size --------------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "pane_ms"),
    [
        ((TUMBLING,), 10 * S),
        ((HOPPING,), 10 * S),
        ((TUMBLING, HOPPING), 10 * S),
        ((WindowSpec.tumbling(60 * S), WindowSpec(60 * S, 15 * S)), 15 * S),
        ((TUMBLING, WindowSpec(60 * S, 15 * S)), 5 * S),
        ((WindowSpec(45 * S, 20 * S),), 5 * S),
    ],
)
def test_panes_are_the_gcd_of_every_size_and_slide(
    specs: tuple[WindowSpec, ...], pane_ms: int
) -> None:
    assert ServiceWindows(specs).pane_ms == pane_ms


# --- ServiceWindows.add: the watermark rule, tumbling -----------------------------------------


@pytest.mark.parametrize(
    ("event", "watermark", "late"),
    [
        #   T        T+10s
        #   [x--------)          W=0 (first batch): nothing is late
        (T, 0, False),
        #   [x--------)  W       event exactly at the window start, W well before the end
        #   W                    (W = T+5s)
        (T, T + 5 * S, False),
        #   [--------x)          event at end-1ms, same window, still open
        (T + SIZE - 1, T + 5 * S, False),
        #   [x--------)W         window end == watermark -> late, even at the window start
        (T, T + SIZE, True),
        #   [--------x)W         ... and at end-1ms
        (T + SIZE - 1, T + SIZE, True),
        #   [--------x)          window end == watermark + 1 -> accepted
        #           W^           (W = T+10s-1ms)
        (T + SIZE - 1, T + SIZE - 1, False),
        (T, T + SIZE - 1, False),
        #   [--------x)|[x-------)    event exactly at the NEXT window's start with W at the
        #              W              first window's end: its own window is open
        (T + SIZE, T + SIZE, False),
        #   [x--------)........W      long past
        (T, T + 10 * SIZE, True),
    ],
)
def test_tumbling_watermark_rule(event: int, watermark: int, late: bool) -> None:
    sw = ServiceWindows((TUMBLING,))
    touched, late_counts = add(sw, [event], watermark)
    start = event - event % SIZE
    if late:
        assert touched == set()
        assert late_counts == late_of(TUMBLING, start)
        assert sw.panes == {}  # late rows never reach a pane
    else:
        assert touched == {start}
        assert late_counts == Counter()
        assert counts(sw) == {start: 1}


def test_add_splits_one_batch_into_accepted_and_late() -> None:
    #   T        T+10s     T+20s     T+30s
    #   [x-x----x)[x-------x)[-x------)
    #             W = T+10s: window T is late, T+10s and T+20s are open
    sw = ServiceWindows((TUMBLING,))
    touched, late = add(
        sw, [T, T + 3 * S, T + SIZE - 1, T + SIZE, T + 2 * SIZE - 1, T + 2 * SIZE + 1], T + SIZE
    )
    assert late == Counter({(TK, T): 3})
    assert touched == {T + SIZE, T + 2 * SIZE}
    assert counts(sw) == {T + SIZE: 2, T + 2 * SIZE: 1}
    assert all(type(p) is int for p in touched)
    assert all(type(k) is str and type(s) is int and type(n) is int for (k, s), n in late.items())


# --- ServiceWindows.add: the watermark rule, hopping ------------------------------------------
#
#   T-20s     T-10s     T         T+10s     T+20s     T+30s
#   [-----------------------------)                            window T-20s, ends T+10s
#             [-----------------------------)                  window T-10s, ends T+20s
#                       [-----------------------------)        window T,     ends T+30s
#                       |x--------|                            the event's pane [T, T+10s)
#
# A row is late for each window that has ended (end <= W) and counted in the others; its pane
# is dropped only when every window containing it has ended.


@pytest.mark.parametrize(
    ("event", "watermark", "late_starts", "accepted"),
    [
        (T + S, 0, [], True),
        #                         W one ms before the first window's end: nothing late
        (T + S, T + 10 * S - 1, [], True),
        #                         W at T+10s: late for window T-20s, accepted for the other two
        (T + S, T + 10 * S, [T - 20 * S], True),
        (T, T + 10 * S, [T - 20 * S], True),  # the pane's first ms
        (T + 10 * S - 1, T + 10 * S, [T - 20 * S], True),  # and its last
        #                         W at T+20s: late for two windows, still in window T
        (T + S, T + 20 * S, [T - 20 * S, T - 10 * S], True),
        (T + S, T + 30 * S - 1, [T - 20 * S, T - 10 * S], True),
        #                         W at T+30s: every window containing the pane has ended
        (T + S, T + 30 * S, [T - 20 * S, T - 10 * S, T], False),
        (T + S, T + 100 * S, [T - 20 * S, T - 10 * S, T], False),
    ],
)
def test_hopping_watermark_rule(
    event: int, watermark: int, late_starts: list[int], accepted: bool
) -> None:
    sw = ServiceWindows((HOPPING,))
    touched, late = add(sw, [event], watermark)
    assert late == late_of(HOPPING, *late_starts)
    if accepted:
        assert touched == {T}
        assert counts(sw) == {T: 1}
        # the window(s) it was accepted for are the open ones
        assert {w for _, w in sw.windows(touched, watermark)} == {
            s for s in (T - 20 * S, T - 10 * S, T) if s not in late_starts
        }
    else:
        assert touched == set()
        assert sw.panes == {}


def test_tumbling_and_hopping_together_a_row_late_for_one_spec_counts_in_the_other() -> None:
    #   T         T+10s     T+20s     T+30s
    #   [-x-------)                             tumbling T: ended at W -> late
    #   [-x---------------------------)         hopping T: open -> the pane is kept
    #             W = T+10s
    sw = ServiceWindows((TUMBLING, HOPPING))
    touched, late = add(sw, [T + S], T + 10 * S)
    assert late == Counter({(TK, T): 1, (HK, T - 20 * S): 1})
    assert touched == {T}
    assert counts(sw) == {T: 1}
    windows = sw.windows(touched, T + 10 * S)
    assert {(spec.key, w): a.count for (spec, w), a in windows.items()} == {
        (HK, T - 10 * S): 1,
        (HK, T): 1,
    }


SPEC_SETS = [
    (TUMBLING,),
    (HOPPING,),
    (TUMBLING, HOPPING),
    (WindowSpec.tumbling(60 * S), WindowSpec(60 * S, 15 * S)),
    (WindowSpec(45 * S, 20 * S), WindowSpec.tumbling(4 * S)),
]


@pytest.mark.parametrize("specs", SPEC_SETS, ids=lambda specs: "+".join(s.key for s in specs))
@pytest.mark.parametrize("seed", range(5))
def test_add_and_windows_agree_with_the_definition(
    specs: tuple[WindowSpec, ...], seed: int
) -> None:
    """Random batches: late counts, kept panes and window counts against a brute-force model."""
    rng = np.random.default_rng(seed)
    sw = ServiceWindows(specs)
    watermark = 0
    seen: list[int] = []  # every event accepted so far
    for _ in range(6):
        times = (T + rng.integers(-60 * S, 180 * S, int(rng.integers(0, 40)))).tolist()
        touched, late = add(sw, times, watermark)

        expected_late: Counter[tuple[str, int]] = Counter()
        accepted = []
        for t in times:
            ends = []
            for spec in specs:
                for w in windows_of(t, spec):
                    ends.append(w + spec.size_ms)
                    if w + spec.size_ms <= watermark:
                        expected_late[(spec.key, w)] += 1
            if max(ends) > watermark:  # some window still open: the row is kept
                accepted.append(t)
        assert late == expected_late
        assert touched == {t - t % sw.pane_ms for t in accepted}
        seen += accepted

        # every open window containing a touched pane, counted from the events themselves
        got = {(spec.key, w): a.count for (spec, w), a in sw.windows(touched, watermark).items()}
        expected = {
            (spec.key, w): sum(w <= e < w + spec.size_ms for e in seen)
            for t in accepted
            for spec in specs
            for w in windows_of(t, spec)
            if w + spec.size_ms > watermark
        }
        assert got == expected

        sw.evict(watermark)
        watermark = max(watermark, max(times, default=watermark) - int(rng.integers(0, 40 * S)))


# --- ServiceWindows.add: accumulation ---------------------------------------------------------


def test_add_accumulates_across_calls() -> None:
    sw = ServiceWindows((TUMBLING,))
    assert add(sw, [T + 1, T + 2, T + SIZE], 0) == ({T, T + SIZE}, Counter())
    # second call: only the touched pane is reported; the pane holds every row so far
    assert add(sw, [T + 3, T + 4, T + 5], 0) == ({T}, Counter())
    assert counts(sw) == {T: 5, T + SIZE: 1}
    # duplicate timestamps are separate rows (nothing is de-duplicated here)
    assert add(sw, [T + SIZE, T + SIZE], 0) == ({T + SIZE}, Counter())
    assert counts(sw) == {T: 5, T + SIZE: 3}


def test_add_fills_each_pane_as_if_its_rows_were_added_alone() -> None:
    # two batches, rows of two panes interleaved; latency NaN / status -1 / user None = absent
    batches = [
        ([T + 1, T + SIZE + 1, T + 2], [5.0, 7.5, np.nan], [200, 503, -1], ["a", None, "b"]),
        ([T + SIZE + 2, T + 3], [2.25, 9.0], [500, 404], ["c", "a"]),
    ]
    sw = ServiceWindows((TUMBLING,))
    direct = {T: WindowAgg(), T + SIZE: WindowAgg()}
    for times, lat, st, us in batches:
        add(sw, times, 0, lat, st, us)
        for pane, agg in direct.items():
            rows = [i for i, t in enumerate(times) if pane <= t < pane + SIZE]
            agg.add(
                np.array(lat)[rows], np.array(st, dtype=np.int64)[rows], np.array(us, object)[rows]
            )
    assert sw.pane_aggs() == direct
    assert (sw.pane(T).count, sw.pane(T).errors, sw.pane(T).latency.count) == (3, 0, 2)
    assert (sw.pane(T + SIZE).count, sw.pane(T + SIZE).errors) == (2, 2)


def test_add_empty_batch() -> None:
    sw = filled((TUMBLING,), {T: 4})
    assert add(sw, [], T) == (set(), Counter())
    assert counts(sw) == {T: 4}


def test_add_late_rows_do_not_touch_an_open_pane_of_the_same_window() -> None:
    # the pane was filled in an earlier batch; now the watermark has passed its window's end
    sw = filled((TUMBLING,), {T: 7})
    assert add(sw, [T + 1, T + 2], T + SIZE) == (set(), Counter({(TK, T): 2}))
    assert counts(sw) == {T: 7}


def test_add_before_the_epoch_floors() -> None:
    sw = ServiceWindows((TUMBLING,))
    assert add(sw, [-1, -SIZE], -2 * SIZE) == ({-SIZE}, Counter())
    assert counts(sw) == {-SIZE: 2}


# --- ServiceWindows.windows: merging panes ----------------------------------------------------


def _rows(seed: int, n: int, lo: int, hi: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    latency = rng.integers(1, 2000, n) / 4.0  # quarters: float sums are exact in any order
    latency[rng.random(n) < 0.1] = np.nan
    users = np.array([f"user-{k}" for k in rng.integers(0, n, n)], dtype=object)
    users[rng.random(n) < 0.1] = None
    return {
        "times": T + rng.integers(lo, hi, n),
        "latency": latency,
        "status": rng.choice(np.array([200, 404, 500, 503, -1]), n),
        "users": users,
    }


def _direct(rows: dict[str, np.ndarray], start: int, end: int) -> WindowAgg:
    """A WindowAgg fed the rows of [start, end) directly, with no panes in between."""
    sel = (rows["times"] >= start) & (rows["times"] < end)
    agg = WindowAgg()
    agg.add(rows["latency"][sel], rows["status"][sel], rows["users"][sel])
    return agg


@pytest.mark.parametrize("specs", [(TUMBLING,), (HOPPING,), (TUMBLING, HOPPING)])
def test_windows_merged_from_panes_equal_an_aggregate_of_the_same_rows(
    specs: tuple[WindowSpec, ...],
) -> None:
    # about 15 rows per window: the digests keep every latency, so the merge is exact
    rows = _rows(seed=1, n=40, lo=0, hi=40 * S)
    sw = ServiceWindows(specs)
    added = sw.add(rows["times"], rows["latency"], rows["status"], rows["users"], 0)
    touched = added.touched
    assert added.late_counts() == Counter()
    windows = sw.windows(touched, 0)
    assert windows, "the batch opened windows"
    for (spec, w), agg in windows.items():
        expected = _direct(rows, w, w + spec.size_ms)
        assert agg == expected, (spec.key, w - T)
        assert agg.metrics(spec.size_ms) == expected.metrics(spec.size_ms)


def test_windows_merged_from_many_rows_agree_within_the_sketch_tolerance() -> None:
    rows = _rows(seed=2, n=30_000, lo=0, hi=30 * S)  # one hopping window: [T, T+30s)
    sw = ServiceWindows((HOPPING,))
    touched = sw.add(rows["times"], rows["latency"], rows["status"], rows["users"], 0).touched
    got = sw.windows(touched, 0)[(HOPPING, T)]
    expected = _direct(rows, T, T + 30 * S)
    assert (got.count, got.errors, got.latency.count) == (
        expected.count,
        expected.errors,
        expected.latency.count,
    )
    assert got.users == expected.users  # HyperLogLog merge is exact
    truth = np.sort(rows["latency"][~np.isnan(rows["latency"])])
    m = got.metrics(30 * S)
    for name, q in PERCENTILES.items():
        rank = np.searchsorted(truth, m[name], "right") / len(truth)
        assert abs(rank - q) <= 0.01, name


def test_windows_only_the_open_ones_containing_the_given_panes() -> None:
    #   T-20s     T-10s     T         T+10s     T+20s     T+30s     T+40s
    #             |  x      |  x      |  x      |
    #                                 W = T+20s
    #   windows containing pane T+10s: T-10s (ended), T, T+10s
    sw = filled((HOPPING,), {T - 10 * S: 1, T: 2, T + 10 * S: 4})
    got = sw.windows({T + 10 * S}, T + 20 * S)
    assert {(spec, w): a.count for (spec, w), a in got.items()} == {
        (HOPPING, T): 2 + 4,  # panes T, T+10s (T+20s is empty)
        (HOPPING, T + 10 * S): 4,
    }
    assert sw.windows(set(), 0) == {}
    # nothing is mutated: asking again gives the same
    assert {k: a.count for k, a in sw.windows({T + 10 * S}, T + 20 * S).items()} == {
        k: a.count for k, a in got.items()
    }
    assert counts(sw) == {T - 10 * S: 1, T: 2, T + 10 * S: 4}


# --- ServiceWindows.evict ---------------------------------------------------------------------


def test_evict_tumbling_removes_panes_whose_window_ended_at_or_before_the_watermark() -> None:
    #   T         T+10s     T+20s     T+30s
    #   [---------)[--------)[--------)
    #                       W          T and T+10s end <= W: gone; T+20s stays
    sw = filled((TUMBLING,), {T: 1, T + SIZE: 2, T + 2 * SIZE: 3})
    assert sorted(sw.evict(T + 2 * SIZE)) == [T, T + SIZE]
    assert counts(sw) == {T + 2 * SIZE: 3}
    #                              W       one ms before T+20s's end: stays
    assert sw.evict(T + 3 * SIZE - 1) == []
    assert counts(sw) == {T + 2 * SIZE: 3}
    #                               W      at its end: gone
    assert sw.evict(T + 3 * SIZE) == [T + 2 * SIZE]
    assert sw.panes == {}
    assert sw.evict(T + 10 * SIZE) == []


def test_evict_hopping_keeps_a_pane_until_its_last_window_ended() -> None:
    #   T         T+10s     T+20s     T+30s     T+40s
    #   |x--------|x--------|x--------|
    #   [-----------------------------)                 last window of pane T ends T+30s
    #             [-----------------------------)       last window of pane T+10s ends T+40s
    sw = filled((HOPPING,), {T: 1, T + 10 * S: 2, T + 20 * S: 3})
    assert sw.evict(T + 30 * S - 1) == []
    assert sw.evict(T + 30 * S) == [T]
    assert counts(sw) == {T + 10 * S: 2, T + 20 * S: 3}
    assert sorted(sw.evict(T + 50 * S)) == [T + 10 * S, T + 20 * S]


@pytest.mark.parametrize(
    ("specs", "kept_until"),
    [
        ((TUMBLING, HOPPING), T + 30 * S),  # the hopping window T needs pane T after T+10s
        ((TUMBLING, WindowSpec.tumbling(60 * S)), T + 60 * S),
    ],
)
def test_evict_keeps_a_pane_any_spec_still_needs(
    specs: tuple[WindowSpec, ...], kept_until: int
) -> None:
    sw = filled(specs, {T: 1})
    assert sw.evict(T + SIZE) == []  # the 10 s window T has ended, the longer one has not
    assert sw.evict(kept_until - 1) == []
    assert sw.evict(kept_until) == [T]


def test_evict_with_initial_watermark_keeps_everything() -> None:
    sw = filled((TUMBLING, HOPPING), {T: 1})
    assert sw.evict(0) == []
    assert counts(sw) == {T: 1}


@pytest.mark.parametrize("specs", SPEC_SETS, ids=lambda specs: "+".join(s.key for s in specs))
def test_evict_never_removes_a_pane_an_open_window_needs(specs: tuple[WindowSpec, ...]) -> None:
    rng = np.random.default_rng(7)
    pane = ServiceWindows(specs).pane_ms
    starts = sorted({T + pane * int(k) for k in rng.integers(-20, 40, 30)})
    for watermark in [T + k * 5 * S for k in range(-5, 40, 3)]:
        sw = filled(specs, {p: 1 + i for i, p in enumerate(starts)})
        before = {k: a.count for k, a in sw.windows(set(starts), watermark).items()}
        gone = sw.evict(watermark)
        # an evicted pane is in no open window of any spec
        for p in gone:
            for spec in specs:
                assert all(w + spec.size_ms <= watermark for w in windows_of(p, spec))
        # every open window still merges to the same aggregate
        after = {k: a.count for k, a in sw.windows(set(starts), watermark).items()}
        assert after == before
        assert set(sw.panes) | set(gone) == set(starts)


# --- ServiceWindows: serialisation ------------------------------------------------------------


@pytest.mark.parametrize("specs", [(TUMBLING,), (HOPPING,), (TUMBLING, HOPPING)])
@pytest.mark.parametrize("panes", [{}, {T: 1}, {T: 3, T + SIZE: 25, -SIZE: 2, 0: 5}])
def test_service_windows_round_trip(specs: tuple[WindowSpec, ...], panes: dict[int, int]) -> None:
    sw = filled(specs, panes)
    blob = sw.to_bytes()
    back = ServiceWindows.from_bytes(blob, specs)
    assert back.specs == specs
    assert back.panes == sw.panes  # every WindowAgg, sketches included
    assert all(type(p) is int for p in back.panes)
    assert back.to_bytes() == blob
    # and it keeps working after the round trip, exactly as the original
    assert add(back, [T + 1], 0) == add(sw, [T + 1], 0)
    assert back.panes == sw.panes


def test_service_windows_round_trip_keeps_sketches() -> None:
    sw = ServiceWindows((HOPPING,))
    add(sw, [T + 1, T + 2, T + 11 * S], 0, [3.5, np.nan, 80.0], [500, -1, 200], ["a", None, "b"])
    back = ServiceWindows.from_bytes(sw.to_bytes(), (HOPPING,))
    got = back.windows({T}, 0)[(HOPPING, T)]
    assert got.metrics(30 * S) == sw.windows({T}, 0)[(HOPPING, T)].metrics(30 * S)
    assert (got.count, got.errors, got.latency.count, round(got.users.estimate())) == (3, 1, 2, 2)


@pytest.mark.parametrize(
    ("written", "asked"),
    [
        ((TUMBLING,), (WindowSpec.tumbling(5 * S),)),
        ((TUMBLING,), (HOPPING,)),
        ((TUMBLING,), (TUMBLING, HOPPING)),
        ((TUMBLING, HOPPING), (TUMBLING,)),
    ],
)
def test_service_windows_refuse_other_window_specs(
    written: tuple[WindowSpec, ...], asked: tuple[WindowSpec, ...]
) -> None:
    blob = filled(written, {T: 1}).to_bytes()
    with pytest.raises(ValueError, match="checkpoint holds windows") as e:
        ServiceWindows.from_bytes(blob, asked)
    message = str(e.value)
    assert str([s.key for s in written]) in message and str([s.key for s in asked]) in message
    assert "--checkpoint" in message and "--window" in message  # says how to fix it


@pytest.mark.parametrize(
    "blob",
    [
        # what WindowCounts (state version 1) wrote: JSON
        json.dumps({"v": 1, "size": SIZE, "panes": {str(T): 3}}).encode(),
        json.dumps({"v": 1, "size": SIZE, "panes": {}}).encode(),
        b"",
    ],
    ids=["window-counts", "window-counts-empty", "empty"],
)
def test_service_windows_refuse_old_format_state(blob: bytes) -> None:
    with pytest.raises(ValueError, match="older Tidegauge version") as e:
        ServiceWindows.from_bytes(blob, (TUMBLING,))
    assert "new --checkpoint directory" in str(e.value)


def test_service_windows_refuse_another_state_version() -> None:
    head = json.dumps({"specs": [TK], "sessions": 0}).encode()
    blob = b"TGSW" + struct.pack("<BI", 99, len(head)) + head
    with pytest.raises(ValueError, match="version 99"):
        ServiceWindows.from_bytes(blob, (TUMBLING,))


# --- time rules: late, straggler and overdue per (window, event) -------------------------------
#
# With the frontier F (max event time seen before the batch = W + allowed lateness), every
# (window, event) pair is late (end <= W), a straggler (W < end <= F) or on time. Late pairs
# go to `Added.late` (a LateAgg per window: count, lateness, overdue F - end); stragglers are
# counted per window. An accepted event whose frontier had passed its PANE's end adds
# F - pane end to the pane's overdue digest, which windows re-base to F - window end.

E = T + SIZE  # end of the tumbling window [T, T+10s)


@pytest.mark.parametrize(
    ("watermark", "front", "kind", "overdue"),
    [
        #   [T--x-----)E
        #             W-------F       end == watermark: late; overdue F - end = 20s
        (E, E + 20 * S, LATE, 20 * S),
        #             WF              lateness 0, end == W == F: late, overdue 0
        (E, E, LATE, 0),
        #   [T--x----W)F              end == frontier: straggler, overdue F - end = 0
        (E - 1, E, STRAGGLER, 0),
        #   [T--x----W)---F           straggler, overdue 5s
        (E - 1, E + 5 * S, STRAGGLER, 5 * S),
        #   W [T--x---)F              watermark far behind, frontier exactly at the end
        (E - 30 * S, E, STRAGGLER, 0),
        #   W [T--x--F)               end == frontier + 1: on time, no overdue
        (E - 30 * S, E - 1, ON_TIME, None),
        #   [T--x---WF)               lateness 0, frontier == watermark == end - 1: on time
        (E - 1, E - 1, ON_TIME, None),
        #   first batch: no frontier, nothing is a straggler
        (0, None, ON_TIME, None),
    ],
)
def test_add_time_classes_at_the_edges(
    watermark: int, front: int | None, kind: int, overdue: int | None
) -> None:
    sw = ServiceWindows((TUMBLING,))
    added = timed_add(sw, [T + 3 * S], [T + 40 * S], watermark, front)
    if kind == LATE:
        assert added.touched == set() and sw.panes == {}
        assert added.stragglers == Counter()
        (key, late), *rest = added.late.items()
        assert key == (TK, T) and rest == []
        assert late.count == 1
        assert check_digest(late.lateness, [37 * S])  # arrival - event time
        assert overdue is not None
        assert check_digest(late.overdue, [overdue])
        return
    assert added.late == {}
    assert added.touched == {T}
    assert added.stragglers == (Counter({(TK, T): 1}) if kind == STRAGGLER else Counter())
    agg = sw.windows(added.touched, watermark)[(TUMBLING, T)]
    assert check_digest(agg.lateness, [37 * S])
    if overdue is None:
        assert agg.overdue.count == 0
    else:
        assert check_digest(agg.overdue, [overdue])


def test_add_overdue_of_hopping_windows_is_rebased_on_each_window_end() -> None:
    #   T-20s     T-10s     T         T+10s     T+20s     T+30s
    #                       |--x------|
    #                            W    F = T+15s
    #   [-----------------------------)              ends T+10s <= F: straggler, overdue 5s
    #             [-----------------------------)    ends T+20s > F: on time, overdue -5s
    #                       [-----------------------------)   on time, overdue -15s
    # The pane's end (T+10s) <= F, so the event carries F - pane end = 5s; each window re-bases
    # it on its own end. Values below 0 never count as late for any allowed lateness >= 0.
    sw = ServiceWindows((HOPPING,))
    added = timed_add(sw, [T + 3 * S], [T + 16 * S], T + 5 * S, T + 15 * S)
    assert added.stragglers == Counter({(HK, T - 20 * S): 1})
    got = {w - T: agg.overdue for (_, w), agg in sw.windows(added.touched, T + 5 * S).items()}
    assert set(got) == {-20 * S, -10 * S, 0}
    assert check_digest(got[-20 * S], [5 * S])
    assert check_digest(got[-10 * S], [-5 * S])
    assert check_digest(got[0], [-15 * S])


@pytest.mark.parametrize("specs", TIMED_SPECS, ids=lambda specs: "+".join(s.key for s in specs))
@pytest.mark.parametrize("lateness", [0, 7 * S, 25 * S])
@pytest.mark.parametrize("seed", range(3))
def test_add_time_classes_and_overdue_agree_with_the_definition(
    specs: tuple[WindowSpec, ...], lateness: int, seed: int
) -> None:
    """Random batches, advancing watermark: every (window, event) pair against brute force."""
    rng = np.random.default_rng(100 + seed)
    sw = ServiceWindows(specs)
    pane = sw.pane_ms
    longest = max(spec.size_ms for spec in specs)  # old enough events to be late for any spec
    watermark, max_seen = 0, None
    # accepted events so far: (event time, frontier at arrival, lateness or None)
    seen: list[tuple[int, int | None, int | None]] = []
    totals: Counter[str] = Counter()
    for b in range(8):
        now = T + b * 15 * S
        n = int(rng.integers(0, 9))
        times = near_boundaries(rng, now, n, longest)
        arrival = (np.array(times, dtype=np.float64) + rng.integers(0, 90 * S, n)).tolist()
        arrival = [math.nan if rng.random() < 0.15 else a for a in arrival]
        front = max_seen  # the frontier: max event time of the batches before this one
        if watermark > 0:
            assert front == watermark + lateness
        added = timed_add(sw, times, arrival, watermark, front)

        exp_late: dict[tuple[str, int], list[int]] = {}
        exp_strag: Counter[tuple[str, int]] = Counter()
        accepted = []
        for i, t in enumerate(times):
            ends = []
            for spec in specs:
                for w in windows_of(t, spec):
                    end = w + spec.size_ms
                    ends.append(end)
                    if end <= watermark:
                        exp_late.setdefault((spec.key, w), []).append(i)
                    elif front is not None and end <= front:
                        exp_strag[(spec.key, w)] += 1
            if max(ends) > watermark:
                accepted.append(i)

        assert added.late_counts() == Counter({k: len(v) for k, v in exp_late.items()})
        assert added.stragglers == exp_strag
        for (key, w), idx in exp_late.items():
            late = added.late[(key, w)]
            known = [arrival[i] - times[i] for i in idx if not math.isnan(arrival[i])]
            totals["exact"] += check_digest(late.lateness, known)
            assert late.lateness.nan_count == len(idx) - len(known)
            end = w + size_of(key)
            check_digest(late.overdue, [0 if front is None else front - end] * len(idx))
        assert added.touched == {times[i] - times[i] % pane for i in accepted}
        totals["late"] += sum(len(v) for v in exp_late.values())
        totals["stragglers"] += sum(exp_strag.values())

        for i in accepted:
            a = arrival[i]
            seen.append((times[i], front, None if math.isnan(a) else int(a) - times[i]))
        for (spec, w), agg in sw.windows(added.touched, watermark).items():
            end = w + spec.size_ms
            members = [e for e in seen if w <= e[0] < end]
            assert agg.count == len(members)
            overdue = [f - end for t, f, _ in members if f is not None and f >= t - t % pane + pane]
            totals["exact-overdue"] += check_digest(agg.overdue, overdue)
            totals["overdue"] += len(overdue)
            check_digest(agg.lateness, [x for _, _, x in members if x is not None])

        sw.evict(watermark)
        if times:
            max_seen = max(times) if max_seen is None else max(max_seen, max(times))
            watermark = max(watermark, max_seen - lateness)
    # the random batches did exercise every path
    assert totals["late"] > 0 and totals["exact"] > 0
    assert (totals["stragglers"] > 0) is (lateness > 0)
    if lateness == 0 and specs == (TUMBLING,):
        # frontier == watermark < the end of any accepted event's window == its pane's end
        assert totals["overdue"] == 0
    else:
        assert totals["overdue"] > 0 and totals["exact-overdue"] > 0


# --- ServiceWindows with a session spec --------------------------------------------------------
#
# Gap 20 s and buckets of 10 s, as in test_sessions.py.

SESSION_SPEC = WindowSpec.session(20 * S, 10 * S)
SPECS = (TUMBLING, SESSION_SPEC)


def sw_add(
    sw: ServiceWindows, times: Sequence[int], users: Sequence[str | None], watermark: int
) -> set[int]:
    n = len(times)
    return sw.add(
        np.array(times, dtype=np.int64),
        np.full(n, 1.0),
        np.full(n, 200, dtype=np.int64),
        np.array(users, dtype=object),
        watermark,
    ).touched


def test_service_windows_build_sessions_from_the_session_spec() -> None:
    sw = ServiceWindows(SPECS)
    assert sw.window_specs == (TUMBLING,) and sw.pane_ms == 10 * S
    assert sw.sessions is not None and sw.sessions.spec == SESSION_SPEC
    assert ServiceWindows((TUMBLING,)).sessions is None
    with pytest.raises(ValueError, match="at most one"):
        ServiceWindows((TUMBLING, SESSION_SPEC, WindowSpec.session(30 * S, 10 * S)))


def test_service_windows_report_touched_session_buckets_once() -> None:
    #   |T        |T+10     |T+20     |T+30     |T+40
    #    x      x                                         a: [T+1, T+8]   closes at T+28
    #        x                                            b: [T+5]        closes at T+25
    #                                 W         x         batch 2 at W=T+30: c at T+40 (open)
    sw = ServiceWindows(SPECS)
    panes = sw_add(sw, [T + 1 * S, T + 5 * S, T + 8 * S], ["a", "b", "a"], 0)
    assert set(sw.windows(panes, 0)) == {(TUMBLING, T)}  # no session closed yet
    panes = sw_add(sw, [T + 40 * S], ["c"], T + 30 * S)
    out = sw.windows(panes, T + 30 * S)
    assert set(out) == {(TUMBLING, T + 40 * S), (SESSION_SPEC, T)}
    assert lengths_of(out[(SESSION_SPEC, T)]) == (2, 0, 7_000, 3_500)
    assert round(out[(SESSION_SPEC, T)].users.estimate()) == 2
    # reported once: the next call without new closes has no session bucket
    assert sw.windows(set(), T + 30 * S) == {}
    assert set(sw.windows(panes, T + 30 * S)) == {(TUMBLING, T + 40 * S)}


def test_service_windows_accumulate_session_buckets_until_windows_is_called() -> None:
    sw = ServiceWindows(SPECS)
    sw_add(sw, [T + 1 * S, T + 12 * S], ["a", "b"], 0)
    sw_add(sw, [T + 50 * S], ["c"], T + 25 * S)  # closes a (bucket T)
    sw_add(sw, [T + 55 * S], ["c"], T + 40 * S)  # closes b (bucket T+10)
    out = sw.windows(set(), T + 40 * S)
    assert set(out) == {(SESSION_SPEC, T), (SESSION_SPEC, T + 10 * S)}
    assert sw.windows(set(), T + 40 * S) == {}


def test_service_windows_evict_session_buckets() -> None:
    sw = ServiceWindows(SPECS)
    sw_add(sw, [T + 1 * S], ["a"], 0)
    sw_add(sw, [T + 50 * S], ["c"], T + 25 * S)
    sw.windows(set(), T + 25 * S)
    assert sw.sessions is not None
    sw.evict(T + 30 * S - 1)
    assert set(sw.sessions.buckets) == {T}
    sw.evict(T + 30 * S)  # T + 10 s + 20 s
    assert sw.sessions.buckets == {}
    assert open_of(sw.sessions) == [("c", T + 50 * S, T + 50 * S, 1)]


def test_service_windows_bytes_keep_open_sessions() -> None:
    sw = ServiceWindows(SPECS)
    sw_add(sw, [T + 1 * S, T + 8 * S, T + 22 * S], ["a", "a", 'é\x1f"q'], 0)
    sw_add(sw, [T + 40 * S], ["b"], T + 28 * S)  # closes a into bucket T
    sw.windows(set(), T + 28 * S)
    back = ServiceWindows.from_bytes(sw.to_bytes(), (SESSION_SPEC, TUMBLING))  # any order of specs
    assert back.sessions is not None and sw.sessions is not None
    assert (
        open_of(back.sessions)
        == open_of(sw.sessions)
        == [
            ("b", T + 40 * S, T + 40 * S, 1),
            ('é\x1f"q', T + 22 * S, T + 22 * S, 1),
        ]
    )
    assert back.sessions.buckets[T].to_bytes() == sw.sessions.buckets[T].to_bytes()
    assert back.windows(set(), T + 28 * S) == {}  # what was reported stays reported
    for x in (sw, back):
        sw_add(x, [T + 90 * S], ["b"], T + 70 * S)  # closes both open sessions
    a, b = sw.windows(set(), T + 70 * S), back.windows(set(), T + 70 * S)
    assert set(a) == set(b) == {(SESSION_SPEC, T + 20 * S), (SESSION_SPEC, T + 40 * S)}
    assert {k: v.to_bytes() for k, v in a.items()} == {k: v.to_bytes() for k, v in b.items()}
    assert sw.sessions.to_bytes() == back.sessions.to_bytes()


# --- sliding windows: the job's panes against a replay of the events ----------------------------


def _stream(rng: np.random.Generator, n: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of (event times, statuses): a steady clock with bursts, jitter and late events."""
    t = 0
    while n > 0:
        k = int(min(n, rng.integers(1, 120)))
        n -= k
        t += int(rng.integers(500, 4_000))
        times = t + rng.integers(-6_000, 1_000, k)  # out of order, some far behind
        burst = rng.random(k) < 0.2
        times[burst] = t - int(rng.integers(0, 3_000))  # many events in one ms: a busy moment
        status = np.where(rng.random(k) < 0.15, 503, 200)
        yield times.astype(np.int64), status.astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_every_row_equals_the_events_that_arrived_while_it_was_open(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tumbling = WindowSpec.tumbling(2_000)
    size = int(rng.choice([1_000, 3_000, 6_000, 7_000]))  # shorter, longer, odd multiples
    sliding = WindowSpec.sliding(size, 2_000, int(rng.choice([1, 10, 100])))
    lateness = int(rng.integers(0, 5_000))
    sw = ServiceWindows((tumbling, sliding))
    watermark = 0
    seen: list[tuple[int, int, int]] = []  # (event time, status, watermark it arrived under)
    rows: dict[int, WindowAgg] = {}
    for times, status in _stream(rng, 1_500):
        added = sw.add(
            times, np.full(len(times), 5.0), status, np.full(len(times), "u", object), watermark
        )
        for (spec, start), agg in sw.windows(added.touched, watermark).items():
            if spec == sliding:
                rows[start] = WindowAgg.from_bytes(agg.to_bytes())
        seen += [(t, s, watermark) for t, s in zip(times.tolist(), status.tolist(), strict=True)]
        sw.evict(watermark)
        watermark = advance_watermark(watermark, times.tolist(), lateness)

    assert len(rows) > 20
    for start, agg in rows.items():
        end = sliding.end(start)
        open_ = [(t, s) for t, s, wm in seen if wm < end]  # arrived while the row was open
        frame = frame_of(sliding, start)
        in_reach = [(t, s) for t, s in open_ if frame.origin_ms <= t < end]
        want = brute_peak([t for t, _ in in_reach], [s >= 500 for _, s in in_reach], frame)
        m = agg.metrics(sliding.size_ms)
        got = (m["peak_events"], m["peak_start"], m["peak_errors"], m["peak_errors_start"])
        assert got == want, (start, got, want)
        assert m["count"] == sum(start <= t < end for t, _ in open_)
    # every row with events in its reach while it was open was emitted
    starts = {
        end - size  # rows ending in (t, t + size + step]: their peak intervals reach t
        for t, _, wm in seen
        for end in range(t - t % 2_000 + 2_000, t + size + 2_001, 2_000)
        if wm < end
    }
    assert starts <= set(rows)
