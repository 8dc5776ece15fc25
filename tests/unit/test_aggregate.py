"""Per-service window state and the `applyInPandasWithState` function (jobs/state/aggregate.py).

`ServiceWindows` keeps one WindowAgg per pane (a tumbling window of the gcd of every spec's size
and slide) and builds tumbling and hopping windows by merging panes. `make_state_fn` is driven
directly with pandas frames and `FakeGroupState`, a stand-in that implements the part of
`pyspark.sql.streaming.state.GroupState` the function relies on (`exists`, `get`, `update`,
`getCurrentWatermarkMs`): that is the function's contract with Spark.

Timelines in the comments: `[` / `)` the closed start and open end of a window, `|` a pane
boundary, `x` an event, `W` the watermark in force for the batch. Tumbling windows are 10 s
long (spec key "10000"); hopping windows are 30 s long every 10 s (spec key "30000-10000"),
so both are made of 10 s panes. T is a boundary of every window here.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import struct
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

from jobs.panes.windows import ServiceWindows
from jobs.parse.columns import decode_columns
from jobs.parse.parser import RecordKind
from jobs.state.aggregate import make_state_fn
from jobs.state.codec import DeadCounts, ShardState
from jobs.state.rows import OUTPUT_SCHEMA
from jobs.summary.late_events import members
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import summarise, summary_frame
from tidegauge.core.events import OVERFLOW_SERVICE
from tidegauge.core.freshness import merge_times
from tidegauge.core.metrics import PERCENTILES, LateAgg, WindowAgg
from tidegauge.core.windows import WindowSpec

S = 1_000
SIZE = 10 * S
T = 1_795_341_600_000  # a boundary of 10 s, 30 s and 60 s windows
TUMBLING = WindowSpec.tumbling(SIZE)
HOPPING = WindowSpec(30 * S, 10 * S)
TK, HK = TUMBLING.key, HOPPING.key  # "10000", "30000-10000"
OUTPUT_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]


def ms(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def add(
    sw: ServiceWindows,
    times: Sequence[int],
    watermark: int,
    latency: Sequence[float] | None = None,
    status: Sequence[int] | None = None,
    users: Sequence[str | None] | None = None,
) -> tuple[set[int], Counter[tuple[str, int]]]:
    """`sw.add` with defaults for the columns a test does not care about."""
    n = len(times)
    added = sw.add(
        ms(*times),
        np.array(latency if latency is not None else [1.0] * n, dtype=np.float64),
        np.array(status if status is not None else [200] * n, dtype=np.int64),
        np.array(users if users is not None else ["u"] * n, dtype=object),
        watermark,
    )
    return added.touched, added.late_counts()


def counts(sw: ServiceWindows) -> dict[int, int]:
    """Pane start -> events in it."""
    return {p: a.count for p, a in sw.panes.items()}


def filled(specs: tuple[WindowSpec, ...], panes: dict[int, int]) -> ServiceWindows:
    """ServiceWindows whose panes hold these event counts (one event per ms from the start).

    Added with a watermark before every window (0 would already close windows before the epoch).
    """
    sw = ServiceWindows(specs)
    for start, n in panes.items():
        add(sw, [start + i for i in range(n)], -(2**62))
    assert counts(sw) == panes
    return sw


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


def _windows_of(t: int, spec: WindowSpec) -> list[int]:
    """Starts of the windows holding event time t, straight from the definition (no panes)."""
    first = (t - spec.size_ms) // spec.slide_ms + 1  # smallest k with k * slide + size > t
    return [k * spec.slide_ms for k in range(first, t // spec.slide_ms + 1)]


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
                for w in _windows_of(t, spec):
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
            for w in _windows_of(t, spec)
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
    assert sw.panes == direct
    assert (sw.panes[T].count, sw.panes[T].errors, sw.panes[T].latency.count) == (3, 0, 2)
    assert (sw.panes[T + SIZE].count, sw.panes[T + SIZE].errors) == (2, 2)


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
                assert all(w + spec.size_ms <= watermark for w in _windows_of(p, spec))
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


def test_dead_counts_add_and_round_trip() -> None:
    counts = DeadCounts()
    counts.add(["invalid_json", "empty", "invalid_json"])
    counts.add([])
    counts.add(iter(["wrong_type"]))
    assert counts.by_reason == {"invalid_json": 2, "empty": 1, "wrong_type": 1}
    back = DeadCounts.from_bytes(counts.to_bytes())
    assert back == counts
    assert DeadCounts.from_bytes(DeadCounts().to_bytes()) == DeadCounts()


# --- make_state_fn: the contract with applyInPandasWithState ----------------------------------


class FakeGroupState:
    """The part of Spark's GroupState that the state function uses (properties as in PySpark)."""

    def __init__(self, watermark_ms: int, value: tuple[Any, ...] | None = None) -> None:
        self.watermark_ms = watermark_ms
        self._value = value
        self.updates = 0

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("state does not exist")
        return tuple(self._value)

    def update(self, new_value: tuple[Any, ...]) -> None:
        assert isinstance(new_value, tuple) and new_value is not None
        self._value = new_value
        self.updates += 1

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 (Spark's name)
        return self.watermark_ms

    def remove(self) -> None:
        self._value = None


def event_frame(
    service: str,
    times: list[int],
    latency: list[float] | None = None,
    status: list[int | None] | None = None,
    users: list[str | None] | None = None,
) -> pd.DataFrame:
    """Parsed rows of one service as Spark hands them over (the columns that matter).

    latency_ms is a double (NaN = absent), status a nullable int, user_id a string or None.
    """
    n = len(times)
    return pd.DataFrame(
        {
            "partition": np.zeros(n, dtype=np.int32),
            "offset": np.arange(n, dtype=np.int64),
            "kafka_ms": np.full(n, T, dtype=np.int64),
            "kind": [RecordKind.EVENT] * n,
            "event_time": pd.to_datetime(np.array(times, dtype=np.int64), unit="ms", utc=True),
            "event_ms": np.array(times, dtype=np.int64),
            "service": [service] * n,
            "user_id": pd.Series(users if users is not None else [f"u{i}" for i in range(n)]),
            "latency_ms": np.array(latency if latency is not None else [10.0] * n, np.float64),
            "status": pd.array(status if status is not None else [200] * n, dtype="Int32"),
            # distinct across frames: the state function de-duplicates by id (test_dedup.py)
            "event_id": [f"e{next(_EVENT_IDS)}" for _ in range(n)],
        }
    )


_EVENT_IDS = itertools.count()


def _agg_of(frames: list[pd.DataFrame], start: int, end: int) -> WindowAgg:
    """What a window should hold: the frames' rows of [start, end), added frame by frame."""
    agg = WindowAgg()
    for f in frames:
        sel = f[(f["event_ms"] >= start) & (f["event_ms"] < end)]
        agg.add(
            sel["latency_ms"].to_numpy(np.float64),
            sel["status"].to_numpy(np.int64, na_value=-1),
            sel["user_id"].to_numpy(object),
        )
        agg.lateness.update((sel["kafka_ms"] - sel["event_ms"]).to_numpy(np.float64))
    return agg


DEAD_COLUMNS = ["partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size"]


def dead_frame(rows: list[tuple[int, int, int, str, str, bytes, int]]) -> pd.DataFrame:
    pdf = pd.DataFrame(rows, columns=DEAD_COLUMNS)
    pdf.insert(3, "kind", RecordKind.DEAD)
    pdf["service"] = None
    pdf["event_ms"] = None
    return pdf


_PARSED_COLUMNS = [
    *("partition", "offset", "kafka_ms", "kind", "event_ms", "service", "user_id"),
    *("latency_ms", "status", "event_id", "reason", "detail", "raw", "raw_size"),
]


def summaries(
    frames: list[pd.DataFrame], watermark: int, cfg: ExecutorConfig
) -> list[pd.DataFrame]:
    """What the read task hands the state function for these rows (jobs/summary/summarise.py).

    The frames are the records of one chunk (a batch read by one task), summarised against the
    watermark the state function will get; `proc_ms`, where a frame has it, is the batch's time.
    """
    if not frames:
        return []
    pdf = pd.concat(frames, ignore_index=True)
    for c in _PARSED_COLUMNS:
        if c not in pdf:
            pdf[c] = None
    proc = pdf["proc_ms"].dropna() if "proc_ms" in pdf else pd.Series([], dtype="int64")
    cols = summarise(pdf, watermark, int(proc.iloc[0]) if len(proc) else None, cfg)
    return [summary_frame(cols)]


def run(
    key: tuple[Any, ...],
    frames: list[pd.DataFrame],
    state: FakeGroupState,
    specs: tuple[WindowSpec, ...] = (TUMBLING,),
) -> pd.DataFrame:
    if key[0] == RecordKind.EVENT:
        key = (RecordKind.EVENT, 0)
    cfg = ExecutorConfig(specs)
    rows = summaries(frames, state.watermark_ms, cfg)
    out = list(make_state_fn(cfg)(key, iter(rows), state))
    for f in out:
        assert list(f.columns) == OUTPUT_COLUMNS
    if not out:
        return pd.DataFrame(columns=OUTPUT_COLUMNS)
    return pd.concat(out, ignore_index=True)


def rows_of(out: pd.DataFrame, kind: str, *cols: str) -> set[tuple[Any, ...]]:
    sel = out[out["kind"] == kind]
    return {tuple(r) for r in sel[list(cols)].itertuples(index=False, name=None)}


def kept_late_events(out: pd.DataFrame) -> list[dict[str, Any]]:
    """The late events a state function's output keeps, as stored (jobs/summary/late_events.py)."""
    events = []
    for r in out[out["kind"] == "late_events"].to_dict("records"):
        cols = decode_columns(r["agg"])
        assert r["count"] == len(cols["offset"])
        events += [json.loads(m) for m in members(cols, 0)]
    return events


def window_aggs(out: pd.DataFrame) -> dict[tuple[str, int], WindowAgg]:
    """(spec key, start) -> the window's WindowAgg, after checking each row is self-consistent."""
    found = {}
    for r in out[out["kind"] == "window"].to_dict("records"):
        agg = WindowAgg.from_bytes(r["agg"])
        size = WindowSpec.from_key(r["spec"]).size_ms
        assert r["count"] == agg.count
        assert json.loads(r["metrics"]) == agg.metrics(size)  # metrics computed from the agg
        for c in ("partition", "offset", "reason", "raw"):
            assert r[c] is None or pd.isna(r[c])
        found[(r["spec"], int(r["window_start"]))] = agg
    return found


def shard_blob(service: str, sw: ServiceWindows) -> bytes:
    """State of the one-shard event group holding `service`'s windows."""
    return ShardState(1, {service: sw}).to_bytes()


def state_counts(
    state: FakeGroupState, specs: tuple[WindowSpec, ...], service: str = "api"
) -> dict[int, int]:
    shard = ShardState.from_bytes(state.get[0], ExecutorConfig(specs))
    return counts(shard.services[service]) if service in shard.services else {}


def test_state_fn_events_first_batch() -> None:
    #   T         T+10s     T+20s
    #   [x-x--x---)[x-------)        W = 0: nothing late
    frames = [
        event_frame(
            "api",
            [T + 1 * S, T + 2 * S, T + 11 * S],
            latency=[12.5, np.nan, 40.0],
            status=[200, 503, None],
            users=["alice", "bob", None],
        ),
        event_frame("api", [T + 5 * S], latency=[7.25], status=[500], users=["alice"]),
    ]
    state = FakeGroupState(0)
    out = run((RecordKind.EVENT, "api"), frames, state)
    assert rows_of(out, "window", "spec", "service", "window_start", "count") == {
        (TK, "api", T, 3),
        (TK, "api", T + SIZE, 1),
    }
    # (broker times reach the sink through the chunk's `times` row, in the dead-letter group)
    assert set(out["kind"]) == {"window", "arrivals"}
    aggs = window_aggs(out)
    assert aggs == {
        (TK, T): _agg_of(frames, T, T + SIZE),
        (TK, T + SIZE): _agg_of(frames, T + SIZE, T + 2 * SIZE),
    }
    m = json.loads(out[out["window_start"] == T]["metrics"].iloc[0])
    assert (m["count"], m["errors"], m["latency_count"], m["distinct_users"]) == (3, 2, 2, 2)
    assert m["events_per_s"] == 0.3 and m["latency_mean"] == pytest.approx((12.5 + 7.25) / 2)
    assert state.updates == 1
    assert state_counts(state, (TUMBLING,)) == {T: 3, T + SIZE: 1}


def test_state_fn_tumbling_and_hopping_across_batches() -> None:
    specs = (TUMBLING, HOPPING)
    # batch 1, W = 0:
    #   T         T+10s     T+20s
    #   |x-x------|x--------|
    state = FakeGroupState(0)
    first = [event_frame("api", [T + 1 * S, T + 2 * S, T + 11 * S])]
    out1 = run((RecordKind.EVENT, "api"), first, state, specs)
    assert rows_of(out1, "window", "spec", "window_start", "count") == {
        (TK, T, 2),
        (TK, T + SIZE, 1),
        (HK, T - 20 * S, 2),
        (HK, T - 10 * S, 3),
        (HK, T, 3),
        (HK, T + 10 * S, 1),
    }
    assert rows_of(out1, "late", "spec", "window_start") == set()

    # batch 2, W = T+15s:
    #   T-20s     T-10s     T         T+10s     T+20s     T+30s     T+40s
    #                       |--x------|-x---W---|----x----|
    #   tumbling            [--x------)                     T ended: late
    #   hopping   [------------x------)                     T-20s ended: late
    #             [------------x--------x-------)           T-10s open: pane T keeps the row
    state.watermark_ms = T + 15 * S
    second = [event_frame("api", [T + 3 * S, T + 12 * S]), event_frame("api", [T + 25 * S])]
    out2 = run((RecordKind.EVENT, "api"), second, state, specs)
    assert rows_of(out2, "late", "spec", "service", "window_start", "count") == {
        (TK, "api", T, 1),
        (HK, "api", T - 20 * S, 1),
    }
    # absolute counts of every open window containing a touched pane; tumbling T is closed
    assert rows_of(out2, "window", "spec", "window_start", "count") == {
        (TK, T + SIZE, 2),
        (TK, T + 2 * SIZE, 1),
        (HK, T - 10 * S, 3 + 2),
        (HK, T, 3 + 2 + 1),
        (HK, T + 10 * S, 2 + 1),
        (HK, T + 20 * S, 1),
    }
    both = first + second
    for (key, start), agg in window_aggs(out2).items():
        size = WindowSpec.from_key(key).size_ms
        expected = _agg_of(both, start, start + size)
        expected.overdue = agg.overdue  # overdue has its own tests (test_overdue_*)
        assert agg == expected, (key, start - T)
    # window rows come sorted by spec key then start, late rows after them
    kinds = [k for k in out2["kind"] if k in ("window", "late")]
    assert kinds == ["window"] * 6 + ["late"] * 2
    windows = out2[out2["kind"] == "window"]
    assert list(zip(windows["spec"], windows["window_start"], strict=True)) == sorted(
        zip(windows["spec"], windows["window_start"], strict=True)
    )
    late_rows = out2[out2["kind"] == "late"]
    assert late_rows["metrics"].isna().all()
    # a late row carries the LateAgg of its window's late events in this batch
    for r in late_rows.to_dict("records"):
        assert LateAgg.from_bytes(r["agg"]).count == r["count"]
    # pane T stays: hopping window T (until T+30s) still needs it
    assert state_counts(state, specs) == {T: 3, T + SIZE: 2, T + 2 * SIZE: 1}

    # batch 3, W = T+30s: a row at T+5s is late for all four windows holding it; pane T goes
    state.watermark_ms = T + 30 * S
    out3 = run((RecordKind.EVENT, "api"), [event_frame("api", [T + 5 * S])], state, specs)
    assert rows_of(out3, "late", "spec", "window_start", "count") == {
        (TK, T, 1),
        (HK, T - 20 * S, 1),
        (HK, T - 10 * S, 1),
        (HK, T, 1),
    }
    assert rows_of(out3, "window", "spec", "window_start") == set()
    assert state_counts(state, specs) == {T + SIZE: 2, T + 2 * SIZE: 1}


def test_state_fn_events_late_only_batch() -> None:
    state = FakeGroupState(
        T + 3 * SIZE, (shard_blob("web", filled((TUMBLING,), {T + 3 * SIZE: 4})),)
    )
    out = run(
        (RecordKind.EVENT, "web"),
        [event_frame("web", [T, T + 1, T + SIZE, T + 3 * SIZE - 1])],
        state,
    )
    assert rows_of(out, "late", "spec", "service", "window_start", "count") == {
        (TK, "web", T, 2),
        (TK, "web", T + SIZE, 1),
        (TK, "web", T + 2 * SIZE, 1),
    }
    assert rows_of(out, "window", "window_start") == set()
    assert state_counts(state, (TUMBLING,), "web") == {T + 3 * SIZE: 4}


def test_state_fn_events_empty_frame_emits_nothing_but_keeps_state() -> None:
    state = FakeGroupState(0, (shard_blob("api", filled((TUMBLING,), {T: 3})),))
    out = run((RecordKind.EVENT, "api"), [event_frame("api", [])], state)
    assert len(out) == 0
    assert state_counts(state, (TUMBLING,)) == {T: 3}


@pytest.mark.parametrize(
    ("status", "users"),
    [
        (pd.array([200, None, 503], dtype="Int32"), pd.Series(["a", None, "a"], dtype=object)),
        (pd.Series([200.0, np.nan, 503.0]), pd.Series(["a", np.nan, "a"], dtype=object)),
        (pd.Series([200, None, 503], dtype=object), pd.array(["a", None, "a"], dtype="string")),
    ],
    ids=["Int32-None", "float-NaN", "object-None+string-NA"],
)
def test_state_fn_missing_status_and_user_in_any_pandas_form(status: Any, users: Any) -> None:
    # Arrow -> pandas may give a nullable int column as Int32 or as float64 with NaN, and a
    # string column with None or NA; every form means "absent", never an error or a user
    frame = event_frame("api", [T + 1, T + 2, T + 3], latency=[1.0, np.nan, 3.0])
    frame["status"] = status
    frame["user_id"] = users
    out = run((RecordKind.EVENT, "api"), [frame], FakeGroupState(0))
    ((_, agg),) = window_aggs(out).items()
    assert (agg.count, agg.errors, agg.latency.count, round(agg.users.estimate())) == (3, 1, 2, 1)


def test_state_fn_refuses_state_of_other_window_specs() -> None:
    state = FakeGroupState(0, (filled((WindowSpec.tumbling(5 * S),), {T: 3}).to_bytes(),))
    with pytest.raises(ValueError, match="--checkpoint"):
        run((RecordKind.EVENT, "api"), [event_frame("api", [T])], state, (TUMBLING,))


def test_state_fn_dead_letters_pass_through_with_absolute_counts() -> None:
    state = FakeGroupState(T)
    first = dead_frame(
        [
            (0, 10, T + 1, "invalid_json", "not JSON: Expecting value", b"{oops", 5),
            (1, 11, T + 2, "empty", "record has no value", b"", 0),
        ]
    )
    second = dead_frame([(2, 12, T + 3, "invalid_json", "not JSON: x", b"x" * 4096, 10_000)])
    out = run((RecordKind.DEAD, None), [first, second], state)
    dead = out[out["kind"] == "dead"]
    assert [tuple(r) for r in dead[DEAD_COLUMNS].itertuples(index=False, name=None)] == [
        (0, 10, T + 1, "invalid_json", "not JSON: Expecting value", b"{oops", 5),
        (1, 11, T + 2, "empty", "record has no value", b"", 0),
        (2, 12, T + 3, "invalid_json", "not JSON: x", b"x" * 4096, 10_000),
    ]
    assert dead["service"].isna().all() and dead["window_start"].isna().all()
    assert dead["spec"].isna().all() and dead["agg"].isna().all()
    assert rows_of(out, "dead_count", "reason", "count") == {("invalid_json", 2), ("empty", 1)}
    assert out[out["kind"] == "dead_count"]["partition"].isna().all()

    # next batch: the counts are absolute (every reason, not only the ones seen now)
    out2 = run(
        (RecordKind.DEAD, None),
        [dead_frame([(0, 13, T + 4, "invalid_json", "not JSON", b"[", 1)])],
        state,
    )
    assert len(out2[out2["kind"] == "dead"]) == 1
    assert rows_of(out2, "dead_count", "reason", "count") == {("invalid_json", 3), ("empty", 1)}
    assert DeadCounts.from_bytes(state.get[0]).by_reason == {"invalid_json": 3, "empty": 1}


def test_state_fn_heartbeats_produce_nothing() -> None:
    hb = pd.DataFrame(
        {"kind": [RecordKind.HEARTBEAT] * 2, "event_ms": [T, T + S], "service": [None, None]}
    )
    frames: Iterator[pd.DataFrame] = iter([hb, hb])
    state = FakeGroupState(T)
    out = list(make_state_fn((TUMBLING, HOPPING))((RecordKind.HEARTBEAT, None), frames, state))
    assert out == []
    assert next(frames, None) is None  # the frames were consumed
    assert not state.exists and state.updates == 0


# --- time rules: late, straggler and overdue per (window, event) -------------------------------
#
# With the frontier F (max event time seen before the batch = W + allowed lateness), every
# (window, event) pair is late (end <= W), a straggler (W < end <= F) or on time. Late pairs
# go to `Added.late` (a LateAgg per window: count, lateness, overdue F - end); stragglers are
# counted per window. An accepted event whose frontier had passed its PANE's end adds
# F - pane end to the pane's overdue digest, which windows re-base to F - window end.

import math  # noqa: E402

from jobs.summary.summarise import arrival_counts  # noqa: E402
from sketches.tdigest import TDigest  # noqa: E402
from tidegauge.core.windows import LATE, ON_TIME, STRAGGLER  # noqa: E402


def check_digest(d: TDigest, expected: Sequence[float]) -> bool:
    """Exact stats always; every value when the digest keeps them all. True if it did."""
    assert d.count == len(expected)
    if not expected:
        return False
    # integer-valued ms: min, max and sum are exact in float64
    assert (d.min, d.max, d.sum) == (min(expected), max(expected), float(sum(expected)))
    means, weights = d.centroids
    if not (weights == 1.0).all():
        return False
    assert sorted(means.tolist()) == sorted(expected)
    return True


def timed_add(
    sw: ServiceWindows,
    times: list[int],
    arrival: list[float],
    watermark: int,
    front: int | None,
) -> Any:
    n = len(times)
    return sw.add(
        ms(*times),
        np.full(n, 1.0),
        np.full(n, 200, dtype=np.int64),
        np.array([f"u{i}" for i in range(n)], dtype=object),
        watermark,
        arrival_ms=np.array(arrival, dtype=np.float64),
        frontier_ms=front,
    )


E = T + SIZE  # end of the tumbling window [T, T+10s)


def near_boundaries(rng: np.random.Generator, now: int, n: int, longest: int) -> list[int]:
    """n event times up to 50 s + `longest` before `now`, on a 5 s grid give or take 1 ms.

    Window ends, watermarks and frontiers then often coincide or miss by one ms, which is where
    the rules (end <= W, end <= F) can go wrong; uniform ms times would almost never hit them.
    """
    steps = rng.integers(-(50 * S + longest) // (5 * S), 2, n)
    jitter = rng.choice(np.array([-1, 0, 0, 1]), n)
    return (now + 5 * S * steps + jitter).tolist()


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


def _size_of(key: str) -> int:
    return WindowSpec.from_key(key).size_ms


TIMED_SPECS = [
    (TUMBLING,),
    (HOPPING,),
    (TUMBLING, HOPPING),
    (WindowSpec.tumbling(60 * S), WindowSpec(60 * S, 15 * S)),
]


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
                for w in _windows_of(t, spec):
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
            end = w + _size_of(key)
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


# --- ShardState ---------------------------------------------------------------------------------

SESSION = WindowSpec.session(30 * S, SIZE)


def _shard(shards: int, specs: tuple[WindowSpec, ...]) -> ShardState:
    api, web, other = ServiceWindows(specs), ServiceWindows(specs), ServiceWindows(specs)
    timed_add(api, [T + 1, T + 2, T + SIZE + 5], [T + 9 * S, math.nan, T + 20 * S], 0, None)
    timed_add(web, [T + 4 * S], [T + 5 * S], T - 5 * S, T + 2 * S)
    timed_add(other, [T - 100 * S], [T], T - 200 * S, T - 90 * S)
    return ShardState(shards, {"api": api, "web": web, "sérvice ✓": other})


@pytest.mark.parametrize("specs", [(TUMBLING,), (TUMBLING, HOPPING), (HOPPING, SESSION)])
@pytest.mark.parametrize("shards", [1, 3])
def test_shard_state_round_trip(specs: tuple[WindowSpec, ...], shards: int) -> None:
    cfg = ExecutorConfig(specs, shards=shards)
    for shard in (ShardState(shards), _shard(shards, specs)):
        blob = shard.to_bytes()
        back = ShardState.from_bytes(blob, cfg)
        assert back.shards == shards
        assert sorted(back.services) == sorted(shard.services)
        for name, sw in shard.services.items():
            assert back.services[name].panes == sw.panes  # digests included
            assert back.services[name].to_bytes() == sw.to_bytes()  # sessions included
        assert back.to_bytes() == blob
    if SESSION in specs:
        sessions = ShardState.from_bytes(_shard(shards, specs).to_bytes(), cfg)
        assert sessions.services["api"].sessions is not None
        assert sorted(sessions.services["api"].sessions.users.tolist()) == ["u0", "u1", "u2"]


@pytest.mark.parametrize(("written", "asked"), [(3, 1), (1, 3), (3, 4)])
def test_shard_state_refuses_another_shard_count(written: int, asked: int) -> None:
    blob = _shard(written, (TUMBLING,)).to_bytes()
    with pytest.raises(ValueError, match="--state-shards") as e:
        ShardState.from_bytes(blob, ExecutorConfig((TUMBLING,), shards=asked))
    message = str(e.value)
    assert f"{written} state shards" in message and str(asked) in message
    assert "--checkpoint" in message


def test_shard_state_refuses_other_specs_old_state_and_broken_blobs() -> None:
    cfg = ExecutorConfig((TUMBLING,))
    blob = _shard(1, (TUMBLING,)).to_bytes()
    with pytest.raises(ValueError, match="checkpoint holds windows"):
        ShardState.from_bytes(blob, ExecutorConfig((HOPPING,)))
    # what the job wrote before shards: one ServiceWindows per group
    with pytest.raises(ValueError, match="older Tidegauge version"):
        ShardState.from_bytes(filled((TUMBLING,), {T: 1}).to_bytes(), cfg)
    for broken in (b"", b"TGSH", blob[:-1], blob + b"\x00", blob[:20]):
        with pytest.raises(ValueError):
            ShardState.from_bytes(broken, cfg)
    newer = blob[:4] + bytes([blob[4] + 1]) + blob[5:]
    with pytest.raises(ValueError, match="shard state version"):
        ShardState.from_bytes(newer, cfg)


# --- arrival_counts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buckets", "kinds", "expected"),
    [
        ([], [], {}),
        ([T], [ON_TIME], {T: (1, 0, 0)}),
        ([T, T, T], [LATE, LATE, STRAGGLER], {T: (3, 2, 1)}),
        (
            [T + SIZE, T, T + SIZE, T - SIZE],
            [ON_TIME, STRAGGLER, LATE, LATE],
            {T - SIZE: (1, 1, 0), T: (1, 0, 1), T + SIZE: (2, 1, 0)},
        ),
    ],
)
def test_arrival_counts(
    buckets: list[int], kinds: list[int], expected: dict[int, tuple[int, int, int]]
) -> None:
    got = arrival_counts(ms(*buckets), ms(*kinds))
    assert got == expected
    assert all(type(k) is int and all(type(v) is int for v in vs) for k, vs in got.items())


def test_arrival_counts_agree_with_brute_force() -> None:
    rng = np.random.default_rng(21)
    for _ in range(50):
        n = int(rng.integers(0, 200))
        buckets = T + SIZE * rng.integers(-5, 5, n)
        kinds = rng.choice(ms(ON_TIME, STRAGGLER, LATE), n)
        expected = {
            int(b): (
                int(np.sum(buckets == b)),
                int(np.sum((buckets == b) & (kinds == LATE))),
                int(np.sum((buckets == b) & (kinds == STRAGGLER))),
            )
            for b in set(buckets.tolist())
        }
        assert arrival_counts(buckets, kinds) == expected


# --- make_state_fn: what each batch decided about time ------------------------------------------

EVENT_GROUP = (RecordKind.EVENT, 0)


def timed_frame(
    rows: list[tuple[str, int, float, int, int, float]], proc_ms: int | None = None
) -> pd.DataFrame:
    """Event rows (service, event ms, kafka ms or NaN, partition, offset, clock offset or NaN)."""
    n = len(rows)
    col: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * 6
    frame = pd.DataFrame(
        {
            "partition": np.array(col[3], dtype=np.int32),
            "offset": np.array(col[4], dtype=np.int64),
            "kafka_ms": np.array(col[2], dtype=np.float64),  # Spark: a nullable long as float
            "kind": [RecordKind.EVENT] * n, "event_ms": np.array(col[1], dtype=np.int64),
            "service": list(col[0]),
            "user_id": [f"u{o % 7}" for o in col[4]],
            "latency_ms": np.full(n, 10.0),
            "status": pd.array([200] * n, dtype="Int32"),
            "event_id": [f"e{p}-{o}" for p, o in zip(col[3], col[4], strict=True)],
            "clock_offset_ms": np.array(col[5], dtype=np.float64),
        }
    )
    if proc_ms is not None:
        frame["proc_ms"] = np.full(n, proc_ms, dtype=np.int64)
    return frame


def heartbeat_frame(times: list[int], proc_ms: int) -> pd.DataFrame:
    n = len(times)
    return pd.DataFrame(
        {
            "partition": np.zeros(n, dtype=np.int32),
            "offset": np.arange(n, dtype=np.int64),
            "kafka_ms": np.array(times, dtype=np.float64),
            "kind": [RecordKind.HEARTBEAT] * n,
            "event_ms": np.array(times, dtype=np.int64),
            "service": [None] * n,
            "user_id": [None] * n,
            "latency_ms": np.full(n, np.nan),
            "status": pd.array([None] * n, dtype="Int32"),
            "event_id": [None] * n,
            "proc_ms": np.full(n, proc_ms, dtype=np.int64),
        }
    )


def run_cfg(cfg: ExecutorConfig, frames: list[pd.DataFrame], state: FakeGroupState) -> pd.DataFrame:
    rows = summaries(frames, state.watermark_ms, cfg)
    out = list(make_state_fn(cfg)(EVENT_GROUP, iter(rows), state))
    for f in out:
        assert list(f.columns) == OUTPUT_COLUMNS
    if not out:
        return pd.DataFrame(columns=OUTPUT_COLUMNS)
    return pd.concat(out, ignore_index=True)


def _primary(specs: tuple[WindowSpec, ...]) -> int:
    """Smallest tumbling size, else the largest size dividing every size and slide."""
    tumbling = [s.size_ms for s in specs if s.kind == "tumbling"]
    if tumbling:
        return min(tumbling)
    values = [v for s in specs if s.kind != "session" for v in (s.size_ms, s.slide_ms)]
    return max(d for d in range(1, min(values) + 1) if all(v % d == 0 for v in values))


@pytest.mark.parametrize("specs", TIMED_SPECS, ids=lambda specs: "+".join(s.key for s in specs))
@pytest.mark.parametrize("lateness", [0, 20 * S])
@pytest.mark.parametrize("seed", range(2))
def test_state_fn_time_outputs_agree_with_the_definition(
    specs: tuple[WindowSpec, ...], lateness: int, seed: int
) -> None:
    """Several batches, two services in one group, frames split in two chunks and shuffled."""
    rng = np.random.default_rng(200 + seed)
    cfg = ExecutorConfig(specs, allowed_lateness_ms=lateness, late_events_max=10_000)
    size = _primary(specs)
    assert cfg.primary_ms == size
    longest = max(spec.size_ms for spec in specs)
    state = FakeGroupState(0)
    watermark, max_seen, offset = 0, None, 0
    totals: Counter[str] = Counter()
    for b in range(6):
        now, proc = T + b * 15 * S, T + 300 * S + b * 7_001
        rows = []
        for _ in range(int(rng.integers(0, 12))):
            (e,) = near_boundaries(rng, now, 1, longest)
            k = math.nan if rng.random() < 0.15 else float(e + int(rng.integers(-2 * S, 90 * S)))
            clock = math.nan if rng.random() < 0.5 else float(rng.integers(-3 * S, 3 * S))
            service = str(rng.choice(["api", "web"]))
            rows.append((service, e, k, int(rng.integers(0, 3)), offset, clock))
            offset += 1
        frame = timed_frame(rows, proc).sample(frac=1.0, random_state=seed)  # shuffled
        chunks = [frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :]]
        front = max_seen
        state.watermark_ms = watermark
        out = run_cfg(cfg, chunks, state)

        exp_late: Counter[tuple[str, str, int]] = Counter()
        exp_late_lateness: dict[tuple[str, str, int], list[float]] = {}
        exp_strag: Counter[tuple[str, str, int]] = Counter()
        exp_arrivals: Counter[tuple[str, str, int, str]] = Counter()
        exp_late_events = {}
        for service, e, k, p, o, clock in rows:
            for spec in specs:
                for w in _windows_of(e, spec):
                    end = w + spec.size_ms
                    if end <= watermark:
                        exp_late[(spec.key, service, w)] += 1
                        lat = exp_late_lateness.setdefault((spec.key, service, w), [])
                        if not math.isnan(k):
                            lat.append(k - e)
                    elif front is not None and end <= front:
                        exp_strag[(spec.key, service, w)] += 1
            start = e - e % size
            end = start + size
            cls = "late" if end <= watermark else "on_time"
            if cls == "on_time" and front is not None and end <= front:
                cls = "stragglers"
            domains = [("processing", proc - proc % size)]
            if not math.isnan(k):
                domains.append(("broker", int(k) - int(k) % size))
            for domain, bucket in domains:
                exp_arrivals[(domain, service, bucket, "count")] += 1
                exp_arrivals[(domain, service, bucket, cls)] += 1
            if cls == "late":
                exp_late_events[(service, p, o)] = {
                    "window_start": start,
                    "kafka_ms": None if math.isnan(k) else int(k),
                    "metrics": {
                        "event_id": f"e{p}-{o}",
                        "event_time": e,
                        "window_end": end,
                        "watermark": watermark,
                        "behind_ms": watermark - end,
                        "lateness_ms": None if math.isnan(k) else int(k) - e,
                        "clock_offset_ms": None if math.isnan(clock) else int(clock),
                    },
                }

        assert set(out["kind"]) <= {
            "window",
            "late",
            "straggler",
            "arrivals",
            "late_events",
            "broker_times",
        }
        # late: count per window, and a LateAgg of exactly those events
        late_rows = out[out["kind"] == "late"].to_dict("records")
        assert {(r["spec"], r["service"], r["window_start"]): r["count"] for r in late_rows} == (
            dict(exp_late)
        )
        for r in late_rows:
            key = (r["spec"], r["service"], r["window_start"])
            late = LateAgg.from_bytes(r["agg"])
            assert late.count == r["count"] == LateAgg.count_of(r["agg"])
            check_digest(late.lateness, exp_late_lateness[key])
            assert front is not None
            end = r["window_start"] + _size_of(r["spec"])
            check_digest(late.overdue, [front - end] * late.count)
        # stragglers per window
        assert rows_of(out, "straggler", "spec", "service", "window_start", "count") == {
            (*k, n) for k, n in exp_strag.items()
        }
        # arrivals by processing-time and broker-time window of the primary size
        got_arrivals = {}
        for r in out[out["kind"] == "arrivals"].to_dict("records"):
            m = json.loads(r["metrics"])
            assert m["proc_ms"] == proc
            got_arrivals[(r["spec"], r["service"], r["window_start"])] = (
                r["count"],
                m["late"],
                m["stragglers"],
            )
        expected_arrivals = {
            (d, s, bk): (
                exp_arrivals[(d, s, bk, "count")],
                exp_arrivals[(d, s, bk, "late")],
                exp_arrivals[(d, s, bk, "stragglers")],
            )
            for d, s, bk, c in exp_arrivals
            if c == "count"
        }
        assert got_arrivals == expected_arrivals
        # the late events themselves, judged by the primary window
        got_events = {}
        for e in kept_late_events(out):
            got_events[(e["service"], e["partition"], e["offset"])] = {
                "window_start": e["window_start"],
                "kafka_ms": e["kafka_timestamp"],
                "metrics": {
                    k: e[k]
                    for k in (
                        "event_id",
                        "event_time",
                        "window_end",
                        "watermark",
                        "behind_ms",
                        "lateness_ms",
                        "clock_offset_ms",
                    )
                },
            }
        assert got_events == exp_late_events

        totals["late"] += sum(exp_late.values())
        totals["stragglers"] += sum(exp_strag.values())
        totals["late_events"] += len(exp_late_events)
        if rows:
            max_seen = max([r[1] for r in rows] + ([] if max_seen is None else [max_seen]))
            watermark = max(watermark, max_seen - lateness)
    assert totals["late"] > 0 and totals["late_events"] > 0
    assert (totals["stragglers"] > 0) is (lateness > 0)


