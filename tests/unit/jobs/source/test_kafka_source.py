"""The pure parts of the Kafka source (jobs/source/kafka_source.py): batch sizing and task layout.

No broker here: `split_limit` is arithmetic on offset dicts, `group_ranges` on offset ranges.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from kafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)

from jobs.source.kafka_source import (
    KafkaPartition,
    KafkaRanges,
    balance_ranges,
    group_ranges,
    ranges_of,
    retrying,
    split_limit,
)

# --- split_limit: table ---------------------------------------------------------------------
#
# Proportional: each partition takes limit * available / total, rounded down; the records that
# leaves go to the largest remainders (ties: lower partition number first).


@pytest.mark.parametrize(
    ("start", "end", "limit", "expected"),
    [
        pytest.param(
            {"0": 0, "1": 0, "2": 0},
            {"0": 5, "1": 3, "2": 0},
            100,
            {"0": 5, "1": 3, "2": 0},
            id="limit-larger-than-available-takes-everything",
        ),
        pytest.param(
            {"0": 0, "1": 0, "2": 0},
            {"0": 8, "1": 3, "2": 0},
            11,
            {"0": 8, "1": 3, "2": 0},
            id="limit-equal-to-available",
        ),
        pytest.param(
            {"0": 0, "1": 0, "2": 0},
            {"0": 100, "1": 100, "2": 100},
            30,
            {"0": 10, "1": 10, "2": 10},
            id="equal-partitions-equal-shares",
        ),
        pytest.param(
            # 10/3 each: 3 + 3 + 3, the one left to the lowest partition (equal remainders)
            {"0": 0, "1": 0, "2": 0},
            {"0": 100, "1": 100, "2": 100},
            10,
            {"0": 4, "1": 3, "2": 3},
            id="remainder-to-the-lower-partition-on-ties",
        ),
        pytest.param(
            # a backlog keyed unevenly: 43 / 31 / 26 of it, each partition gives that share
            {"0": 0, "1": 0, "2": 0},
            {"0": 4300, "1": 3100, "2": 2600},
            1000,
            {"0": 430, "1": 310, "2": 260},
            id="uneven-partitions-same-fraction-of-each",
        ),
        pytest.param(
            # 30 * 2/102 = 0.59, 30 * 50/102 = 14.7 twice: 0 + 14 + 14, and the two left to
            # the largest remainders, p1 and p2 (0.71) before p0 (0.59)
            {"0": 0, "1": 0, "2": 0},
            {"0": 2, "1": 50, "2": 50},
            30,
            {"0": 0, "1": 15, "2": 15},
            id="small-partition-takes-its-fraction",
        ),
        pytest.param(
            {"0": 7, "1": 7, "2": 7},
            {"0": 7, "1": 57, "2": 107},
            40,
            {"0": 7, "1": 20, "2": 34},
            id="partition-with-nothing-new",
        ),
        pytest.param(
            {"0": 0, "1": 0, "2": 0},
            {"0": 5, "1": 5, "2": 5},
            1,
            {"0": 1, "1": 0, "2": 0},
            id="limit-1",
        ),
        pytest.param(
            {"0": 4, "1": 9},
            {"0": 10, "1": 20},
            0,
            {"0": 4, "1": 9},
            id="limit-0-stays-put",
        ),
        pytest.param(
            # p2 appeared after `start` was taken: it starts at offset 0 with 4 records;
            # 9 * 10/24 = 3.75 twice, 9 * 4/24 = 1.5: 3 + 3 + 1, the two left to p0 and p1
            {"0": 10, "1": 10},
            {"0": 20, "1": 20, "2": 4},
            9,
            {"0": 14, "1": 14, "2": 1},
            id="new-partition-missing-in-start",
        ),
        pytest.param(
            {"0": 10, "1": 10},
            {"0": 20, "1": 20, "2": 4},
            100,
            {"0": 20, "1": 20, "2": 4},
            id="new-partition-missing-in-start-everything",
        ),
        pytest.param(
            # ties are broken by partition NUMBER, not string order ("10" < "2" as strings)
            {"2": 0, "10": 0},
            {"2": 100, "10": 100},
            3,
            {"2": 2, "10": 1},
            id="tie-break-numeric",
        ),
        pytest.param(
            {"0": 1_000_000},
            {"0": 1_000_500},
            100,
            {"0": 1_000_100},
            id="single-partition-large-offsets",
        ),
        pytest.param({}, {}, 100, {}, id="no-partitions"),
    ],
)
def test_split_limit_table(
    start: dict[str, int], end: dict[str, int], limit: int, expected: dict[str, int]
) -> None:
    assert split_limit(start, end, limit) == expected


# --- split_limit: properties ------------------------------------------------------------------


def _random_case(rng: random.Random) -> tuple[dict[str, int], dict[str, int], int]:
    n = rng.randint(1, 12)
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    for p in range(n):
        s = rng.choice([0, rng.randint(0, 10_000)])
        avail = rng.choice([0, 1, 2, rng.randint(0, 50), rng.randint(0, 5_000)])
        end[str(p)] = s + avail
        if rng.random() < 0.9:  # some partitions are new: missing in start
            start[str(p)] = s
        else:
            end[str(p)] = avail
    limit = rng.choice([1, 2, n, n + 1, rng.randint(0, 100), rng.randint(0, 20_000)])
    return start, end, limit


@pytest.mark.parametrize("seed", range(40))
def test_split_limit_properties(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        start, end, limit = _random_case(rng)
        out = split_limit(start, end, limit)
        assert set(out) == set(end)
        base = {p: start.get(p, 0) for p in end}
        for p in end:
            assert out[p] <= end[p], "never past the end"
            assert out[p] >= base[p], "never before the start"
        taken = {p: out[p] - base[p] for p in end}
        available = sum(end[p] - base[p] for p in end)
        assert sum(taken.values()) == min(limit, available)
        # in proportion: within one record of its share of the limit
        if available > limit:
            for p in end:
                share = limit * (end[p] - base[p]) / available
                assert share - 1 < taken[p] < share + 1, (start, end, limit, out)


@pytest.mark.parametrize("seed", range(10))
def test_split_limit_is_deterministic_and_order_free(seed: int) -> None:
    rng = random.Random(seed)
    start, end, limit = _random_case(rng)
    first = split_limit(start, end, limit)
    assert split_limit(start, end, limit) == first
    # the same offsets given in another dict order give the same batch
    items = list(end.items())
    rng.shuffle(items)
    assert split_limit(dict(reversed(list(start.items()))), dict(items), limit) == first


def test_split_limit_does_not_mutate_inputs() -> None:
    start, end = {"0": 1, "1": 2}, {"0": 10, "1": 20}
    split_limit(start, end, 5)
    assert start == {"0": 1, "1": 2}
    assert end == {"0": 10, "1": 20}


# --- group_ranges ---------------------------------------------------------------------------


def _ranges(sizes: list[int]) -> list[KafkaPartition]:
    return [KafkaPartition("b:9092", "t", p, 100, 100 + n) for p, n in enumerate(sizes)]


def _layout(parts: list[Any]) -> list[list[int]]:
    return [
        [r.partition for r in p.ranges] if isinstance(p, KafkaRanges) else [p.partition]
        for p in parts
    ]


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([70, 65, 80], [[0, 1, 2]]),  # a low-rate batch: one task
        ([20_000, 20_000, 20_000], [[0], [1], [2]]),  # a big batch: a task per partition
        ([6_000, 6_000, 6_000], [[0, 1, 2]]),
        ([6_000, 6_000, 6_000, 9_000], [[0, 1], [2, 3]]),
        ([15_000, 3_000], [[0, 1]]),  # a short remainder joins the last task
        ([500], [[0]]),
    ],
)
def test_small_ranges_share_a_task(sizes: list[int], expected: list[list[int]]) -> None:
    parts = group_ranges(_ranges(sizes), 10_000)
    assert _layout(parts) == expected
    # every range is read exactly once, in order
    flat = [r for p in parts for r in (p.ranges if isinstance(p, KafkaRanges) else [p])]
    assert [(r.partition, r.start, r.end) for r in flat] == [
        (r.partition, r.start, r.end) for r in _ranges(sizes)
    ]


def test_grouping_is_a_function_of_the_ranges() -> None:
    """A replayed batch plans the same tasks."""
    a = group_ranges(_ranges([3, 9_999, 1, 12_000, 7]), 10_000)
    b = group_ranges(_ranges([3, 9_999, 1, 12_000, 7]), 10_000)
    assert [p.value for p in a] == [p.value for p in b]


# --- balance_ranges ---------------------------------------------------------------------------


def _pieces(parts: list[Any]) -> list[list[tuple[int, int, int]]]:
    return [[(r.partition, r.start, r.end) for r in ranges_of(p)] for p in parts]


@pytest.mark.parametrize(
    ("sizes", "min_records", "max_tasks", "expected"),
    [
        # one wave of two equal tasks: the middle partition is cut where the first task is full
        ([30, 30, 40], 10, 2, [[(0, 100, 130), (1, 100, 120)], [(1, 120, 130), (2, 100, 140)]]),
        # too few records for two tasks of min_records: one task reads everything
        ([5, 5, 5], 10, 2, [[(0, 100, 105), (1, 100, 105), (2, 100, 105)]]),
        # one big partition is cut into max_tasks tasks
        ([90, 0, 0], 10, 3, [[(0, 100, 130)], [(0, 130, 160)], [(0, 160, 190)]]),
        # the count of tasks is limited by min_records before max_tasks
        ([25, 0, 0], 10, 4, [[(0, 100, 113)], [(0, 113, 125)]]),
    ],
)
def test_balance_ranges_table(
    sizes: list[int], min_records: int, max_tasks: int, expected: list[list[tuple[int, int, int]]]
) -> None:
    ranges = [r for r in _ranges(sizes) if r.end > r.start]
    assert _pieces(balance_ranges(ranges, min_records, max_tasks)) == expected


def test_balance_ranges_reads_every_offset_once_in_equal_tasks() -> None:
    rng = random.Random(5)
    for _ in range(300):
        sizes = [rng.choice([0, 1, 7, 500, 30_000]) for _ in range(rng.randint(1, 6))]
        ranges = [r for r in _ranges(sizes) if r.end > r.start]
        if not ranges:
            continue
        min_records, max_tasks = rng.choice([1, 100, 10_000]), rng.randint(1, 5)
        parts = balance_ranges(ranges, min_records, max_tasks)
        pieces = [x for task in _pieces(parts) for x in task]
        # the pieces, in order, are exactly the ranges cut at task boundaries
        for p in {r.partition for r in ranges}:
            mine = [(a, b) for q, a, b in pieces if q == p]
            whole = next(r for r in ranges if r.partition == p)
            assert mine[0][0] == whole.start and mine[-1][1] == whole.end
            assert all(b == a2 for (_, b), (a2, _) in zip(mine, mine[1:], strict=False))
        total = sum(r.end - r.start for r in ranges)
        sizes_of = [sum(b - a for _, a, b in task) for task in _pieces(parts)]
        assert sum(sizes_of) == total and len(parts) <= max_tasks
        if len(parts) > 1:  # equal shares of ceil(total / tasks); the last one short by < tasks
            share = sizes_of[0]
            assert sizes_of[:-1] == [share] * (len(parts) - 1)
            assert share - len(parts) < sizes_of[-1] <= share
            assert share >= min_records
        assert _pieces(parts) == _pieces(balance_ranges(ranges, min_records, max_tasks))


# --- asking a broker that does not answer -------------------------------------------------------


class _Clock:
    """A clock the retries' sleeps move (no real waiting)."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, s: float) -> None:
        self.now += s


def test_the_planner_asks_again_while_the_broker_times_out_then_gives_up() -> None:
    clock = _Clock()
    answers: list[Any] = [KafkaTimeoutError("no answer"), KafkaConnectionError("lost"), {"0": 7}]

    def ask() -> Any:
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    assert retrying("offsets", ask, 60_000, clock.sleep, lambda: clock.now) == {"0": 7}
    assert clock.now == 2.0  # asked three times, a second apart

    def never() -> Any:
        raise KafkaTimeoutError("no answer")

    clock = _Clock()
    with pytest.raises(KafkaTimeoutError):
        retrying("offsets", never, 30_000, clock.sleep, lambda: clock.now)
    assert clock.now == 30.0  # the budget, then the error

    def refused() -> Any:  # not retriable: raised at once
        raise TopicAuthorizationFailedError("denied")

    clock = _Clock()
    with pytest.raises(TopicAuthorizationFailedError):
        retrying("offsets", refused, 30_000, clock.sleep, lambda: clock.now)
    assert clock.now == 0.0
