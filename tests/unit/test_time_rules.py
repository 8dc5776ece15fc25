"""Time rules of tidegauge/core/windows.py: the frontier, arrival classes, primary window size.

Pure functions on epoch-ms integers, tested without Spark against definitions written out again
here (brute force), never against the functions themselves.

Timelines in the comments: `[` / `)` the closed start and open end of the window under test,
`W` the watermark in force for the batch, `F` the frontier (max event time seen before the
batch = W + allowed lateness L). Window [T, T+10s) ends at E = T+10s.

    late:       end <= W
    straggler:  W < end <= F       (accepted, but its window had already been emitted)
    on time:    end > F            (or end > W before any frontier exists)
"""

from __future__ import annotations

import pytest

from tidegauge.core.windows import (
    LATE,
    ON_TIME,
    STRAGGLER,
    WindowSpec,
    advance_watermark,
    classify,
    frontier,
    pane_size,
    primary_size,
)

S = 1_000
T = 1_795_341_600_000  # a boundary of 10 s, 30 s and 60 s windows
E = T + 10 * S  # end of the window [T, T+10s) used in the tables


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