def _late_rows(service: str, n: int, first_offset: int = 0) -> list[Any]:
    # n events of window [T, T+10s), arriving when the watermark is T+20s: all late
    return [(service, T + i, float(T + 30 * S), 0, first_offset + i, math.nan) for i in range(n)]


@pytest.mark.parametrize(("n_late", "cap", "kept"), [(6, 4, 4), (6, 6, 6), (3, 10, 3), (5, 0, 0)])
def test_state_fn_late_events_are_capped(n_late: int, cap: int, kept: int) -> None:
    cfg = ExecutorConfig((TUMBLING,), late_events_max=cap)
    on_time = [("api", T + 25 * S, float(T + 26 * S), 0, 100, math.nan)]
    frame = timed_frame(_late_rows("api", n_late) + on_time, proc_ms=T + 40 * S)
    out = run_cfg(cfg, [frame], FakeGroupState(T + 20 * S))
    events = kept_late_events(out)
    assert len(events) == kept
    assert {e["offset"] for e in events} <= set(range(n_late))  # only late events, never others
    # the cap limits the stored events, not the counts
    assert rows_of(out, "late", "spec", "window_start", "count") == {(TK, T, n_late)}
    arrivals = out[(out["kind"] == "arrivals") & (out["spec"] == "processing")]
    assert [json.loads(m)["late"] for m in arrivals["metrics"]] == [n_late]


