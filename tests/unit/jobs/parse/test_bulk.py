"""The parser's Arrow path (jobs/parse/bulk.py) gives exactly the rows of record-by-record judging.

The reference is `parse_values` on each record alone (the contract's own judge); the parser
under test takes whole chunks, vouches for the ordinary records with Arrow's JSON decoder and
leaves the rest to `parse_values`. Every column of every row must be equal, float signs
included, on generator traffic with every malformed kind, on mutations of it that put the tokens
decoders disagree on into every field, and with registered fields of every type.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from jobs.parse.bulk import vouch
from jobs.parse.parser import BULK_FROM, RecordKind, _parse_batch, parsed_schema
from jobs.source.kafka_source import ARROW_SCHEMA as SOURCE_SCHEMA
from tests.mutations import FIELDS, TOKENS, mutations
from tidegauge.core.events import (
    BUILT_IN_FIELDS,
    DEAD_LETTER_RAW_CAP,
    EventField,
    Heartbeat,
    event_fields,
    parse_values,
    register_field,
    unregister_field,
)
from tidegauge.traffic.config import GeneratorConfig
from tidegauge.traffic.generator import generate

pytestmark = pytest.mark.unit

T = 1_780_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def source_batch(values: Sequence[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "partition": [3] * n,
            "offset": list(range(n)),
            "timestamp": [(T + i) * 1000 if i % 5 else None for i in range(n)],
            "key": [None] * n,
            "value": list(values),
        },
        schema=SOURCE_SCHEMA,
    )


def expected_row(value: bytes | None, fields: Sequence[EventField]) -> dict[str, Any]:
    """The row of one record judged alone."""
    row: dict[str, Any] = {f.column: None for f in fields}
    row.update(kind=None, reason=None, detail=None, raw=None, raw_size=None)
    got = parse_values(value)
    if isinstance(got, list):
        row["kind"] = RecordKind.EVENT.value
        row.update({f.column: v for f, v in zip(fields, got, strict=True)})
    elif isinstance(got, Heartbeat):
        row["kind"], row["event_ms"] = RecordKind.HEARTBEAT.value, got.event_time
    else:
        body = value or b""
        row.update(kind=RecordKind.DEAD.value, reason=got.reason.value, detail=got.detail)
        row.update(raw=body[:DEAD_LETTER_RAW_CAP], raw_size=len(body))
    return row


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and a == b


def check_chunks(values: list[bytes | None], sizes: Sequence[int], bulk_from: int = 1) -> None:
    fields = event_fields()
    _, schema = parsed_schema(fields)
    at = 0
    for size in sizes:
        chunk = values[at : at + size]
        at += size
        if not chunk:
            continue
        batch = source_batch(chunk)
        rows = _parse_batch(batch, schema=schema, fields=fields, bulk_from=bulk_from).to_pylist()
        for i, (value, row) in enumerate(zip(chunk, rows, strict=True)):
            want = expected_row(value, fields)
            for name, v in want.items():
                assert same(row[name], v), (value, name, row[name], v)
            ms = row["event_ms"]
            assert row["event_time"] == (None if ms is None else EPOCH + timedelta(milliseconds=ms))
            assert row["offset"] == i


def traffic(seed: int, count: int, malformed: float) -> list[bytes | None]:
    cfg = GeneratorConfig(
        seed=seed,
        rate=500.0,
        count=count,
        pace="fast",
        start_time_ms=T,
        malformed_fraction=malformed,
        heartbeat_interval_ms=500,
    )
    return [r.value for r in generate(cfg)]


def test_generator_traffic_with_every_malformed_kind() -> None:
    values = traffic(4, 3_000, 0.2)
    check_chunks(values, [1, 7, 100, 1_000, 2_000])


def test_mutated_records_and_every_token_in_every_field() -> None:
    rng = random.Random(21)
    values: list[bytes | None] = []
    for value in traffic(5, 1_500, 0.1):
        values += mutations(rng, value or b"")
    base = b'{"event_id":"e","event_time":1780000000000,"service":"s"'
    values += [base + b',"' + f + b'":' + t + b"}" for f in FIELDS for t in TOKENS]
    values += [b'{"' + f + b'":' + t + b"}" for f in FIELDS for t in TOKENS]
    values += [None, b"", b" ", b"{", b"}"]
    rng.shuffle(values)
    assert len(values) > 10_000
    # alone (a record whose decode fails takes the whole chunk to the Python judge) ...
    alone = rng.sample(values, 3_000)
    check_chunks(alone, [1] * len(alone))
    vouched = sum(int(vouch(pa.array([v], pa.binary()), event_fields()).ok[0]) for v in alone)
    assert vouched > len(alone) // 6  # the comparison reached the Arrow path
    # ... and in chunks, where failing decodes are split around
    check_chunks(values, [3_000, 500, 64, 33, 5, 10_000])


def test_registered_fields_of_every_type() -> None:
    added = [
        EventField("region", "string", max_length=8, reserved=("none",)),
        EventField("finished_at", "time"),
        EventField("cpu_ms", "float", minimum=0.0),
        EventField("bytes_out", "int"),
    ]
    for f in added:
        register_field(f)
    try:
        rng = random.Random(3)
        base = b'{"event_id":"e%d","event_time":1780000000000,"service":"s"'
        values: list[bytes | None] = []
        for i in range(2_000):
            extra = {
                b"region": rng.choice([b'"eu"', b'"us-east-1x"', b'"none"', b"null", b"7", b'""']),
                b"finished_at": rng.choice([b"1780000000001", b"17", b'"2026-01-01T00:00Z"']),
                b"cpu_ms": rng.choice([b"0", b"-0", b"-0.0", b"1.5", b"-1", b"true", b"1e309"]),
                b"bytes_out": rng.choice([b"12", b"2147483648", b"-2147483648", b"1.0", b"null"]),
            }
            body = b"".join(b',"' + k + b'":' + v for k, v in extra.items() if rng.random() < 0.7)
            values.append(base % i + body + b"}")
        check_chunks(values, [1_000, 1_000])
    finally:
        for f in added:
            unregister_field(f.name)


def test_chunks_full_of_records_whose_decode_fails() -> None:
    # every other record fails Arrow's decode (a duplicate key, 1e400, 200.0): the good ones
    # still come out right, and so do the failing ones, judged in Python
    good = traffic(9, 1_200, 0.0)
    base = b'{"event_id":"x","event_time":1780000000000,"service":"a"'
    failing = [base + b',"service":"b"}', base + b',"latency_ms":1e400}', base + b',"status":2e0}']
    values: list[bytes | None] = []
    for i, v in enumerate(good):
        values += [v, failing[i % 3]]
    check_chunks(values, [len(values), 1_000, 100])


def test_small_chunks_are_judged_one_by_one() -> None:
    # below BULK_FROM records the Arrow path would cost more than it saves: same rows anyway
    values = traffic(8, 600, 0.1)
    check_chunks(values, [1, 2, BULK_FROM - 1, BULK_FROM], bulk_from=BULK_FROM)
    batch = source_batch(values[: BULK_FROM - 1])
    assert _parse_batch(batch).equals(_parse_batch(batch, bulk_from=1))


def test_ordinary_records_take_the_fast_path() -> None:
    # the point of the Arrow path: events as producers write them are never judged in Python,
    # even when the chunk holds records whose decode fails (they are split out)
    good = [v for v in traffic(6, 2_000, 0.0) if v and b"heartbeat" not in v]
    bad = b'{"event_id":"x","event_time":1780000000000,"service":"a","service":"b"}'
    chunk: list[bytes | None] = list(good)
    for at in (5, 700, 701, 1_500):
        chunk.insert(at, bad)
    got = vouch(pa.array(chunk, pa.binary()), BUILT_IN_FIELDS)
    assert int(got.ok.sum()) == len(good)  # the failing four are found exactly
    assert not any(got.ok[at] for at in (5, 700, 701, 1_500))
    check_chunks(chunk, [len(chunk)])


def test_brackets_inside_strings_stay_on_the_fast_path_and_nested_values_do_not() -> None:
    """A route template such as "/items/{id}" is a string, not a nested value: such records are
    decoded by Arrow like any other; a nested value anywhere still goes to the judge."""
    base = b'{"event_id":"e%d","event_time":1780000000000,"service":"api","user_id":"%s"}'
    strings = [base % (i, s) for i, s in enumerate([b"/items/{id}", b"[a]{b}", b"x{", b"}{"])]
    nested = [
        b'{"event_id":"n1","event_time":1780000000000,"service":"api","extra":{"a":1}}',
        b'{"event_id":"n2","event_time":1780000000000,"service":"api","extra": [1,[2]]}',
        b'{"event_id":"n3","event_time":1780000000000,"service":"api","u":"a:{b"}',
    ]
    got = vouch(pa.array(strings + nested, pa.binary()), BUILT_IN_FIELDS)
    assert got.ok.tolist() == [True] * 4 + [False] * 3  # the last: a ":{" in a string, judged
    check_chunks(strings + nested, [len(strings) + len(nested)])


def _iso(ms: int) -> bytes:
    at = EPOCH + timedelta(milliseconds=ms)
    return b'"' + at.isoformat(timespec="milliseconds").replace("+00:00", "Z").encode() + b'"'


#: ISO-8601 times the fast path must leave to Python (dates that do not exist, other spellings,
#: out of range) or take exactly as Python reads them (leap days, the range's ends).
ISO_CORNERS = [
    b'"2024-02-29T00:00:00.000Z"',
    b'"2000-02-29T12:00:00.000Z"',
    b'"2023-02-29T00:00:00.000Z"',
    b'"2100-02-29T00:00:00.000Z"',
    b'"2026-13-01T00:00:00.000Z"',
    b'"2026-00-10T00:00:00.000Z"',
    b'"2026-04-31T00:00:00.000Z"',
    b'"2026-04-00T00:00:00.000Z"',
    b'"2026-04-30T24:00:00.000Z"',
    b'"2026-04-30T23:60:00.000Z"',
    b'"2026-04-30T23:59:60.000Z"',
    b'"1999-12-31T23:59:59.999Z"',
    b'"2000-01-01T00:00:00.000Z"',
    b'"2099-12-31T23:59:59.999Z"',
    b'"0000-01-01T00:00:00.000Z"',
    b'"2026-05-28T20:26:40.02Z"',
    b'"2026-05-28T20:26:40.020+00:00"',
    b'"2026-05-28T20:26:40.020+02:00"',
    b'"2026-05-28T20:26:40.020z"',
    b'"2026-05-28 20:26:40.020Z"',
    b'"2026-05-28T20:26:40.020123Z"',
    b'"2026-05-28T20:26:40Z"',
    b'"2026-05-28T20:26:40.020"',
    b'"2026-05-28T20:26:40.020Z "',
    b"1780000000000",
    b"null",
]


def test_iso_times_in_the_common_spelling_take_the_fast_path_and_agree() -> None:
    rng = random.Random(17)
    common = [_iso(T + rng.randrange(-(10**11), 10**11)) for _ in range(300)]
    values: list[bytes | None] = []
    for i, t in enumerate(common):
        values.append(b'{"event_id":"e%d","event_time":%s,"service":"s"}' % (i, t))
    fast = len(values)
    for t in [*common[:20], *ISO_CORNERS]:
        for sent in [None, *ISO_CORNERS, common[0]]:
            body = b'{"event_id":"x","event_time":%s,"service":"s"' % t
            values.append(body + (b"" if sent is None else b',"sent_time":' + sent) + b"}")
    got = vouch(pa.array(values, pa.binary()), BUILT_IN_FIELDS)
    assert got.ok[:fast].all()  # what producers write never waits for Python
    assert not got.ok[fast:].all()  # and the rest did reach the judge
    rng.shuffle(values)
    check_chunks(values, [len(values), 500, 33, 1])
