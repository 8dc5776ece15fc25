"""Device clock correction (jobs/parse/parser.py): `clock_offsets`, `make_parser` with it on.

An event carries its device's send time; the broker stamps its receive time. `receive - sent`
is the device's offset plus the network delay, so a device's offset is estimated as the low
median of its events' offsets in the batch (robust to a few slow deliveries), and every device
time of the event (event time, send time) moves by it onto the broker's clock:

    device clock (2 s behind):   sent 10:00:00.000  --->  broker receives 10:00:02.050
    own offset = +2050 ms; the device's median over its events = +2000 ms
    corrected event time = device event time + 2000 ms

Input batches are shaped like the Kafka source's output, as in tests/unit/test_parse.py.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from statistics import median_low
from typing import Any

import pyarrow as pa
import pytest

from jobs.parse.parser import RecordKind, clock_offsets, make_parser, parse_batches

S = 1_000
T = 1_795_341_600_000  # epoch ms inside the event contract's range
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

SOURCE_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)


def js(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def event(eid: str, event_time: int, user: str | None = None, sent: int | None = None) -> bytes:
    obj: dict[str, Any] = {"event_id": eid, "event_time": event_time, "service": "api"}
    if user is not None:
        obj["user_id"] = user
    if sent is not None:
        obj["sent_time"] = sent
    return js(obj)


def source_batch(
    records: list[tuple[bytes | None, int | None]], partition: int = 0, first_offset: int = 0
) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "partition": [partition] * n,
            "offset": list(range(first_offset, first_offset + n)),
            "timestamp": [None if ts is None else ts * 1000 for _, ts in records],
            "key": [None] * n,
            "value": [v for v, _ in records],
        },
        schema=SOURCE_SCHEMA,
    )


def low_median(values: list[int]) -> int:
    """The low median by definition: the smaller middle value of the sorted values."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


# --- clock_offsets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "sent", "receive", "expected"),
    [
        pytest.param([], [], [], [], id="empty"),
        pytest.param(["d"], [T], [T + 250], [250], id="one-event"),
        # three events of one device: 100, 150 and a slow delivery of 5000 -> median 150
        pytest.param(
            ["d", "d", "d"],
            [T, T + S, T + 2 * S],
            [T + 100, T + S + 5000, T + 2 * S + 150],
            [150, 150, 150],
            id="median-ignores-a-slow-delivery",
        ),
        # an even count takes the LOW median (a value that was observed, never an average)
        pytest.param(["d", "d"], [T, T], [T + 10, T + 20], [10, 10], id="even-count-low"),
        pytest.param(
            ["d", "d", "d", "d"],
            [T] * 4,
            [T + 40, T + 10, T + 30, T + 20],
            [20] * 4,
            id="even-count-unsorted",
        ),
        # device clock ahead of the broker: negative offsets
        pytest.param(
            ["d", "d", "d"], [T + 3000, T + 3100, T + 2900], [T, T, T], [-3000] * 3, id="ahead"
        ),
        # no device: each event keeps its own offset
        pytest.param([None, None], [T, T], [T + 7, T + 900], [7, 900], id="no-device-own-offset"),
        # devices are estimated separately
        pytest.param(
            ["a", "b", "a", "b", "a"],
            [T, T, T, T, T],
            [T + 1, T + 100, T + 3, T + 300, T + 2],
            [2, 100, 2, 100, 2],
            id="two-devices",
        ),
        # no send time or no receive time: None, and not part of the device's median
        pytest.param(
            ["d", "d", "d", "d"],
            [T, None, T, T],
            [T + 10, T + 99_999, None, T + 30],
            [10, None, None, 10],
            id="missing-times",
        ),
        pytest.param([None], [None], [T], [None], id="no-device-no-sent"),
        pytest.param([None], [T], [None], [None], id="no-device-no-receive"),
        # a device whose only event has no send time: None, and no error
        pytest.param(["d"], [None], [T], [None], id="device-without-any-offset"),
    ],
)
def test_clock_offsets(
    devices: list[str | None],
    sent: list[int | None],
    receive: list[int | None],
    expected: list[int | None],
) -> None:
    assert clock_offsets(devices, sent, receive) == expected


