"""Per-user session windows (jobs/panes/sessions.py): `Sessions` against the rules.

The rules under test (Spark's session windows applied to raw rows):

- a point more than `gap` past everything before it (of the same user) starts a new session, so
  events exactly `gap` apart join and an open session is never split internally;
- an event is ignored when its own session would already be over: time + gap <= watermark;
- a session closes when last + gap <= watermark and counts in the bucket (a tumbling window of
  `spec.size_ms`) holding its last event: WindowAgg count = sessions, t-digest = lengths
  (last - first, ms), HLL = users.

Timelines in the comments: one character is one second unless the row says otherwise; `x` an
event, `[` / `]` the first and last event of a session (both included), `|` a bucket boundary,
`W` the watermark in force. Gap 20 s and buckets of 10 s unless a test says otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

from jobs.panes.sessions import Sessions
from tests.fixtures import S, T
from tests.spark.helpers import LATENESS_MS, closed_sessions
from tests.unit.jobs.panes.fixtures import lengths_of, open_of
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

GAP, BUCKET = 20 * S, 10 * S
SPEC = WindowSpec.session(GAP, BUCKET)


def feed(
    s: Sessions, times: Sequence[int], watermark: int, users: Sequence[Any] | None = None
) -> set[int]:
    """`s.add` for one user ("u") unless users are given."""
    who = list(users) if users is not None else ["u"] * len(times)
    return s.add(np.array(who, dtype=object), np.array(times, dtype=np.int64), watermark)


def test_needs_a_session_spec() -> None:
    with pytest.raises(ValueError, match="session spec"):
        Sessions(WindowSpec.tumbling(BUCKET))


# --- one batch, one user: who joins whom ----------------------------------------------------------


@pytest.mark.parametrize(
    ("times", "sessions"),
    [
        #   0    5    10   15   20
        #   |----x----|---------|        one event: a session of length 0
        ([5 * S], [(5 * S, 5 * S, 1)]),
        #   x---------x                  10 s apart <= gap: one session
        ([0, 10 * S], [(0, 10 * S, 2)]),
        #   x-------------------x        exactly gap apart: still one (split only when MORE)
        ([0, GAP], [(0, GAP, 2)]),
        #   x-------------------.x       gap + 1 ms apart: two sessions
        ([0, GAP + 1], [(0, 0, 1), (GAP + 1, GAP + 1, 1)]),
        #   x-------------------x-------------------x
        #   0                   20                  40   a chain: each within gap of the one
        #   [.......................................]    before, first and last 40 s apart
        ([0, 20 * S, 40 * S], [(0, 40 * S, 3)]),
        #   x--------------------x------------------x
        #   0                    20.001             40   the chain breaks after the first
        ([0, GAP + 1, 40 * S], [(0, 0, 1), (GAP + 1, 40 * S, 2)]),
        # the batch order does not matter: 40, 0, 20 is the chain above
        ([40 * S, 0, 20 * S], [(0, 40 * S, 3)]),
        # equal timestamps: one session, three events, length 0
        ([7 * S, 7 * S, 7 * S], [(7 * S, 7 * S, 3)]),
        #   x x x    gap 20 s, events 1 ms apart
        ([3, 1, 2], [(1, 3, 3)]),
    ],
    ids=[
        "single",
        "within-gap",
        "exactly-gap",
        "gap-plus-1ms",
        "chain",
        "broken-chain",
        "unordered-chain",
        "equal-times",
        "ms-apart",
    ],
)
def test_one_batch_one_user(times: list[int], sessions: list[tuple[int, int, int]]) -> None:
    s = Sessions(SPEC)
    assert feed(s, times, 0) == set()
    assert open_of(s) == [("u", *x) for x in sessions]
    assert s.buckets == {}


def test_users_never_join_each_other() -> None:
    #   0         10        20        30
    #   a              cb             a     c at 15 s and b at 16 s sit between a's events
    #                                       at 0 and 30 s: a still has two sessions (> gap)
    s = Sessions(SPEC)
    feed(s, [0, 16 * S, 30 * S, 15 * S], 0, users=["a", "b", "a", "c"])
    assert open_of(s) == [
        ("a", 0, 0, 1),
        ("a", 30 * S, 30 * S, 1),
        ("b", 16 * S, 16 * S, 1),
        ("c", 15 * S, 15 * S, 1),
    ]


# --- across calls: open sessions are intervals, never split internally ----------------------------


#   0    5    10   15   20   25   30   35   40   45   50
#      x          x          x                   x          3 s, 14 s, 25.7 s, then 45..46 s
#      [3 ............... 25.7]                             one session, 22.7 s long
#                                                ^ 45.7 = 25.7 + gap
REGRESSION = [3 * S, 14 * S, 25_700]


@pytest.mark.parametrize(
    ("batches", "sessions"),
    [
        # the session and a later point more than gap past its last: two sessions; the open
        # [3 s, 25.7 s] is not cut into [3 s] and [25.7 s] although they are 22.7 s apart
        ([REGRESSION, [46 * S]], [(3 * S, 25_700, 3), (46 * S, 46 * S, 1)]),
        ([REGRESSION, [45_701]], [(3 * S, 25_700, 3), (45_701, 45_701, 1)]),
        # within gap of 25.7 s (19.3 s past it), or exactly gap past it: joins
        ([REGRESSION, [45 * S]], [(3 * S, 45 * S, 4)]),
        ([REGRESSION, [45_700]], [(3 * S, 45_700, 4)]),
        # the same session built one event per call
        ([[3 * S], [14 * S], [25_700], [46 * S]], [(3 * S, 25_700, 3), (46 * S, 46 * S, 1)]),
        ([[3 * S], [14 * S], [25_700], [45 * S]], [(3 * S, 45 * S, 4)]),
        # an empty call in between changes nothing
        ([REGRESSION, [], [46 * S]], [(3 * S, 25_700, 3), (46 * S, 46 * S, 1)]),
        # a point inside the open session does not hide its reach: 45 s is 35 s past 10 s but
        # within gap of 25.7 s, so all of it is one session
        #      [3 ....x.......... 25.7]                  x
        ([REGRESSION, [10 * S, 45 * S]], [(3 * S, 45 * S, 5)]),
        ([REGRESSION, [10 * S, 46 * S]], [(3 * S, 25_700, 4), (46 * S, 46 * S, 1)]),
    ],
    ids=[
        "46s",
        "gap+1ms",
        "45s-joins",
        "exactly-gap-joins",
        "one-per-call",
        "one-per-call-45s",
        "empty-call",
        "point-inside-then-45s",
        "point-inside-then-46s",
    ],
)
def test_open_session_is_never_split(
    batches: list[list[int]], sessions: list[tuple[int, int, int]]
) -> None:
    s = Sessions(SPEC)
    for i, times in enumerate(batches):
        assert feed(s, times, i * S) == set()  # watermark far behind: nothing closes
    assert open_of(s) == [("u", *x) for x in sessions]


def test_regression_session_stays_one_until_the_watermark_closes_it() -> None:
    #   |0        |10       |20       |30       |40
    #      [3 ............... 25.7]                   [46]
    #                                                W=45.699 s: still open
    #                                                W=45.7 s: 25.7 + 20 <= W, closes in bucket 20 s
    s = Sessions(SPEC)
    feed(s, REGRESSION, 0)
    feed(s, [46 * S], 10 * S)
    assert feed(s, [], 45_699) == set()
    assert open_of(s) == [("u", 3 * S, 25_700, 3), ("u", 46 * S, 46 * S, 1)]
    assert feed(s, [], 45_700) == {20 * S}
    assert open_of(s) == [("u", 46 * S, 46 * S, 1)]
    assert lengths_of(s.buckets[20 * S]) == (1, 22_700, 22_700, 22_700)


# --- out-of-order events --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_batch", "second_batch", "sessions"),
    [
        #   0         10        20        30        40
        #             x                   [.........]     10 s is exactly gap before 30 s: joins
        ([30 * S, 40 * S], [10 * S], [(10 * S, 40 * S, 3)]),
        #            x.                   [.........]     9.999 s is gap + 1 ms before: its own
        ([30 * S, 40 * S], [10 * S - 1], [(10 * S - 1, 10 * S - 1, 1), (30 * S, 40 * S, 2)]),
        #   [.........x.........]                             inside an open session: joins it
        ([0, 20 * S], [10 * S], [(0, 20 * S, 3)]),
        # 15 s is within gap of 5 s and of 30 s: it bridges both (2 + 2 + 1 events)
        #   [....]         x              [....]
        #   0    5         15             30   35
        ([0, 5 * S, 30 * S, 35 * S], [15 * S], [(0, 35 * S, 5)]),
        #   [....]                    x   [....]  26 s is 21 s past 5 s: joins only
        #                                         the second session
        ([0, 5 * S, 30 * S, 35 * S], [26 * S], [(0, 5 * S, 2), (26 * S, 35 * S, 3)]),
        #   x              x              x                   x   two points (unordered)
        #   0              15             30                  50  bridge 0 s and 50 s
        ([0, 50 * S], [30 * S, 15 * S], [(0, 50 * S, 4)]),
        # three sessions, two points bridge them: one
        #   x              x              x              x              x
        #   0              15             30             45             60
        ([0, 30 * S, 60 * S], [45 * S, 15 * S], [(0, 60 * S, 5)]),
    ],
    ids=[
        "before-first",
        "before-first-too-far",
        "inside",
        "bridge",
        "no-bridge",
        "two-points-bridge",
        "three-sessions",
    ],
)
def test_out_of_order_events(
    first_batch: list[int], second_batch: list[int], sessions: list[tuple[int, int, int]]
) -> None:
    s = Sessions(SPEC)
    feed(s, first_batch, 0)
    feed(s, second_batch, 0)
    assert open_of(s) == [("u", *x) for x in sessions]
    assert sum(x[2] for x in sessions) == len(first_batch) + len(second_batch)


# --- the late rule and null users -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "kept"),
    [
        #   0         10        20        30        40        50
        #                                 x-------------------W    30 + 20 = 50 <= W: late
        (30 * S, False),
        #                                  x------------------W    30.001 + 20 > W: kept
        (30 * S + 1, True),
        (10 * S, False),
        (49 * S, True),
        (80 * S, True),  # ahead of the watermark
    ],
)
def test_late_rule(event: int, kept: bool) -> None:
    s = Sessions(SPEC)
    assert feed(s, [event], 50 * S) == set()
    assert open_of(s) == ([("u", event, event, 1)] if kept else [])


@pytest.mark.parametrize(
    ("event", "events_after"),
    [
        #   0         10        20        30        40        50
        #                            [...x..........]         W   open [25 s, 40 s] at W=50 s:
        #                                29                       29 s + 20 <= W: ignored
        (29 * S, 2),
        #                                  x                      31 s + 20 > W: joins
        (31 * S, 3),
    ],
)
def test_late_event_inside_an_open_session_is_still_ignored(event: int, events_after: int) -> None:
    s = Sessions(SPEC)
    feed(s, [25 * S, 40 * S], 0)
    feed(s, [event], 50 * S)
    assert open_of(s) == [("u", 25 * S, 40 * S, events_after)]


def test_null_users_are_ignored() -> None:
    s = Sessions(SPEC)
    feed(s, [1, 2, 3, 4, 5], 0, users=[None, np.nan, pd.NA, "a", None])
    assert open_of(s) == [("a", 4, 4, 1)]
    # nulls never bridge anything either
    feed(s, [15 * S, 30 * S], 0, users=[None, "a"])
    assert open_of(s) == [("a", 4, 4, 1), ("a", 30 * S, 30 * S, 1)]


def test_an_all_null_or_empty_batch_still_closes_sessions() -> None:
    s = Sessions(SPEC)
    feed(s, [0], 0)
    assert feed(s, [100 * S], 20 * S, users=[None]) == {0}
    assert open_of(s) == []


def test_a_closed_session_is_not_reopened() -> None:
    #   0         10        20        30
    #   [.........]                   W      [0, 10 s] closes at W=30 s (10 + 20 <= 30)
    #                            x    W      25 s in the next batch is not late (25 + 20 > 30)
    #                                        and within gap of 10 s, but the closed session is
    #                                        already reported: it starts a new one (as in Spark,
    #                                        which has emitted and dropped the old session)
    s = Sessions(SPEC)
    feed(s, [0, 10 * S], 0)
    assert feed(s, [], 30 * S) == {10 * S}
    assert feed(s, [25 * S], 30 * S) == set()
    assert open_of(s) == [("u", 25 * S, 25 * S, 1)]
    assert s.buckets[10 * S].count == 1


# --- closing: when, into which bucket, what the bucket holds --------------------------------------


@pytest.mark.parametrize(
    ("times", "watermark", "bucket"),
    [
        #   |0        |10       |20       |30       |40
        #        x      x                   W                 [5 s, 12 s]: 12 + 20 = 32 s
        ([5 * S, 12 * S], 32 * S - 1, None),  # W one ms short: open
        ([5 * S, 12 * S], 32 * S, 10 * S),  # closes; bucket of the LAST event, not the first
        ([5 * S, 12 * S], 500 * S, 10 * S),  # watermark far ahead: same bucket
        #        x                   W                        single event: length 0, bucket 0
        ([5 * S], 25 * S, 0),
        #        x              x                   W    last exactly on a boundary:
        #                                                its bucket
        ([5 * S, 20 * S], 40 * S, 20 * S),
        #        x             x.                   W    one ms before the boundary
        ([5 * S, 20 * S - 1], 40 * S - 1, 10 * S),
    ],
)
def test_closing(times: list[int], watermark: int, bucket: int | None) -> None:
    s = Sessions(SPEC)
    feed(s, times, 0)
    touched = feed(s, [], watermark)
    if bucket is None:
        assert touched == set() and s.buckets == {}
        assert open_of(s) == [("u", min(times), max(times), len(times))]
        return
    assert touched == {bucket} and set(s.buckets) == {bucket}
    assert open_of(s) == []
    agg = s.buckets[bucket]
    length = max(times) - min(times)
    assert lengths_of(agg) == (1, length, length, length)
    assert agg.errors == 0
    assert round(agg.users.estimate()) == 1


def test_bucket_aggregate_of_several_sessions() -> None:
    # gap 2 s: sessions shorter than a bucket, so one user can have two in the same bucket.
    #   |0        |10       |20
    #   xx  x x             a: [0, 1 s] and [4 s, 6 s] (3 s apart > gap)
    #      x                b: [3 s]
    #               x x     c: [12 s, 13.5 s] in the next bucket
    spec = WindowSpec.session(2 * S, BUCKET)
    s = Sessions(spec)
    feed(
        s,
        [0, 1 * S, 4 * S, 6 * S, 3 * S, 12 * S, 13_500],
        0,
        users=["a", "a", "a", "a", "b", "c", "c"],
    )
    assert feed(s, [], 100 * S) == {0, 10 * S}
    first = s.buckets[0]
    assert lengths_of(first) == (3, 0, 2_000, 1_000)  # lengths 1000, 2000, 0
    assert first.latency.sum == 3_000
    assert round(first.users.estimate()) == 2  # a twice, b once
    assert lengths_of(s.buckets[10 * S]) == (1, 1_500, 1_500, 1_500)
    assert round(s.buckets[10 * S].users.estimate()) == 1
    metrics = first.metrics(spec.size_ms)
    assert metrics["count"] == 3 and metrics["distinct_users"] == 2
    assert metrics["latency_mean"] == 1_000


def test_a_bucket_accumulates_sessions_closed_in_different_calls() -> None:
    # gap 2 s; a [0, 1 s] closes at W=3 s; b [5 s, 7 s] (added then) closes at W=9 s; both in
    # bucket 0, which keeps the first session when the second arrives.
    spec = WindowSpec.session(2 * S, BUCKET)
    s = Sessions(spec)
    feed(s, [0, 1 * S], 0, users=["a", "a"])
    assert feed(s, [5 * S, 7 * S], 3 * S, users=["b", "b"]) == {0}
    assert lengths_of(s.buckets[0]) == (1, 1_000, 1_000, 1_000)
    assert feed(s, [], 9 * S) == {0}
    assert lengths_of(s.buckets[0]) == (2, 1_000, 2_000, 1_500)
    assert round(s.buckets[0].users.estimate()) == 2


# --- evict ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("watermark", "gone"),
    [
        #   |0        |10       |20       |30       |40
        #   [bucket 0 )                   ^ 0 + 10 + 20 = 30 s: bucket 0 can be dropped
        #             [bucket 10)                   ^ 40 s: bucket 10 s
        (30 * S - 1, []),
        (30 * S, [0]),
        (40 * S - 1, [0]),
        (40 * S, [0, 10 * S]),
    ],
)
def test_evict(watermark: int, gone: list[int]) -> None:
    s = Sessions(SPEC)
    feed(s, [1 * S, 12 * S, 200 * S], 0, users=["a", "b", "open"])
    assert feed(s, [], 32 * S) == {0, 10 * S}
    assert sorted(s.evict(watermark)) == gone
    assert set(s.buckets) == {0, 10 * S} - set(gone)
    assert open_of(s) == [("open", 200 * S, 200 * S, 1)]  # evict never touches open sessions


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(
    "spec",
    [SPEC, WindowSpec.session(2 * S, BUCKET), WindowSpec.session(15 * S, 7 * S)],
    ids=lambda s: s.key,
)
def test_sessions_never_close_into_an_evicted_bucket(seed: int, spec: WindowSpec) -> None:
    rng = np.random.default_rng(seed)
    s = Sessions(spec)
    evicted: set[int] = set()
    watermark, latest, closed = 0, 0, 0
    for _ in range(500):
        latest += int(rng.integers(0, 4 * S)) + (60 * S if rng.random() < 0.02 else 0)
        n = int(rng.integers(0, 8))
        times = latest - rng.integers(0, 40 * S, n) * (rng.random(n) < 0.3)
        users = [f"u{k}" for k in rng.integers(0, 12, n)]
        touched = feed(s, times.tolist(), watermark, users)
        closed += len(touched)
        assert not touched & evicted
        assert touched <= set(s.buckets)
        gone = s.evict(watermark)
        assert all(b + spec.size_ms + spec.gap_ms <= watermark for b in gone)
        assert all(b + spec.size_ms + spec.gap_ms > watermark for b in s.buckets)
        evicted |= set(gone)
        if n:
            watermark = max(watermark, int(times.max()) - 15 * S)
    assert closed > 50 and len(evicted) > 10


# --- state blob -----------------------------------------------------------------------------------

ODD_USERS = ["é", 'say "hi"', "a\x1fb", "\x1f", "🙂 ü", "back\\slash", "{[,]}", "plain"]


def test_bytes_round_trip_keeps_open_sessions_and_buckets() -> None:
    s = Sessions(SPEC)
    n = len(ODD_USERS)
    feed(s, [i * S for i in range(n)], 0, users=ODD_USERS)  # closed below
    feed(s, [40 * S + i for i in range(n)] * 2, 10 * S, users=ODD_USERS * 2)  # stay open
    assert feed(s, [], 35 * S) == {0}
    assert len(open_of(s)) == n
    back = Sessions.from_bytes(s.to_bytes(), SPEC)
    assert open_of(back) == open_of(s)
    assert back.users.dtype == object and back.first.dtype == np.int64
    assert {b: a.to_bytes() for b, a in back.buckets.items()} == {
        b: a.to_bytes() for b, a in s.buckets.items()
    }
    assert back.to_bytes() == s.to_bytes()
    # both go on identically: the same users (by hash too) close the same sessions
    for x in (s, back):
        assert feed(x, [45 * S], 40 * S, users=["a\x1fb"]) == set()
        assert feed(x, [], 100 * S) == {40 * S}
    assert back.to_bytes() == s.to_bytes()
    assert round(back.buckets[40 * S].users.estimate()) == n
    # "a\x1fb" (index 2) opened at 40.002 s and went on to 45 s; the others have length 0
    assert lengths_of(back.buckets[40 * S])[:3] == (n, 0, 5 * S - 2)


def test_bytes_round_trip_of_empty_state() -> None:
    back = Sessions.from_bytes(Sessions(SPEC).to_bytes(), SPEC)
    assert open_of(back) == [] and back.buckets == {}


@pytest.mark.parametrize(
    "other", [WindowSpec.session(30 * S, BUCKET), WindowSpec.session(GAP, 5 * S)], ids=str
)
def test_from_bytes_refuses_another_gap_or_bucket(other: WindowSpec) -> None:
    blob = Sessions(SPEC).to_bytes()
    with pytest.raises(ValueError, match="gap 20000 ms in 10000 ms buckets") as err:
        Sessions.from_bytes(blob, other)
    assert f"{other.gap_ms}/{other.size_ms}" in str(err.value)
    assert "new --checkpoint directory" in str(err.value)


def test_from_bytes_refuses_other_blobs() -> None:
    blob = Sessions(SPEC).to_bytes()
    with pytest.raises(ValueError, match="bad magic"):
        Sessions.from_bytes(b"XXXX" + blob[4:], SPEC)


def test_from_bytes_refuses_truncated_state_with_a_value_error() -> None:
    # Every from_bytes here answers bad input with ValueError (WindowAgg: "ValueError on anything
    # else"; ServiceWindows: "window state is truncated: use a new --checkpoint directory"), and
    # ServiceWindows.from_bytes passes the session part straight to Sessions.from_bytes. A cut-off
    # session blob must not surface as struct.error from inside the parser.
    s = Sessions(SPEC)
    feed(s, [0, 1 * S, 50 * S], 0, users=["a", "b", "c"])
    assert feed(s, [], 30 * S) == {0}  # one open session, one bucket: every section present
    blob = s.to_bytes()
    wrong: dict[int, str] = {}
    for cut in range(len(blob)):
        try:
            Sessions.from_bytes(blob[:cut], SPEC)
        except ValueError:
            continue
        except Exception as e:  # the point is which type escapes
            wrong[cut] = f"{type(e).__module__}.{type(e).__qualname__}"
        else:
            wrong[cut] = "accepted"
    assert not wrong, f"{len(wrong)} of {len(blob)} prefixes, e.g. {sorted(wrong.items())[:3]}"


# --- randomized: Sessions against the plain-Python interval merge ---------------------------------

SERVICES = ["api", "web", "db"]
USERS = [f"u{i:03d}" for i in range(30)] + ODD_USERS


def random_batches(seed: int, n_batches: int = 400) -> list[list[dict[str, Any]]]:
    """Rows like the generator's truth: events (some out of order or late), duplicates, nulls,
    heartbeats; the clock sometimes stalls for a minute so watermarks jump."""
    rng = np.random.default_rng(seed)
    clock = T
    batches = []
    for _ in range(n_batches):
        clock += int(rng.integers(0, 3 * S)) + (
            int(rng.integers(40, 90)) * S if rng.random() < 0.02 else 0
        )
        rows: list[dict[str, Any]] = []
        for _ in range(int(rng.integers(0, 12))):
            r = rng.random()
            if r < 0.7:
                delay = 0
            elif r < 0.95:  # out of order, mostly still accepted (lateness 15 s)
                delay = int(rng.integers(0, 12 * S))
            else:  # often late: time + gap <= watermark
                delay = int(rng.integers(12 * S, 60 * S))
            user = None if rng.random() < 0.05 else USERS[int(rng.integers(len(USERS)))]
            service = SERVICES[int(rng.choice(3, p=[0.5, 0.3, 0.2]))]
            rows.append(
                {"kind": "event", "event_time": clock - delay, "service": service, "user_id": user}
            )
            if rng.random() < 0.03:
                rows.append(dict(rows[-1], kind="duplicate"))
        if rng.random() < 0.1:
            rows.append(
                {"kind": "heartbeat", "event_time": clock, "service": None, "user_id": None}
            )
        batches.append(rows)
    return batches


def run_sessions(
    batches: list[list[dict[str, Any]]], spec: WindowSpec
) -> tuple[dict[tuple[int, str], WindowAgg], Counter[str]]:
    """Drive one `Sessions` per service as the job does, state through bytes between batches.

    Per batch: the watermark in force is the one from the batches before it; each service with
    events adds its rows, reports the buckets it touched (absolute, like the sink), evicts and
    is stored as bytes. Returns the reported buckets (with `*` merged over services, as the sink
    does) and counters of what the data exercised.
    """
    state: dict[str, bytes] = {}
    out: dict[tuple[int, str], WindowAgg] = {}
    seen: Counter[str] = Counter()
    watermark = 0
    latest: dict[str, int] = {}
    for rows in batches:
        events = [t for t in rows if t["kind"] in ("event", "duplicate")]
        for service in sorted({t["service"] for t in events}):
            mine = [t for t in events if t["service"] == service]
            s = Sessions.from_bytes(state[service], spec) if service in state else Sessions(spec)
            for t in mine:
                if t["event_time"] + spec.gap_ms <= watermark:
                    seen["late"] += 1
                elif t["event_time"] < latest.get(service, t["event_time"]):
                    seen["out of order"] += 1
                latest[service] = max(latest.get(service, t["event_time"]), t["event_time"])
            touched = s.add(
                np.array([t["user_id"] for t in mine], dtype=object),
                np.array([t["event_time"] for t in mine], dtype=np.int64),
                watermark,
            )
            for b in touched:
                out[(b, service)] = WindowAgg.from_bytes(s.buckets[b].to_bytes())
            seen["evicted"] += len(s.evict(watermark))
            seen["long"] += int(np.count_nonzero(s.last - s.first > spec.gap_ms))
            state[service] = s.to_bytes()
        times = [t["event_time"] for t in rows if t["kind"] in ("event", "duplicate", "heartbeat")]
        if times:
            watermark = max(watermark, max(times) - LATENESS_MS)
    for b in {b for b, _ in out}:
        out[(b, "*")] = WindowAgg.merged(a for (b2, svc), a in out.items() if b2 == b)
    return out, seen


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "spec",
    [SPEC, WindowSpec.session(5 * S, 7 * S), WindowSpec.session(30 * S, 60 * S)],
    ids=lambda s: s.key,
)
def test_sessions_match_the_reference_interval_merge(seed: int, spec: WindowSpec) -> None:
    batches = random_batches(seed)
    expected = closed_sessions(batches, spec.gap_ms, spec.size_ms)
    got, seen = run_sessions(batches, spec)
    # the data exercised what it is meant to
    assert sum(len(v) for (_, svc), v in expected.items() if svc == "*") > 300
    assert seen["late"] > 10 and seen["out of order"] > 50 and seen["evicted"] > 10
    assert seen["long"] > 0  # open sessions whose first and last are more than gap apart
    assert set(got) == set(expected)
    for key, sessions in expected.items():
        agg = got[key]
        lengths = sorted(length for _, length in sessions)
        assert agg.count == agg.latency.count == len(lengths), key
        assert agg.errors == 0
        assert (agg.latency.min, agg.latency.max) == (lengths[0], lengths[-1]), key
        assert agg.latency.sum == sum(lengths), key  # integers: exact in float64
        assert agg.latency.mean == pytest.approx(sum(lengths) / len(lengths), rel=1e-12), key
        # unit-weight centroids are single sessions: each must be one of the exact lengths
        means, weights = agg.latency.centroids
        assert weights.sum() == len(lengths)
        assert not Counter(means[weights == 1].tolist()) - Counter(map(float, lengths)), key
        users = {u for u, _ in sessions}
        assert abs(agg.users.estimate() - len(users)) <= max(0.03 * len(users), 1), key
