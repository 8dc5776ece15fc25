"""Raw source batches -> parsed rows (jobs/parse/parser.py), on hand-built Arrow batches.

The input batches are shaped like the Kafka source's output (partition int32, offset int64,
timestamp timestamp[us, UTC], key binary, value binary); every record must come out as exactly
one row whose `kind` says what it is.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from jobs.parse.parser import PARSED_SCHEMA, RecordKind, parse_batches
from tidegauge.core.events import DEAD_LETTER_RAW_CAP, MAX_RECORD_BYTES, Reason, parse_record

T = 1_795_341_600_000  # epoch ms, inside the contract's 2000..2100 range
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