def test_state_fn_late_events_cap_keeps_the_group_s_newest_of_all_services() -> None:
    cfg = ExecutorConfig((TUMBLING,), late_events_max=4)
    rows = _late_rows("api", 3) + _late_rows("web", 3, first_offset=3)
    # broker times: api's events newest, then web's (the rows' own have none)
    rows = [(*r[:2], float(T + 100 * S - r[4] * S), *r[3:]) for r in rows]
    out = run_cfg(cfg, [timed_frame(rows)], FakeGroupState(T + 20 * S))
    assert rows_of(out, "late", "service", "count") == {("api", 3), ("web", 3)}
    kept = kept_late_events(out)
    # the cap is shared by the group's services: its newest 4 by broker time, newest first
    assert [(e["service"], e["offset"]) for e in kept] == [
        ("api", 0),
        ("api", 1),
        ("api", 2),
        ("web", 3),
    ]


def test_state_fn_without_processing_or_broker_time_emits_no_such_arrivals() -> None:
    cfg = ExecutorConfig((TUMBLING,))
    rows = [("api", T + 1, math.nan, 0, 0, math.nan), ("api", T + 2, math.nan, 0, 1, math.nan)]
    out = run_cfg(cfg, [timed_frame(rows)], FakeGroupState(0))  # no proc_ms column
    assert rows_of(out, "arrivals", "spec") == set()
    out = run_cfg(cfg, [timed_frame(rows, proc_ms=T + 15 * S)], FakeGroupState(0))
    assert rows_of(out, "arrivals", "spec", "window_start", "count") == {
        ("processing", T + SIZE, 2)
    }