def test_clock_offsets_agree_with_brute_force() -> None:
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randrange(0, 30)
        devices = [rng.choice([None, "a", "b", "c", "d"]) for _ in range(n)]
        sent = [None if rng.random() < 0.1 else T + rng.randrange(-5000, 5000) for _ in range(n)]
        receive = [None if rng.random() < 0.1 else T + rng.randrange(0, 9000) for _ in range(n)]
        expected: list[int | None] = []
        for d, s, r in zip(devices, sent, receive, strict=True):
            if s is None or r is None:
                expected.append(None)
            elif d is None:
                expected.append(r - s)
            else:
                own = [
                    r2 - s2
                    for d2, s2, r2 in zip(devices, sent, receive, strict=True)
                    if d2 == d and s2 is not None and r2 is not None
                ]
                expected.append(low_median(own))
        got = clock_offsets(devices, sent, receive)
        assert got == expected
        assert all(type(o) is int for o in got if o is not None)
        assert low_median([3, 1, 2, 4]) == median_low([3, 1, 2, 4])  # the helper is right


def test_clock_offsets_refuse_columns_of_different_lengths() -> None:
    with pytest.raises(ValueError):
        clock_offsets(["a", "b"], [T], [T, T])


# --- make_parser ----------------------------------------------------------------------------

#   user u1 (clock 2 s behind):   offsets 2050, 2000, 1990 -> median 2000
#   user u2 (clock 3 s ahead):    one event, offset -3000
#   no user:                      its own offset, 400
#   user u3:                      one event without sent_time -> no offset, time kept
#   user u4:                      no broker timestamp -> no offset, time kept
RECORDS: list[tuple[bytes | None, int | None]] = [
    (event("e1", T - 2000 + 1, "u1", T - 2000), T + 50),
    (event("e2", T - 2000 + 5 * S, "u1", T - 2000 + 5 * S + 10), T + 5 * S + 10),
    (js({"heartbeat": True, "event_time": T + 7 * S}), T + 7 * S),
    (event("e3", T + 3000 + 2 * S, "u2", T + 3000 + 2 * S), T + 2 * S),
    (event("e4", T - 2000 + 9 * S, "u1", T - 2000 + 9 * S), T + 9 * S - 10),
    (b"{not json", T + 8 * S),
    (event("e5", T + 4 * S, None, T + 4 * S - 400), T + 4 * S),
    (event("e6", T + 6 * S, "u3"), T + 6 * S + 77),
    (event("e7", T + 8 * S, "u4", T + 8 * S - 500), None),
]
# event id -> (offset, corrected event_ms, corrected sent_ms)
CORRECTED: dict[str, tuple[int | None, int, int | None]] = {
    "e1": (2000, T + 1, T),
    "e2": (2000, T + 5 * S, T + 5 * S + 10),
    "e3": (-3000, T + 2 * S, T + 2 * S),
    "e4": (2000, T + 9 * S, T + 9 * S),
    "e5": (400, T + 4 * S + 400, T + 4 * S),
    "e6": (None, T + 6 * S, None),
    "e7": (None, T + 8 * S, T + 8 * S - 500),
}


def parse(records: list[tuple[bytes | None, int | None]], correct: bool) -> list[dict[str, Any]]:
    out = list(make_parser(correct)(iter([source_batch(records)])))
    assert len(out) == 1
    return out[0].to_pylist()


def test_without_correction_it_is_the_plain_parser() -> None:
    assert make_parser(False) is parse_batches
    assert make_parser() is parse_batches
    rows = parse(RECORDS, correct=False)
    assert [r["clock_offset_ms"] for r in rows] == [None] * len(RECORDS)
    e1 = rows[0]
    assert (e1["event_ms"], e1["sent_ms"]) == (T - 2000 + 1, T - 2000)


def test_correction_moves_event_and_sent_time_by_the_devices_offset() -> None:
    plain = parse(RECORDS, correct=False)
    fixed = parse(RECORDS, correct=True)
    assert len(fixed) == len(plain) == len(RECORDS)
    for before, after in zip(plain, fixed, strict=True):
        if before["kind"] != RecordKind.EVENT:
            continue
        offset, event_ms, sent_ms = CORRECTED[before["event_id"]]
        assert after["clock_offset_ms"] == offset, before["event_id"]
        assert (after["event_ms"], after["sent_ms"]) == (event_ms, sent_ms), before["event_id"]
        shift = offset or 0
        assert after["event_ms"] == before["event_ms"] + shift
        if before["sent_ms"] is not None:
            assert after["sent_ms"] == before["sent_ms"] + shift
        # event_time is event_ms as a timestamp, corrected too
        assert after["event_time"] == fixed_time(after["event_ms"])
        # nothing else changes
        same = {k: v for k, v in before.items() if k not in MOVED}
        assert {k: after[k] for k in same} == same


