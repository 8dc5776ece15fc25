"""Window and watermark math (tidegauge/core/windows.py) on epoch-ms integers, without Spark.

Timelines in the comments: `|` is a window boundary, `[` / `)` the closed start and open end of
the window under test, `x` an event time, `W` a watermark. One character is one unit unless the
row says otherwise.

The time rules (the frontier, arrival classes, primary window size) are tested against the
definitions written out again here (brute force), never against the functions themselves. `F` is
the frontier (max event time seen before the batch = W + allowed lateness L); window [T, T+10s)
ends at E = T+10s.

    late:       end <= W
    straggler:  W < end <= F       (accepted, but its window had already been emitted)
    on time:    end > F            (or end > W before any frontier exists)
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from tests.fixtures import S, T
from tidegauge.core.windows import (
    LATE,
    ON_TIME,
    STRAGGLER,
    WindowSpec,
    advance_watermark,
    classify,
    classify_many,
    default_resolution,
    frontier,
    is_late,
    late_mask,
    pane_size,
    primary_size,
    tumbling_start,
    tumbling_starts,
    window_end,
)

E = T + 10 * S  # end of the window [T, T+10s) used in the time rules' tables


# --- tumbling windows -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ts", "size", "start"),
    [
        #   0s        10s       20s
        #   [x--------)|---------|        event at 0 opens window [0, 10s)
        (0, 10 * S, 0),
        #   [--------x)|                  the last ms of a window still belongs to it
        (10 * S - 1, 10 * S, 0),
        #   |---------[x---------)        the end is open: 10s starts the next window
        (10 * S, 10 * S, 10 * S),
        (10 * S + 1, 10 * S, 10 * S),
        (15 * S, 10 * S, 10 * S),
        # Before the epoch windows still floor (Python's % is a floor modulo, C's is not):
        #  -10s        0s
        #   [--------x)|                  -1 ms is in [-10s, 0), not [0, 10s)
        (-1, 10 * S, -10 * S),
        #   [x--------)|                  -10s exactly opens its own window
        (-10 * S, 10 * S, -10 * S),
        #  -20s       -10s
        #   [--------x)|                  one ms before -10s is in [-20s, -10s)
        (-10 * S - 1, 10 * S, -20 * S),
        (-15 * S, 10 * S, -20 * S),
        # size 1 ms: every timestamp is its own window
        (123_456_789, 1, 123_456_789),
        (-7, 1, -7),
        # sizes that do not divide a day still align to the epoch, not to midnight or the hour
        (1_795_341_600_000, 7 * S, 1_795_341_597_000),  # 1_795_341_600_000 % 7000 == 3000
        # realistic contract-range time, 10s windows
        (1_795_341_609_999, 10 * S, 1_795_341_600_000),
        (1_795_341_610_000, 10 * S, 1_795_341_610_000),
    ],
)
def test_tumbling_start(ts: int, size: int, start: int) -> None:
    assert tumbling_start(ts, size) == start
    # and the window really holds the timestamp: start <= ts < end
    assert start <= ts < window_end(start, size)
    assert start % size == 0


@pytest.mark.parametrize("size", [0, -1, -10 * S])
def test_window_size_must_be_positive(size: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        tumbling_start(5, size)
    with pytest.raises(ValueError, match="positive"):
        tumbling_starts(np.array([5], dtype=np.int64), size)


def test_window_end_is_exclusive() -> None:
    assert window_end(10 * S, 10 * S) == 20 * S
    assert tumbling_start(window_end(10 * S, 10 * S), 10 * S) == 20 * S


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("size", [1, 7, 1_000, 10 * S, 60 * S, 3_600 * S])
def test_tumbling_starts_equals_scalar_version(seed: int, size: int) -> None:
    rng = np.random.default_rng(seed)
    ts = np.concatenate(
        [
            rng.integers(-(10**13), 10**13, size=500, dtype=np.int64),
            rng.integers(-3 * size, 3 * size, size=200, dtype=np.int64),  # around the epoch
            np.arange(-2 * size, 2 * size + 1, max(size // 4, 1), dtype=np.int64),  # boundaries
        ]
    )
    got = tumbling_starts(ts, size)
    assert got.dtype == np.int64
    assert got.shape == ts.shape
    assert got.tolist() == [tumbling_start(int(t), size) for t in ts]


def test_tumbling_starts_empty_and_list_input() -> None:
    empty = tumbling_starts(np.array([], dtype=np.int64), 10 * S)
    assert empty.dtype == np.int64 and empty.shape == (0,)
    assert tumbling_starts([-1, 0, 10 * S], 10 * S).tolist() == [-10 * S, 0, 10 * S]  # type: ignore[arg-type]


# --- lateness -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end", "watermark", "late"),
    [
        #   window [10s, 20s)      W
        #   [---------)............|     end 20s < watermark 26s: late
        (20 * S, 26 * S, True),
        #   [---------)W                 end == watermark: late (Spark drops at <=)
        (20 * S, 20 * S, True),
        #   [--------W)                  watermark 1 ms before the end: still open
        (20 * S, 20 * S - 1, False),
        #   W  [---------)               watermark far behind: open
        (20 * S, 0, False),
        # negative times follow the same rule
        (-10 * S, -10 * S, True),
        (-10 * S, -10 * S - 1, False),
    ],
)
def test_is_late(end: int, watermark: int, late: bool) -> None:
    assert is_late(end, watermark) is late


def test_docstring_example() -> None:
    #       window [10s, 20s)                     watermark in force = 26s
    #   ----|=========|---------------------------------|-------> event time
    #      10s       20s                               26s
    # An event at 11s arriving in this batch is late.
    start = tumbling_start(11 * S, 10 * S)
    assert (start, window_end(start, 10 * S)) == (10 * S, 20 * S)
    assert is_late(window_end(start, 10 * S), 26 * S)


# --- watermark ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("watermark", "times", "lateness", "after"),
    [
        # empty batch: nothing seen, nothing moves
        (0, [], 30 * S, 0),
        (50 * S, [], 30 * S, 50 * S),
        # one event
        #   x=100s, L=30s  ->  W = 70s
        (0, [100 * S], 30 * S, 70 * S),
        # the max counts, not the last or the first
        (0, [100 * S, 130 * S, 90 * S], 30 * S, 100 * S),
        # equal timestamps
        (0, [100 * S, 100 * S, 100 * S], 30 * S, 70 * S),
        # lateness 0: the watermark is the max event time itself
        (0, [100 * S], 0, 100 * S),
        # never goes back:
        #   W=80s ...... x=100s (L=30s -> 70s < 80s)  ->  W stays 80s
        (80 * S, [100 * S], 30 * S, 80 * S),
        #   an old late event cannot pull it back either
        (80 * S, [1 * S], 30 * S, 80 * S),
        # exactly at the previous watermark: unchanged
        (70 * S, [100 * S], 30 * S, 70 * S),
        # one ms beyond it: moves by one ms
        (70 * S, [100 * S + 1], 30 * S, 70 * S + 1),
        # max - L is negative (an event within the first L of the epoch): W stays at its start
        (0, [10 * S], 30 * S, 0),
    ],
)
def test_advance_watermark(watermark: int, times: list[int], lateness: int, after: int) -> None:
    assert advance_watermark(watermark, times, lateness) == after


def test_advance_watermark_accepts_one_shot_iterables_and_arrays() -> None:
    def gen() -> Iterator[int]:
        yield from (100 * S, 130 * S)

    assert advance_watermark(0, gen(), 30 * S) == 100 * S
    assert advance_watermark(0, np.array([100 * S, 130 * S], dtype=np.int64), 30 * S) == 100 * S
    assert advance_watermark(7, np.array([], dtype=np.int64), 30 * S) == 7


def test_watermark_over_many_batches_is_monotone_and_tracks_the_max() -> None:
    rng = random.Random(5)
    lateness = 30 * S
    watermark, seen_max = 0, None
    for _ in range(2_000):
        batch = [rng.randrange(0, 10**6) * 10 for _ in range(rng.randrange(0, 6))]
        before = watermark
        watermark = advance_watermark(watermark, batch, lateness)
        assert watermark >= before
        if batch:
            seen_max = max(batch) if seen_max is None else max(seen_max, max(batch))
        expected = 0 if seen_max is None else max(0, seen_max - lateness)
        assert watermark == expected


@pytest.mark.parametrize(
    ("event", "late"),
    [
        # window 10s, lateness 30s; batch 1 sees an event at 100s -> watermark 70s for batch 2.
        #   60s       70s       80s
        #   [---------)W                 window [60s, 70s) ends at the watermark: late
        (65 * S, True),
        #   |---------[W--------)        window [70s, 80s) is still open
        (70 * S, False),
        (69_999, True),
        (99 * S, False),
    ],
)
def test_batch_sequence_max_lateness(event: int, late: bool) -> None:
    size, lateness = 10 * S, 30 * S
    in_force = advance_watermark(0, [100 * S], lateness)  # after batch 1
    assert in_force == 70 * S
    start = tumbling_start(event, size)
    assert is_late(window_end(start, size), in_force) is late
    # The row itself does not move the watermark it is judged against.
    assert advance_watermark(in_force, [event], lateness) == in_force


# --- window specs: tumbling and hopping windows built from panes -------------------------------


@pytest.mark.parametrize(
    ("text", "key", "kind"),
    [
        ("10s", "10000", "tumbling"),
        ("60s/10s", "60000-10000", "hopping"),
        ("1m/1m", "60000", "tumbling"),
    ],
)
def test_spec_parse_and_key_round_trip(text: str, key: str, kind: str) -> None:
    spec = WindowSpec.parse(text)
    assert spec.key == key and spec.kind == kind
    assert WindowSpec.from_key(key) == spec


@pytest.mark.parametrize("bad", [(0, 0), (10, 0), (10, 20), (-10, -10)])
def test_spec_rejects(bad: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        WindowSpec(*bad)


def test_spec_from_key_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a window key"):
        WindowSpec.from_key("10s")


#   size 30, slide 10, panes of 10
#   panes    |0  |10 |20 |30 |40 |
#   windows  [0         30)
#                [10        40)
#                    [20        50)
#   pane 20 is in the windows starting 0, 10 and 20.
@pytest.mark.parametrize(
    ("spec", "pane", "pane_ms", "starts"),
    [
        (WindowSpec(30, 10), 20, 10, [0, 10, 20]),
        (WindowSpec(30, 10), 0, 10, [-20, -10, 0]),
        (WindowSpec(10, 10), 20, 10, [20]),
        (WindowSpec(20, 10), 15, 5, [0, 10]),
        (WindowSpec(60, 20), 40, 20, [0, 20, 40]),
        (WindowSpec(10, 10), -10, 10, [-10]),
    ],
)
def test_windows_containing(spec: WindowSpec, pane: int, pane_ms: int, starts: list[int]) -> None:
    assert spec.windows_containing(pane, pane_ms) == starts
    for s in starts:
        assert pane in spec.panes_of(s, pane_ms)


def test_windows_containing_agrees_with_brute_force() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        slide = int(rng.integers(1, 6)) * 5
        spec = WindowSpec(slide * int(rng.integers(1, 5)), slide)
        pane_ms = pane_size([spec])
        pane = int(rng.integers(-20, 20)) * pane_ms
        brute = [
            s
            for s in range(-2000, 2000)
            if s % spec.slide_ms == 0 and s <= pane and pane + pane_ms <= s + spec.size_ms
        ]
        assert spec.windows_containing(pane, pane_ms) == brute


@pytest.mark.parametrize(
    ("specs", "pane"),
    [
        ([WindowSpec(10_000, 10_000)], 10_000),
        ([WindowSpec(10_000, 10_000), WindowSpec(60_000, 10_000)], 10_000),
        ([WindowSpec(15_000, 15_000), WindowSpec(60_000, 10_000)], 5_000),
    ],
)
def test_pane_size_divides_every_size_and_slide(specs: list[WindowSpec], pane: int) -> None:
    assert pane_size(specs) == pane


# --- the rules the store, the job and the dashboard share, defined in one place ----------------


def test_spec_end_and_rate() -> None:
    spec = WindowSpec(60_000, 10_000)
    assert spec.end(120_000) == 180_000
    assert spec.rate_per_s(300) == 5.0


@pytest.mark.parametrize(
    ("spec", "start", "watermark", "closed"),
    [
        #   [0, 10s) with the watermark at 9.999s: open; at 10s: closed (end <= watermark)
        (WindowSpec.tumbling(10_000), 0, 9_999, False),
        (WindowSpec.tumbling(10_000), 0, 10_000, True),
        (WindowSpec(30_000, 10_000), 10_000, 39_999, False),
        (WindowSpec(30_000, 10_000), 10_000, 40_000, True),
        (WindowSpec.tumbling(10_000), 0, None, False),  # no watermark yet
        # a session's stored window is its start bucket; the session may still grow
        (WindowSpec.session(30_000, 10_000), 0, 10**12, False),
    ],
)
def test_is_closed(spec: WindowSpec, start: int, watermark: int | None, closed: bool) -> None:
    assert spec.is_closed(start, watermark) is closed


def test_lies_within_and_index_bound() -> None:
    spec = WindowSpec.tumbling(10_000)
    #   range [15s, 45s): [20s, 30s) and [30s, 40s) lie inside; [10s, 20s) and [40s, 50s) do not
    inside = [s for s in range(0, 60_000, 10_000) if spec.lies_within(s, 15_000, 45_000)]
    assert inside == [20_000, 30_000]
    # windows overlapping [15s, ...) start after 15s - 10s: [10s, 20s) is the first
    assert spec.first_start_overlapping(15_000) == 5_001
    assert all(
        (s >= spec.first_start_overlapping(15_000)) == (spec.end(s) > 15_000)
        for s in range(0, 40_000, 1_000)
    )


def test_last_end_containing() -> None:
    # hopping 30s/10s: t = 25s lies in [0, 30), [10, 40), [20, 50): the last ends at 50s
    assert WindowSpec(30_000, 10_000).last_end_containing(25_000) == 50_000
    assert WindowSpec.tumbling(10_000).last_end_containing(25_000) == 30_000


@pytest.mark.parametrize("seed", range(5))
def test_classify_many_is_classify_per_element(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ends = rng.integers(0, 100_000, 500)
    watermark = int(rng.integers(0, 100_000))
    for front in (None, watermark + int(rng.integers(0, 30_000))):
        got = classify_many(ends, watermark, front)
        assert got.tolist() == [classify(int(e), watermark, front) for e in ends]
    assert late_mask(ends, watermark).tolist() == [is_late(int(e), watermark) for e in ends]


# --- time rules: the frontier, arrival classes, primary window size ---------------------------


def classify_by_definition(end: int, watermark: int, allowed_lateness: int) -> int:
    """The classes written out from the definitions, with the frontier as a set of times."""
    if end <= watermark:
        return LATE
    # Before the first watermark (Spark's starts at 0) nothing has been seen: no frontier.
    if watermark > 0 and end in range(watermark + 1, watermark + allowed_lateness + 1):
        return STRAGGLER
    return ON_TIME


# --- frontier -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("watermark", "lateness", "expected"),
    [
        # Spark's watermark starts at 0: nothing seen yet, so no frontier
        (0, 30 * S, None),
        (0, 0, None),
        (-1, 30 * S, None),
        (-T, 0, None),
        # the first positive watermark already means events were seen
        (1, 0, 1),
        (1, 30 * S, 30 * S + 1),
        # lateness 0: the frontier is the watermark itself
        (T, 0, T),
        (T, 30 * S, T + 30 * S),
        (T, 1, T + 1),
    ],
)
def test_frontier(watermark: int, lateness: int, expected: int | None) -> None:
    assert frontier(watermark, lateness) == expected


@pytest.mark.parametrize("lateness", [0, 1, 7 * S, 30 * S])
def test_frontier_is_the_max_event_time_seen_before_the_batch(lateness: int) -> None:
    # Batches of event times, with Spark's watermark rule applied between them: the frontier
    # computed from the watermark in force must be the max event time of all earlier batches.
    batches = [
        [],
        [T + 5 * S, T + 1 * S],
        [T + 3 * S],  # behind the max: neither moves
        [T + 40 * S, T - 60 * S],
        [],
        [T + 41 * S],
        [T + 41 * S],  # equal to the max
        [T + 200 * S],
    ]
    watermark, seen = 0, None
    for times in batches:
        assert frontier(watermark, lateness) == seen
        watermark = advance_watermark(watermark, times, lateness)
        seen = max([*times, *([] if seen is None else [seen])], default=None)


# --- classify: the edge cases ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("watermark", "front", "expected"),
    [
        #   [T--------)E
        #             W F        end == watermark: late (Spark drops at <=)
        (E, E + 30 * S, LATE),
        (E, E, LATE),  # lateness 0, end == watermark == frontier: still late
        #             W          one ms past the watermark: late
        (E + 1, E + 30 * S, LATE),
        (T + 10 * E, T + 10 * E + 30 * S, LATE),  # long past
        #   [T-------W)F         watermark 1 ms before the end, frontier at it: straggler
        (E - 1, E, STRAGGLER),
        #   [T-------W)----F     frontier past the end: straggler
        (E - 1, E + 5 * S, STRAGGLER),
        #   W [T------)F         watermark well before the window, frontier exactly at its end
        (E - 30 * S, E, STRAGGLER),
        #   W [T-----F)          end == frontier + 1: on time
        (E - 30 * S, E - 1, ON_TIME),
        #   [T-------W)          lateness 0: frontier == watermark == end - 1: on time
        (E - 1, E - 1, ON_TIME),
        #   W F [T----)          both far behind: on time
        (T - 60 * S, T - 30 * S, ON_TIME),
        # no frontier (nothing seen yet): never a straggler
        (0, None, ON_TIME),
        (E - 1, None, ON_TIME),
        # ... but the watermark rule still holds
        (E, None, LATE),
    ],
)
def test_classify_edges(watermark: int, front: int | None, expected: int) -> None:
    assert classify(E, watermark, front) == expected


@pytest.mark.parametrize(
    ("end", "watermark", "expected"),
    [
        # lateness 0: frontier == watermark, so W < end <= F is empty: no stragglers possible
        #   [-------W)          W = end - 1: on time
        (E, E - 1, ON_TIME),
        #   [--------)W         W = end: late
        (E, E, LATE),
        (E, E + 1, LATE),
        (E, T, ON_TIME),
    ],
)
def test_classify_with_zero_lateness_has_no_stragglers(
    end: int, watermark: int, expected: int
) -> None:
    got = classify(end, watermark, frontier(watermark, 0))
    assert got == expected
    assert got != STRAGGLER


def test_classify_agrees_with_the_definition_over_a_grid() -> None:
    # Every (end, watermark, lateness) around the boundaries, including before the epoch and
    # the first watermark (0, no frontier); about 30,000 cases, each checked by brute force.
    lateness_values = [0, 1, 2, 5, 13]
    times = list(range(-20, 21))
    for lateness in lateness_values:
        for end in times:
            for watermark in times:
                expected = classify_by_definition(end, watermark, lateness)
                got = classify(end, watermark, frontier(watermark, lateness))
                assert got == expected, (end, watermark, lateness)
    # and at realistic epoch ms, where the frontier always exists
    for lateness in [0, 1, 30 * S]:
        for end in range(E - 40 * S, E + 40 * S, 997):
            for watermark in [E - 31 * S, E - 30 * S, E - 1, E, E + 1]:
                expected = classify_by_definition(end, watermark, lateness)
                assert classify(end, watermark, frontier(watermark, lateness)) == expected


@pytest.mark.parametrize("lateness", [0, 1, 10 * S, 30 * S])
def test_an_events_class_only_moves_forward_as_the_watermark_advances(lateness: int) -> None:
    # For a fixed window, later batches (higher watermarks) can only move an event from
    # on time to straggler to late, never back.
    #   W ----> ... [T--------)E ... ---->
    #   on time ...  straggler (E - L <= W < E) ...  late (W >= E)
    watermarks = sorted({*range(E - 60 * S, E + 20 * S, 250), E - lateness, E - 1, E})
    classes = [classify(E, w, frontier(w, lateness)) for w in watermarks]
    assert classes == sorted(classes)
    assert classes[0] == ON_TIME and classes[-1] == LATE
    assert (STRAGGLER in classes) is (lateness > 0)
    # the straggler span is exactly L ms of watermark values: E - L <= W < E
    stragglers = [
        w
        for w in range(E - 2 * lateness - 5, E + 5)
        if classify(E, w, frontier(w, lateness)) == STRAGGLER
    ]
    assert stragglers == list(range(E - lateness, E))


# --- primary_size ----------------------------------------------------------------------------

TUMBLING_10 = WindowSpec.tumbling(10 * S)
TUMBLING_60 = WindowSpec.tumbling(60 * S)
HOPPING_30_10 = WindowSpec(30 * S, 10 * S)
HOPPING_60_15 = WindowSpec(60 * S, 15 * S)
HOPPING_45_20 = WindowSpec(45 * S, 20 * S)
SESSION_30_10 = WindowSpec.session(30 * S, 10 * S)
SESSION_30_7 = WindowSpec.session(30 * S, 7 * S)


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ((TUMBLING_10,), 10 * S),
        # the smallest tumbling spec, whatever the order
        ((TUMBLING_60, TUMBLING_10), 10 * S),
        ((TUMBLING_10, TUMBLING_60), 10 * S),
        # a tumbling spec wins over the (smaller) pane of a hopping one
        ((TUMBLING_60, HOPPING_30_10), 60 * S),
        ((HOPPING_30_10, TUMBLING_60), 60 * S),
        # no tumbling spec: the pane (gcd of every size and slide)
        ((HOPPING_30_10,), 10 * S),
        ((HOPPING_45_20,), 5 * S),
        ((HOPPING_60_15, HOPPING_30_10), 5 * S),
        # session buckets are tumbling in form but never the primary window
        ((SESSION_30_7, TUMBLING_10), 10 * S),
        ((TUMBLING_10, SESSION_30_7), 10 * S),
        ((SESSION_30_10, HOPPING_60_15), 15 * S),  # the session's 10 s bucket is ignored
        # only sessions: their bucket
        ((SESSION_30_10,), 10 * S),
    ],
)
def test_primary_size(specs: tuple[WindowSpec, ...], expected: int) -> None:
    assert primary_size(specs) == expected
    # brute force: the smallest tumbling size, else the largest size dividing every non-session
    # size and slide
    tumbling = [s.size_ms for s in specs if s.kind == "tumbling"]
    windowed = [s for s in specs if s.kind != "session"] or list(specs)
    values = [v for s in windowed for v in (s.size_ms, s.slide_ms)]
    divisor = max(
        d for d in range(1, min(values) // S + 1) if all(v % (d * S) == 0 for v in values)
    )
    assert expected == (min(tumbling) if tumbling else divisor * S)
    assert expected % pane_size(windowed) == 0  # per-event windows are whole panes


def test_primary_size_needs_a_spec() -> None:
    with pytest.raises(ValueError, match="at least one window spec"):
        primary_size(())


# --- sliding window specs, and the stored spec a window text names ------------------------------


def test_specs_parse_and_refuse_what_cannot_be_sliding() -> None:
    spec = WindowSpec.parse("1m/sliding", 10_000)
    assert (spec.kind, spec.size_ms, spec.slide_ms, spec.resolution_ms) == (
        "sliding",
        60_000,
        10_000,
        100,
    )
    assert WindowSpec.from_key(spec.key) == spec and spec.key == "sl60000-10000-100"
    assert WindowSpec.parse("60s/sliding@1ms", 10_000).resolution_ms == 1
    assert default_resolution(60_000, 10_000) == 100
    assert default_resolution(2_050, 2_050) == 50
    with pytest.raises(ValueError, match="sliding"):
        WindowSpec.parse("60s/sliding")  # no step: the job's primary window gives it
    # any size: rows end where the primary windows end, wherever that puts their starts
    odd = WindowSpec.parse("25s/sliding", 10_000)
    assert (odd.anchor_ms, odd.windows_containing(20_000, 5_000)) == (5_000, [5_000, 15_000])
    assert odd.end(5_000) % 10_000 == 0 and odd.last_end_containing(29_999) == 50_000
    small = WindowSpec.parse("4s/sliding", 10_000)  # shorter than its step: busiest 4 s of 10 s
    assert small.windows_containing(16_000, 2_000) == [16_000] and small.end(16_000) == 20_000
    assert small.windows_containing(10_000, 2_000) == []  # no row's rolling 4 s holds [10, 12)
    with pytest.raises(ValueError, match="must divide"):
        WindowSpec.parse("60s/sliding@7ms", 10_000)
    with pytest.raises(ValueError, match="only a sliding window"):
        WindowSpec.parse("60s/10s@1ms")


def test_a_window_text_finds_its_stored_spec() -> None:
    from tidegauge.alerts.evaluator import _spec_of
    from tidegauge.alerts.rules import parse_rule
    from tidegauge.core.windows import match_spec

    tumbling, hopping = WindowSpec.tumbling(10_000), WindowSpec(60_000, 10_000)
    fine, coarse = WindowSpec.sliding(60_000, 10_000, 1), WindowSpec.sliding(60_000, 10_000)
    stored = [tumbling, hopping, coarse, fine]
    assert match_spec("10s", stored) == tumbling
    assert match_spec("1m/10s", stored) == hopping and match_spec("60000-10000", stored) == hopping
    assert match_spec("60s/sliding", stored) == coarse  # the first of that size
    assert match_spec("60s/sliding@1ms", stored) == fine
    assert match_spec("30s/sliding", stored) is None and match_spec("20s", stored) is None
    # an alert rule's `in SPEC` reads the same way (it once compared the text with the key)
    assert _spec_of(parse_rule("p99 > 800 for 3 in 60s/10s"), stored) == hopping
    assert _spec_of(parse_rule("p99 > 800 in 1m/sliding@1ms"), stored) == fine
    with pytest.raises(ValueError, match="is not a window"):
        parse_rule("p99 > 800 in soon")