#   user a:  x   x                      session [T+1s, T+5s]  closes at W >= T+35s
#   user b:    x                        session [T+2s, T+2s]  closes at W >= T+32s
#   user c:     x   (service web)       session [T+3s, T+3s]  closes at W >= T+33s
#   T    T+5s         T+30s    T+35s   T+40s
#   |----|-----...-----|---------|------|-->  watermark of the heartbeat-only batches
#   bucket [T, T+10s) (the last event's tumbling window) is kept until W >= T+10s+30s
@pytest.mark.parametrize(
    ("watermark", "closed", "alive"),
    [
        (T + 20 * S, set(), True),  # nothing to close; the tumbling pane is evicted
        (T + 34 * S, {("api", 1), ("web", 1)}, True),  # b and c
        (T + 36 * S, {("api", 2)}, True),  # a joins b in api's bucket (absolute counts)
        (T + 40 * S, set(), False),  # nothing open, buckets evicted: state removed
    ],
)
def test_state_fn_heartbeats_alone_close_sessions_and_evict_state(
    watermark: int, closed: set[tuple[str, int]], alive: bool
) -> None:
    cfg = ExecutorConfig((TUMBLING, SESSION))
    state = FakeGroupState(0)
    first = [
        ("api", T + 1 * S, float(T + 1 * S), 0, 0, math.nan),
        ("api", T + 5 * S, float(T + 5 * S), 0, 1, math.nan),
        ("api", T + 2 * S, float(T + 2 * S), 0, 2, math.nan),
        ("web", T + 3 * S, float(T + 3 * S), 0, 3, math.nan),
    ]
    frame = timed_frame(first)
    frame["user_id"] = ["a", "a", "b", "c"]
    run_cfg(cfg, [frame], state)
    assert state.exists
    # walk the heartbeat-only batches up to this row's watermark
    steps = [T + 20 * S, T + 34 * S, T + 36 * S, T + 40 * S]
    for w in steps[: steps.index(watermark) + 1]:
        state.watermark_ms = w
        out = run_cfg(cfg, [heartbeat_frame([w, w + 1], proc_ms=w + 500)], state)
    assert set(out["kind"]) <= {"window", "broker_times"}
    assert rows_of(out, "window", "spec", "service", "window_start") == {
        (SESSION.key, s, T) for s, _ in closed
    }
    assert rows_of(out, "window", "service", "count") == closed
    for r in out[out["kind"] == "window"].to_dict("records"):
        agg = WindowAgg.from_bytes(r["agg"])
        lengths = {"api": {1: [0.0], 2: [0.0, 4 * S]}, "web": {1: [0.0]}}
        assert check_digest(agg.latency, lengths[r["service"]][r["count"]])  # session lengths
    assert state.exists is alive
    if alive:
        shard = ShardState.from_bytes(state.get[0], cfg)
        assert all(not sw.panes for sw in shard.services.values())  # tumbling pane evicted


