"""Raw source batches -> parsed rows (jobs/parse/parser.py), on hand-built Arrow batches.

The input batches are shaped like the Kafka source's output (partition int32, offset int64,
timestamp timestamp[us, UTC], key binary, value binary); every record must come out as exactly
one row whose `kind` says what it is, whatever its bytes (drawn by hypothesis at the end). Device
clock correction (`clock_offsets`, `make_parser` with it on) has a section of its own.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from statistics import median_low
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from jobs.parse.parser import PARSED_SCHEMA, RecordKind, clock_offsets, make_parser, parse_batches
from jobs.source.kafka_source import ARROW_SCHEMA
from tests.fixtures import S, T
from tests.unit.fixtures import FUZZ, dumps, events, json_values
from tidegauge.core.events import (
    DEAD_LETTER_RAW_CAP,
    MAX_RECORD_BYTES,
    Event,
    Heartbeat,
    Reason,
    Rejected,
    parse_record,
)
from tidegauge.core.formats import RecordFormat

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

EXPECTED_TYPES = {
    "partition": pa.int32(),
    "offset": pa.int64(),
    "kafka_ms": pa.int64(),
    "kind": pa.string(),
    "event_time": pa.timestamp("us", tz="UTC"),
    "event_ms": pa.int64(),
    "service": pa.string(),
    "user_id": pa.string(),
    "event_id": pa.string(),
    "latency_ms": pa.float64(),
    "status": pa.int32(),
    "sent_ms": pa.int64(),
    "reason": pa.string(),
    "detail": pa.string(),
    "raw": pa.binary(),
    "raw_size": pa.int32(),
    "clock_offset_ms": pa.int64(),
}


def js(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def iso_ms(text: str) -> int:
    """Epoch ms of an ISO string, floored to the millisecond (as the contract says)."""
    dt = datetime.fromisoformat(text)
    delta = dt - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000 + delta.microseconds // 1_000


ISO_UTC = "2026-11-22T10:00:09.9995+00:00"  # floors to .999
ISO_ZONE = "2026-11-22T12:00:10+02:00"  # 10:00:10 UTC

# (value, kafka timestamp ms or None): one of every kind, and a malformed record of every reason.
RECORDS: list[tuple[bytes | None, int | None]] = [
    (
        js(
            {
                "event_id": "e1",
                "event_time": T + 1,
                "service": "api",
                "user_id": "u1",
                "latency_ms": 12.5,
                "status": 200,
                "sent_time": T + 5,
            }
        ),
        T + 10,
    ),
    (js({"event_id": "e2", "event_time": ISO_UTC, "service": "web"}), T + 11),
    (
        js(
            {
                "event_id": "e3",
                "event_time": ISO_ZONE,
                "service": "api",
                "status": -(2**31),
                "latency_ms": 0,
                "sent_time": ISO_ZONE,
            }
        ),
        None,  # no Kafka timestamp
    ),
    (js({"event_id": "e4", "event_time": T + 2, "service": "db", "status": 2**31 - 1}), T + 12),
    (js({"heartbeat": True, "event_time": T + 7, "partition": 1, "source": "gen"}), T + 13),
    (js({"heartbeat": True, "event_time": ISO_UTC}), T + 14),
    # malformed, one per reason (plus both spellings of "no value")
    (b"", T + 20),  # empty
    (None, T + 21),  # empty (tombstone)
    (b"\xff\xfe{", T + 22),  # invalid_utf8
    (b"{not json", T + 23),  # invalid_json
    (b"[1,2]", T + 24),  # not_an_object
    (js({"event_time": T, "service": "api"}), T + 25),  # missing_field
    (js({"event_id": "e", "event_time": T, "service": 5}), T + 26),  # wrong_type
    (js({"event_id": "e", "event_time": T // 1000, "service": "api"}), T + 27),  # invalid_time
    (js({"event_id": "e", "event_time": T, "service": "*"}), None),  # invalid_value
    (js({"event_id": "e", "event_time": T, "service": "s" * 129}), T + 28),  # too_long
    (b"{" + b" " * MAX_RECORD_BYTES + b"}", T + 28),  # too_large
    (b"x" * (DEAD_LETTER_RAW_CAP * 3 + 7), T + 29),  # invalid_json, larger than the cap
    (b"y" * DEAD_LETTER_RAW_CAP, T + 30),  # exactly the cap
    (b"z" * (DEAD_LETTER_RAW_CAP + 1), T + 31),  # one byte over
]


def source_batch(
    records: list[tuple[bytes | None, int | None]], partition: int = 2, first_offset: int = 100
) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "partition": [partition] * n,
            "offset": list(range(first_offset, first_offset + n)),
            "timestamp": [None if ts is None else ts * 1000 for _, ts in records],
            "key": [None if i % 2 else f"k{i}".encode() for i in range(n)],
            "value": [v for v, _ in records],
        },
        schema=SOURCE_SCHEMA,
    )


@pytest.fixture(scope="module")
def parsed() -> list[dict[str, Any]]:
    out = list(parse_batches(iter([source_batch(RECORDS)])))
    assert len(out) == 1
    return out[0].to_pylist()


def test_output_schema_matches_parsed_schema() -> None:
    (batch,) = parse_batches(iter([source_batch(RECORDS)]))
    ddl_names = [c.strip().split(" ")[0] for c in PARSED_SCHEMA.split(",")]
    assert batch.schema.names == ddl_names
    assert {f.name: f.type for f in batch.schema} == EXPECTED_TYPES
    assert batch.num_rows == len(RECORDS)  # nothing dropped, nothing added


def test_positions_and_kafka_time(parsed: list[dict[str, Any]]) -> None:
    assert [r["partition"] for r in parsed] == [2] * len(RECORDS)
    assert [r["offset"] for r in parsed] == list(range(100, 100 + len(RECORDS)))
    # Kafka timestamps arrive in µs and leave as epoch ms; null stays null
    assert [r["kafka_ms"] for r in parsed] == [ts for _, ts in RECORDS]


def test_kinds(parsed: list[dict[str, Any]]) -> None:
    kinds = [r["kind"] for r in parsed]
    assert kinds[:4] == [RecordKind.EVENT] * 4
    assert kinds[4:6] == [RecordKind.HEARTBEAT] * 2
    assert kinds[6:] == [RecordKind.DEAD] * (len(RECORDS) - 6)
    # and each agrees with the contract's own verdict
    for (value, _), row in zip(RECORDS, parsed, strict=True):
        got = parse_record(value)
        assert row["kind"] == {"Event": RecordKind.EVENT, "Heartbeat": RecordKind.HEARTBEAT}.get(
            type(got).__name__, RecordKind.DEAD
        )


def test_event_fields(parsed: list[dict[str, Any]]) -> None:
    e1, e2, e3, e4 = parsed[:4]
    assert (e1["event_id"], e1["service"], e1["user_id"]) == ("e1", "api", "u1")
    assert (e1["event_ms"], e1["latency_ms"]) == (T + 1, 12.5)
    assert (e1["status"], e1["sent_ms"]) == (200, T + 5)
    # ISO times: floored to the ms, zones honoured
    assert e2["event_ms"] == iso_ms(ISO_UTC) == iso_ms("2026-11-22T10:00:09.999+00:00")
    assert [e2[c] for c in ("user_id", "latency_ms", "status", "sent_ms")] == [None] * 4
    assert e3["event_ms"] == iso_ms("2026-11-22T10:00:10+00:00") == e3["sent_ms"]
    assert (e3["status"], e3["latency_ms"]) == (-(2**31), 0.0)
    assert e4["status"] == 2**31 - 1
    for r in parsed[:4]:
        assert r["reason"] is None and r["detail"] is None
        assert r["raw"] is None and r["raw_size"] is None


def test_heartbeat_fields(parsed: list[dict[str, Any]]) -> None:
    h1, h2 = parsed[4:6]
    assert h1["event_ms"] == T + 7
    assert h2["event_ms"] == iso_ms(ISO_UTC)
    for h in (h1, h2):
        assert h["service"] is None and h["event_id"] is None and h["reason"] is None
        assert h["raw"] is None


def test_event_time_is_event_ms_in_microseconds(parsed: list[dict[str, Any]]) -> None:
    (batch,) = parse_batches(iter([source_batch(RECORDS)]))
    micros = batch.column("event_time").cast(pa.int64()).to_pylist()
    for us, row in zip(micros, parsed, strict=True):
        if row["kind"] == RecordKind.DEAD:
            assert us is None and row["event_ms"] is None
        else:
            assert us == row["event_ms"] * 1000
            assert row["event_time"] == EPOCH + timedelta(milliseconds=row["event_ms"])


def test_every_reason_is_reported(parsed: list[dict[str, Any]]) -> None:
    dead = [r for r in parsed if r["kind"] == RecordKind.DEAD]
    assert {r["reason"] for r in dead} == {reason.value for reason in Reason}
    assert [r["reason"] for r in dead] == [
        "empty",
        "empty",
        "invalid_utf8",
        "invalid_json",
        "not_an_object",
        "missing_field",
        "wrong_type",
        "invalid_time",
        "invalid_value",
        "too_long",
        "too_large",
        "invalid_json",
        "invalid_json",
        "invalid_json",
    ]
    for r in dead:
        assert r["detail"], "every dead letter says why"
        assert r["event_ms"] is None and r["event_time"] is None and r["service"] is None


def test_dead_letter_raw_is_capped_and_size_is_full(parsed: list[dict[str, Any]]) -> None:
    pairs = zip(RECORDS, parsed, strict=True)
    dead = [(value, r) for (value, _), r in pairs if r["kind"] == RecordKind.DEAD]
    for value, r in dead:
        body = value or b""
        assert r["raw_size"] == len(body)
        assert r["raw"] == body[:DEAD_LETTER_RAW_CAP]
        assert len(r["raw"]) <= DEAD_LETTER_RAW_CAP
    big = parsed[-3]
    assert big["raw_size"] == DEAD_LETTER_RAW_CAP * 3 + 7
    assert big["raw"] == b"x" * DEAD_LETTER_RAW_CAP
    assert (parsed[-2]["raw_size"], len(parsed[-2]["raw"])) == (DEAD_LETTER_RAW_CAP,) * 2
    assert (parsed[-1]["raw_size"], len(parsed[-1]["raw"])) == (
        DEAD_LETTER_RAW_CAP + 1,
        DEAD_LETTER_RAW_CAP,
    )
    # a tombstone (null value) is stored as empty bytes, not null
    assert parsed[7]["raw"] == b"" and parsed[7]["raw_size"] == 0


def test_several_batches_in_order_and_empty_batches_skipped() -> None:
    events = [
        (js({"event_id": f"e{i}", "event_time": T + i, "service": "api"}), T) for i in range(3)
    ]
    batches = [
        source_batch(events, partition=0, first_offset=0),
        source_batch([], partition=0),
        source_batch(events[:1], partition=1, first_offset=50),
    ]
    out = list(parse_batches(iter(batches)))
    assert [b.num_rows for b in out] == [3, 1]
    assert out[0].column("offset").to_pylist() == [0, 1, 2]
    assert out[0].column("event_ms").to_pylist() == [T, T + 1, T + 2]
    assert out[1].column("partition").to_pylist() == [1]
    assert list(parse_batches(iter([]))) == []


def test_all_null_timestamps() -> None:
    (batch,) = parse_batches(iter([source_batch([(b"{}", None), (b"", None)])]))
    assert batch.column("kafka_ms").to_pylist() == [None, None]
    assert batch.column("kind").to_pylist() == [RecordKind.DEAD, RecordKind.DEAD]


# --- device clock correction: `clock_offsets`, `make_parser` with it on --------------------------
#
# An event carries its device's send time; the broker stamps its receive time. `receive - sent`
# is the device's offset plus the network delay, so a device's offset is estimated as the low
# median of its events' offsets in the batch (robust to a few slow deliveries), and every device
# time of the event (event time, send time) moves by it onto the broker's clock:
#
#     device clock (2 s behind):   sent 10:00:00.000  --->  broker receives 10:00:02.050
#     own offset = +2050 ms; the device's median over its events = +2000 ms
#     corrected event time = device event time + 2000 ms


def event(eid: str, event_time: int, user: str | None = None, sent: int | None = None) -> bytes:
    obj: dict[str, Any] = {"event_id": eid, "event_time": event_time, "service": "api"}
    if user is not None:
        obj["user_id"] = user
    if sent is not None:
        obj["sent_time"] = sent
    return js(obj)


def skew_batch(
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
SKEW_RECORDS: list[tuple[bytes | None, int | None]] = [
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
    out = list(make_parser(correct)(iter([skew_batch(records)])))
    assert len(out) == 1
    return out[0].to_pylist()


def test_without_correction_it_is_the_plain_parser() -> None:
    assert make_parser(False) is parse_batches
    assert make_parser() is parse_batches
    rows = parse(SKEW_RECORDS, correct=False)
    assert [r["clock_offset_ms"] for r in rows] == [None] * len(SKEW_RECORDS)
    e1 = rows[0]
    assert (e1["event_ms"], e1["sent_ms"]) == (T - 2000 + 1, T - 2000)


def test_correction_moves_event_and_sent_time_by_the_devices_offset() -> None:
    plain = parse(SKEW_RECORDS, correct=False)
    fixed = parse(SKEW_RECORDS, correct=True)
    assert len(fixed) == len(plain) == len(SKEW_RECORDS)
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
    plain = parse(SKEW_RECORDS, correct=False)
    fixed = parse(SKEW_RECORDS, correct=True)
    kinds = [r["kind"] for r in fixed]
    assert kinds.count(RecordKind.HEARTBEAT) == 1 and kinds.count(RecordKind.DEAD) == 1
    for before, after in zip(plain, fixed, strict=True):
        if before["kind"] in (RecordKind.HEARTBEAT, RecordKind.DEAD):
            assert after == before
            assert after["clock_offset_ms"] is None


def test_correction_keeps_the_schema() -> None:
    (plain,) = parse_batches(iter([skew_batch(SKEW_RECORDS)]))
    (fixed,) = make_parser(True)(iter([skew_batch(SKEW_RECORDS)]))
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
            iter([skew_batch(first), skew_batch([]), skew_batch(second, first_offset=2)])
        )
    )
    assert [b.num_rows for b in out] == [2, 1]  # empty batches are skipped
    assert out[0].column("clock_offset_ms").to_pylist() == [100, 100]
    assert out[1].column("clock_offset_ms").to_pylist() == [7000]
    assert out[1].column("event_ms").to_pylist() == [T + 2 * S + 7000]
    # and a batch parsed alone gives the same rows
    (alone,) = make_parser(True)(iter([skew_batch(second, first_offset=2)]))
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


# --- whatever comes in, the job's parser gives every record exactly one row ---------------------

any_record = st.one_of(
    st.none(),
    st.binary(max_size=300),
    events().map(dumps),
    json_values.map(lambda v: json.dumps(v).encode()),
    events().map(lambda o: dumps(o)[: len(dumps(o)) // 2]),
    st.integers(DEAD_LETTER_RAW_CAP - 2, DEAD_LETTER_RAW_CAP + 2).map(lambda n: b"x" * n),
    st.just(b"{" + b" " * MAX_RECORD_BYTES + b"}"),
)


@FUZZ
@given(st.lists(st.tuples(any_record, st.none() | st.binary(max_size=8)), max_size=40))
def test_every_record_becomes_exactly_one_row(records: list[tuple[bytes | None, bytes | None]]):
    n = len(records)
    assume(n > 0)
    batch = pa.RecordBatch.from_pydict(
        {
            "partition": [0] * n,
            "offset": list(range(n)),
            "timestamp": [T * 1000] * n,
            "key": [k for _, k in records],
            "value": [v for v, _ in records],
        },
        schema=ARROW_SCHEMA,
    )
    rows = pa.Table.from_batches(list(parse_batches(iter([batch])))).to_pylist()
    assert [r["offset"] for r in rows] == list(range(n))
    for (value, _), row in zip(records, rows, strict=True):
        got = parse_record(value)
        expected_kind = {
            Event: RecordKind.EVENT,
            Heartbeat: RecordKind.HEARTBEAT,
            Rejected: RecordKind.DEAD,
        }
        assert row["kind"] == expected_kind[type(got)]
        if isinstance(got, Rejected):
            assert row["reason"] == got.reason.value
            assert row["raw"] == (value or b"")[:DEAD_LETTER_RAW_CAP]
            assert row["raw_size"] == len(value or b"")
        elif isinstance(got, Event):
            assert (row["event_id"], row["service"], row["event_ms"]) == (
                got.event_id,
                got.service,
                got.event_time,
            )


# --- JSON access logs through a field map (tidegauge/core/field_map.py) -----------------------


def test_access_log_lines_become_rows_and_their_dead_letters_keep_the_line() -> None:
    """Every line one row; an event's values are the map's, a dead letter keeps its own bytes."""
    fmt = RecordFormat.parse(
        "access-log",
        ["event_time=msec:s", "service=host", "latency_ms=request_time:s", "status=status"],
    )
    lines: list[tuple[bytes | None, int | None]] = [
        (js({"msec": 1_764_201_600.5, "host": "api", "request_time": 0.012, "status": 200}), T),
        (js({"msec": 1_764_201_601.25, "host": "web", "request_time": "-", "status": 200}), T),
        (b"127.0.0.1 - - [27/Nov/2025] GET /", T),
        (None, T),
        (js({"msec": "1764201602", "host": "api", "status": "503"}), T),
    ]
    (out,) = make_parser(record_format=fmt.to_json())(iter([source_batch(lines, 3, 40)]))
    rows = out.to_pylist()
    assert [r["kind"] for r in rows] == ["event", "dead", "dead", "dead", "event"]
    assert [r["offset"] for r in rows] == [40, 41, 42, 43, 44]
    first, last = rows[0], rows[4]
    assert (first["event_id"], first["service"], first["event_ms"]) == (
        "3/40",
        "api",
        1_764_201_600_500,
    )
    assert (first["latency_ms"], first["status"]) == (12.0, 200)
    assert (last["event_id"], last["event_ms"], last["status"]) == ("3/44", 1_764_201_602_000, 503)
    assert last["latency_ms"] is None
    bad = rows[1]
    assert bad["reason"] == "wrong_type" and "log field 'request_time'" in bad["detail"]
    assert bad["raw"] == lines[1][0] and bad["raw_size"] == len(lines[1][0] or b"")
    assert rows[2]["reason"] == "invalid_json" and rows[2]["raw"] == lines[2][0]
    assert rows[3]["reason"] == "empty"
    # the same lines through the contract's own parser are all dead letters: the map is used
    plain = list(parse_batches(iter([source_batch(lines, 3, 40)])))[0].to_pylist()
    assert {r["kind"] for r in plain} == {"dead"}