MOVED = {"event_ms", "event_time", "sent_ms", "clock_offset_ms"}


def fixed_time(event_ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=event_ms)


def test_correction_leaves_heartbeats_and_dead_letters_untouched() -> None:
    plain = parse(RECORDS, correct=False)
    fixed = parse(RECORDS, correct=True)
    kinds = [r["kind"] for r in fixed]
    assert kinds.count(RecordKind.HEARTBEAT) == 1 and kinds.count(RecordKind.DEAD) == 1
    for before, after in zip(plain, fixed, strict=True):
        if before["kind"] in (RecordKind.HEARTBEAT, RecordKind.DEAD):
            assert after == before
            assert after["clock_offset_ms"] is None


def test_correction_keeps_the_schema() -> None:
    (plain,) = parse_batches(iter([source_batch(RECORDS)]))
    (fixed,) = make_parser(True)(iter([source_batch(RECORDS)]))
    assert fixed.schema == plain.schema
    assert fixed.column("clock_offset_ms").type == pa.int64()


def test_each_batch_is_estimated_on_its_own() -> None:
    # The same device in two batches: the offset comes from that batch's records only, so
    # a batch's result depends on nothing but its own offset range (replays are identical).
    first: list[tuple[bytes | None, int | None]] = [
        (event("a", T, "u1", T), T + 100),
        (event("b", T + S, "u1", T + S), T + S + 300),
    ]
    second: list[tuple[bytes | None, int | None]] = [
        (event("c", T + 2 * S, "u1", T + 2 * S), T + 2 * S + 7000)
    ]
    out = list(
        make_parser(True)(
            iter([source_batch(first), source_batch([]), source_batch(second, first_offset=2)])
        )
    )
    assert [b.num_rows for b in out] == [2, 1]  # empty batches are skipped
    assert out[0].column("clock_offset_ms").to_pylist() == [100, 100]
    assert out[1].column("clock_offset_ms").to_pylist() == [7000]
    assert out[1].column("event_ms").to_pylist() == [T + 2 * S + 7000]
    # and a batch parsed alone gives the same rows
    (alone,) = make_parser(True)(iter([source_batch(second, first_offset=2)]))
    assert alone.to_pylist() == out[1].to_pylist()


def test_correction_agrees_with_brute_force_on_random_batches() -> None:
    rng = random.Random(5)
    for _ in range(20):
        records: list[tuple[bytes | None, int | None]] = []
        truth: list[tuple[str | None, int, int | None, int | None]] = []  # user, time, sent, ts
        for i in range(rng.randrange(1, 40)):
            if rng.random() < 0.1:
                records.append((js({"heartbeat": True, "event_time": T + i}), T + i))
                truth.append((None, -1, None, None))
                continue
            user = rng.choice([None, "u1", "u2", "u3"])
            t = T + rng.randrange(0, 60 * S)
            sent = None if rng.random() < 0.1 else t + rng.randrange(0, 50)
            ts = None if rng.random() < 0.1 else t + rng.randrange(-4000, 4000)
            records.append((event(f"e{i}", t, user, sent), ts))
            truth.append((user, t, sent, ts))
        rows = parse(records, correct=True)
        for (user, t, sent, ts), row in zip(truth, rows, strict=True):
            if t < 0:
                assert row["kind"] == RecordKind.HEARTBEAT and row["clock_offset_ms"] is None
                continue
            if sent is None or ts is None:
                offset = None
            elif user is None:
                offset = ts - sent
            else:
                offset = low_median(
                    [
                        ts2 - s2
                        for u2, t2, s2, ts2 in truth
                        if t2 >= 0 and u2 == user and s2 is not None and ts2 is not None
                    ]
                )
            assert row["clock_offset_ms"] == offset
            assert row["event_ms"] == t + (offset or 0)
            assert row["sent_ms"] == (None if sent is None else sent + (offset or 0))