def test_state_fn_heartbeats_without_state_create_none() -> None:
    state = FakeGroupState(T + 50 * S)
    out = run_cfg(ExecutorConfig((TUMBLING, SESSION)), [heartbeat_frame([T], T)], state)
    assert out.empty  # (its broker time goes to the dead-letter group: see the next test)
    assert not state.exists and state.updates == 0


def test_state_fn_reports_each_records_broker_time_once() -> None:
    """Events, heartbeats and dead letters: each record's broker time once, every record counted."""
    events = timed_frame(
        [("api", T + 1, float(T + 7), 0, 0, math.nan), ("api", T + 2, math.nan, 0, 1, math.nan)]
    )
    beats = heartbeat_frame([T + 3, T + 3], proc_ms=T).assign(offset=[2, 3])
    dead = dead_frame([(0, o, T + 9, "bad_json", "", b"{", 1) for o in (4, 5)])
    cfg = ExecutorConfig((TUMBLING,), shards=2)
    [chunk] = summaries([events, beats, dead], 0, cfg)
    to_dead = chunk[chunk["kind"].isin([RecordKind.DEAD, SummaryKind.TIMES])]
    out = list(make_state_fn(cfg)((RecordKind.DEAD, 0), iter([to_dead]), FakeGroupState(0)))
    rows = pd.concat(out, ignore_index=True)
    times = rows[rows["kind"] == "broker_times"]
    hist = merge_times(times["agg"])
    assert dict(zip(*(h.tolist() for h in hist), strict=True)) == {T + 7: 1, T + 3: 2, T + 9: 2}
    assert times["count"].sum() == 6  # the event without a broker time is a record too
    # and no event group reports broker times any more
    for shard in (0, 1):
        ev = list(make_state_fn(cfg)((RecordKind.EVENT, shard), iter([chunk]), FakeGroupState(0)))
        assert not any((f["kind"] == "broker_times").any() for f in ev)


def test_state_fn_counts_events_late_for_their_session_as_late() -> None:
    # watermark T+50s, gap 30s: events at T+1..T+5ms end their own session at <= T+35s, so
    # Spark's session rule drops them; the one at T+25s still opens a session (ends T+55s)
    cfg = ExecutorConfig((TUMBLING, SESSION))
    rows = _late_rows("api", 5) + [("api", T + 25 * S, float(T + 60 * S), 0, 50, math.nan)]
    out = run_cfg(cfg, [timed_frame(rows)], FakeGroupState(T + 50 * S))
    assert rows_of(out, "late", "spec", "window_start", "count") == {
        (TK, T, 5),
        (TK, T + 20 * S, 1),
        (SESSION.key, T, 5),
    }
    row = out[(out["kind"] == "late") & (out["spec"] == SESSION.key)].iloc[0]
    late = LateAgg.from_bytes(row["agg"])
    # overdue = frontier - (event + gap) = T+50s - (T+i+30s) for i in 0..4 ms
    assert 20 * S - 4 <= late.overdue.quantile(0.0) <= late.overdue.quantile(1.0) <= 20 * S
    assert late.lateness.quantile(0.5) == pytest.approx(30 * S, abs=5)
    assert SESSION.key not in set(out[out["kind"] == "window"]["spec"])  # no session closed


# --- the cardinality guard (--max-services) ------------------------------------------------------


def run_guarded(
    frames: list[pd.DataFrame], state: FakeGroupState, max_services: int
) -> pd.DataFrame:
    cfg = ExecutorConfig((TUMBLING,), max_services=max_services)
    rows = summaries(frames, state.watermark_ms, cfg)
    return pd.concat(list(make_state_fn(cfg)((RecordKind.EVENT, 0), iter(rows), state)))


def _named_frames(names: list[str], t: int) -> list[pd.DataFrame]:
    frames = []
    for i, name in enumerate(names):
        f = event_frame(name, [t + i, t + i + 1])
        f["offset"] = np.arange(2 * i, 2 * i + 2)  # Kafka order: the names in list order
        frames.append(f)
    return frames


def _windows_by_service(out: pd.DataFrame) -> dict[str, int]:
    return {r["service"]: r["count"] for r in out[out["kind"] == "window"].to_dict("records")}


def test_guard_tracks_the_first_names_and_counts_the_rest_under_overflow() -> None:
    state = FakeGroupState(T)
    names = [f"s{i}" for i in range(7)]
    out = run_guarded(_named_frames(names, T + 100), state, max_services=3)
    assert _windows_by_service(out) == {"s0": 2, "s1": 2, "s2": 2, OVERFLOW_SERVICE: 8}
    (over,) = out[out["kind"] == "overflow"].to_dict("records")
    assert over["count"] == 8 and json.loads(over["metrics"]) == {"names": 4}
    # the next batch: known names keep their rows, a new one still overflows
    out = run_guarded(_named_frames(["s1", "s9"], T + 200), state, max_services=3)
    assert _windows_by_service(out) == {"s1": 4, OVERFLOW_SERVICE: 10}
    # windows closed, state gone: the names still hold their slots while idle for < 1 hour...
    later = FakeGroupState(T + 30_000, state.get)
    run_guarded(_named_frames(["s1"], T + 40_000), later, max_services=3)
    out = run_guarded(_named_frames(["s8"], T + 41_000), later, max_services=3)
    assert _windows_by_service(out) == {OVERFLOW_SERVICE: 2}
    # ...and give them up after: s0 and s2 had no events for an hour (s1 still has state)
    hour_later = FakeGroupState(T + 3_700_000, later.get)
    out = run_guarded(_named_frames(["s8", "s9", "s7"], T + 3_710_000), hour_later, 3)
    assert _windows_by_service(out) == {"s8": 2, "s9": 2, OVERFLOW_SERVICE: 2}
    shard = ShardState.from_bytes(hour_later.get[0], ExecutorConfig((TUMBLING,)))
    assert set(shard.names) == {"s1", "s8", "s9"}


def test_guard_off_tracks_every_name() -> None:
    out = run_guarded(_named_frames([f"s{i}" for i in range(50)], T), FakeGroupState(0), 0)
    assert len(out[out["kind"] == "window"]) == 50


def test_shard_state_keeps_the_guards_names_and_reads_version_1() -> None:
    cfg = ExecutorConfig((TUMBLING,))
    shard = _shard(2, (TUMBLING,))
    shard.names = {"api": T, "web": T + 5}
    back = ShardState.from_bytes(shard.to_bytes(), ExecutorConfig((TUMBLING,), shards=2))
    assert back.names == shard.names and set(back.services) == set(shard.services)
    # version 1 (before the guard): the same layout without the names
    v1 = dataclasses.replace(shard, names={}).to_bytes()
    v1 = v1[:4] + bytes([1]) + v1[5 : -(4 + len(b"{}"))]
    old = ShardState.from_bytes(v1, dataclasses.replace(cfg, shards=2))
    assert old.names == {} and set(old.services) == set(shard.services)
