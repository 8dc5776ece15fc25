"""The event contract (tidegauge/core/events.py), table by table, then by hypothesis.

Each table row is one Kafka record value and what the contract makes of it. The tables are the
executable version of docs/events.md; a row that changes is a contract change. At the end,
hypothesis draws every kind of bad input.
"""

from __future__ import annotations

import calendar
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from tests.unit.fixtures import FUZZ, dumps, events, json_scalars, json_values, times
from tidegauge.core.events import (
    BUILT_IN_FIELDS,
    DEAD_LETTER_RAW_CAP,
    MAX_NESTING,
    MAX_RECORD_BYTES,
    MAX_TIME_MS,
    MIN_TIME_MS,
    ContractError,
    Event,
    Heartbeat,
    Reason,
    Rejected,
    encode_event,
    encode_heartbeat,
    parse_record,
    parse_time,
)

DOCS = Path(__file__).resolve().parents[4] / "docs" / "events.md"

# 2026-11-22T10:00:00Z, computed without datetime.fromisoformat (which the module uses).
T = calendar.timegm((2026, 11, 22, 10, 0, 0)) * 1000
assert T == 1_795_341_600_000


def rec(**fields: object) -> bytes:
    """A record value holding exactly these JSON fields."""
    return json.dumps(fields).encode()


def ev(**fields: object) -> bytes:
    """A valid minimal event record, with `fields` added or replaced."""
    base: dict[str, object] = {"event_id": "e1", "event_time": T, "service": "checkout"}
    base.update(fields)
    return json.dumps(base).encode()


def without(field: str) -> bytes:
    base = {"event_id": "e1", "event_time": T, "service": "checkout"}
    del base[field]
    return json.dumps(base).encode()


def E(**fields: object) -> Event:  # noqa: N802 - reads like a constructor in the tables
    base: dict[str, object] = {"event_id": "e1", "event_time": T, "service": "checkout"}
    base.update(fields)
    return Event(**base)  # type: ignore[arg-type]


# --- valid records --------------------------------------------------------------------------

VALID: list[tuple[str, bytes, Event | Heartbeat]] = [
    ("minimal epoch ms", ev(), E()),
    (
        "every field",
        ev(user_id="u7", latency_ms=12.5, status=200, sent_time=T + 40),
        E(user_id="u7", latency_ms=12.5, status=200, sent_time=T + 40),
    ),
    ("ISO with Z", ev(event_time="2026-11-22T10:00:00Z"), E()),
    ("ISO +00:00", ev(event_time="2026-11-22T10:00:00+00:00"), E()),
    # 12:00 at +02:00 is 10:00 UTC: the offset is subtracted, not ignored.
    ("ISO +02:00 is converted to UTC", ev(event_time="2026-11-22T12:00:00+02:00"), E()),
    ("ISO -05:30 is converted to UTC", ev(event_time="2026-11-22T04:30:00-05:30"), E()),
    ("ISO with milliseconds", ev(event_time="2026-11-22T10:00:00.123Z"), E(event_time=T + 123)),
    ("ISO with space separator", ev(event_time="2026-11-22 10:00:00Z"), E()),
    ("integral float time", ev(event_time=float(T)), E()),
    (
        "integral float written with .0",
        b'{"event_id":"e1","event_time":1795341600000.0,"service":"checkout"}',
        E(),
    ),
    (
        "exponent float time",
        b'{"event_id":"e1","event_time":1.7953416e12,"service":"checkout"}',
        E(),
    ),
    ("first valid ms (2000-01-01)", ev(event_time=MIN_TIME_MS), E(event_time=MIN_TIME_MS)),
    ("last valid ms (2099-12-31)", ev(event_time=MAX_TIME_MS - 1), E(event_time=MAX_TIME_MS - 1)),
    ("ISO sent_time", ev(sent_time="2026-11-22T10:00:01Z"), E(sent_time=T + 1000)),
    ("unknown fields ignored", ev(region="eu", nested={"a": [1, 2]}), E()),
    ("nulls mean absent", ev(user_id=None, latency_ms=None, status=None, sent_time=None), E()),
    ("integer latency becomes float", ev(latency_ms=12), E(latency_ms=12.0)),
    ("zero latency", ev(latency_ms=0), E(latency_ms=0.0)),
    ("any integer status", ev(status=599), E(status=599)),
    ("largest int32 status", ev(status=2**31 - 1), E(status=2**31 - 1)),
    ("empty user_id is kept (optional)", ev(user_id=""), E(user_id="")),
    ("non-ASCII text", ev(service="café-☕", event_id="ü"), E(service="café-☕", event_id="ü")),
    ("heartbeat false is an event", ev(heartbeat=False), E()),
    ("whitespace around JSON", b"  \n" + ev() + b"\n", E()),
    # Heartbeats: the generator's per-partition promise; never counted as events.
    (
        "heartbeat",
        rec(heartbeat=True, event_time=T, partition=2, source="gen-1"),
        Heartbeat(T, 2, "gen-1"),
    ),
    ("heartbeat minimal", rec(heartbeat=True, event_time=T), Heartbeat(T)),
    ("heartbeat ISO time", rec(heartbeat=True, event_time="2026-11-22T10:00:00Z"), Heartbeat(T)),
    (
        "heartbeat non-string source dropped",
        rec(heartbeat=True, event_time=T, source=3),
        Heartbeat(T),
    ),
    (
        "heartbeat ignores event fields",
        rec(heartbeat=True, event_time=T, event_id="x", service="s", partition=0),
        Heartbeat(T, 0),
    ),
]


@pytest.mark.parametrize(("value", "expected"), [r[1:] for r in VALID], ids=[r[0] for r in VALID])
def test_valid_records(value: bytes, expected: Event | Heartbeat) -> None:
    got = parse_record(value)
    assert got == expected
    assert type(got) is type(expected)
    assert isinstance(got.event_time, int)


def test_float_latency_type() -> None:
    got = parse_record(ev(latency_ms=12))
    assert isinstance(got, Event) and type(got.latency_ms) is float


# --- invalid records ------------------------------------------------------------------------

INVALID: list[tuple[str, bytes | None, Reason]] = [
    ("None", None, Reason.EMPTY),
    ("no bytes", b"", Reason.EMPTY),
    ("not UTF-8", b'{"event_id":"\xff"}', Reason.INVALID_UTF8),
    ("Latin-1 bytes", '{"service":"caf\xe9"}'.encode("latin-1"), Reason.INVALID_UTF8),
    ("truncated JSON", ev()[:-1], Reason.INVALID_JSON),
    ("plain text", b"hello", Reason.INVALID_JSON),
    ("only whitespace", b"   ", Reason.INVALID_JSON),
    ("UTF-8 BOM", b"\xef\xbb\xbf" + ev(), Reason.INVALID_JSON),
    ("nested too deeply", b"[" * 60_000, Reason.INVALID_JSON),
    (
        "nested too deeply inside an event",
        ev(extra=[]).replace(b"[]", b"[" * 5_000 + b"]" * 5_000),
        Reason.INVALID_JSON,
    ),
    ("JSON array", b"[1,2]", Reason.NOT_AN_OBJECT),
    ("JSON number", b"17", Reason.NOT_AN_OBJECT),
    ("JSON string", b'"event"', Reason.NOT_AN_OBJECT),
    ("JSON null", b"null", Reason.NOT_AN_OBJECT),
    ("missing event_id", without("event_id"), Reason.MISSING_FIELD),
    ("missing event_time", without("event_time"), Reason.MISSING_FIELD),
    ("missing service", without("service"), Reason.MISSING_FIELD),
    ("null event_id", ev(event_id=None), Reason.MISSING_FIELD),
    ("null event_time", ev(event_time=None), Reason.MISSING_FIELD),
    ("null service", ev(service=None), Reason.MISSING_FIELD),
    ("empty object", b"{}", Reason.MISSING_FIELD),
    # heartbeat must be the JSON literal true; 1 is not, so the record is judged as an event.
    ("heartbeat 1 is not true", rec(heartbeat=1, event_time=T), Reason.MISSING_FIELD),
    ("numeric event_id", ev(event_id=5), Reason.WRONG_TYPE),
    ("list service", ev(service=["a"]), Reason.WRONG_TYPE),
    ("numeric user_id", ev(user_id=7), Reason.WRONG_TYPE),
    ("boolean event_time true", ev(event_time=True), Reason.WRONG_TYPE),
    ("boolean event_time false", ev(event_time=False), Reason.WRONG_TYPE),
    ("object event_time", ev(event_time={"ms": T}), Reason.WRONG_TYPE),
    ("boolean sent_time", ev(sent_time=True), Reason.WRONG_TYPE),
    ("string latency", ev(latency_ms="12"), Reason.WRONG_TYPE),
    ("boolean latency", ev(latency_ms=True), Reason.WRONG_TYPE),
    ("string status", ev(status="200"), Reason.WRONG_TYPE),
    ("boolean status", ev(status=True), Reason.WRONG_TYPE),
    ("float status", ev(status=200.0), Reason.WRONG_TYPE),
    ("empty event_id", ev(event_id=""), Reason.INVALID_VALUE),
    ("empty service", ev(service=""), Reason.INVALID_VALUE),
    ("negative latency", ev(latency_ms=-0.5), Reason.INVALID_VALUE),
    ("65,537 bytes", b"{" + b" " * 65_535 + b"}", Reason.TOO_LARGE),
    ("a megabyte event", ev(padding="p" * 1_000_000), Reason.TOO_LARGE),
    ("service of 129 characters", ev(service="s" * 129), Reason.TOO_LONG),
    ("event_id of 257 characters", ev(event_id="e" * 257), Reason.TOO_LONG),
    ("user_id of 257 characters", ev(user_id="u" * 257), Reason.TOO_LONG),
    (
        "NaN latency",
        b'{"event_id":"e1","event_time":1795341600000,"service":"s","latency_ms":NaN}',
        Reason.INVALID_VALUE,
    ),
    (
        "infinite latency",
        b'{"event_id":"e1","event_time":1795341600000,"service":"s","latency_ms":Infinity}',
        Reason.INVALID_VALUE,
    ),
    # Seconds where milliseconds were meant land in January 1970: outside 2000..2100.
    ("seconds instead of ms", ev(event_time=T // 1000), Reason.INVALID_TIME),
    ("microseconds instead of ms", ev(event_time=T * 1000), Reason.INVALID_TIME),
    ("one ms before 2000", ev(event_time=MIN_TIME_MS - 1), Reason.INVALID_TIME),
    ("first ms of 2100", ev(event_time=MAX_TIME_MS), Reason.INVALID_TIME),
    ("negative time", ev(event_time=-1), Reason.INVALID_TIME),
    ("fractional ms", ev(event_time=T + 0.5), Reason.INVALID_TIME),
    ("NaN time", b'{"event_id":"e1","event_time":NaN,"service":"s"}', Reason.INVALID_TIME),
    (
        "infinite time",
        b'{"event_id":"e1","event_time":-Infinity,"service":"s"}',
        Reason.INVALID_TIME,
    ),
    ("ISO without zone", ev(event_time="2026-11-22T10:00:00"), Reason.INVALID_TIME),
    ("ISO date only", ev(event_time="2026-11-22"), Reason.INVALID_TIME),
    ("not a time", ev(event_time="yesterday"), Reason.INVALID_TIME),
    ("numeric string", ev(event_time=str(T)), Reason.INVALID_TIME),
    ("ISO before 2000", ev(event_time="1999-12-31T23:59:59.999Z"), Reason.INVALID_TIME),
    # Local 2000-01-01T00:30 at +01:00 is 1999-12-31T23:30Z: the range applies in UTC.
    (
        "ISO 2000 local but 1999 UTC",
        ev(event_time="2000-01-01T00:30:00+01:00"),
        Reason.INVALID_TIME,
    ),
    ("ISO 2100", ev(event_time="2100-01-01T00:00:00Z"), Reason.INVALID_TIME),
    ("bad sent_time", ev(sent_time="2026-11-22T10:00:00"), Reason.INVALID_TIME),
    ("sent_time in seconds", ev(sent_time=T // 1000), Reason.INVALID_TIME),
    ("heartbeat without time", rec(heartbeat=True, partition=0), Reason.MISSING_FIELD),
    ("heartbeat null time", rec(heartbeat=True, event_time=None), Reason.MISSING_FIELD),
    ("heartbeat boolean time", rec(heartbeat=True, event_time=True), Reason.WRONG_TYPE),
    (
        "heartbeat string partition",
        rec(heartbeat=True, event_time=T, partition="1"),
        Reason.WRONG_TYPE,
    ),
    (
        "heartbeat boolean partition",
        rec(heartbeat=True, event_time=T, partition=True),
        Reason.WRONG_TYPE,
    ),
    (
        "heartbeat float partition",
        rec(heartbeat=True, event_time=T, partition=1.0),
        Reason.WRONG_TYPE,
    ),
    ("heartbeat seconds", rec(heartbeat=True, event_time=T // 1000), Reason.INVALID_TIME),
    (
        "heartbeat no zone",
        rec(heartbeat=True, event_time="2026-11-22T10:00:00"),
        Reason.INVALID_TIME,
    ),
]


@pytest.mark.parametrize(("value", "reason"), [r[1:] for r in INVALID], ids=[r[0] for r in INVALID])
def test_invalid_records(value: bytes | None, reason: Reason) -> None:
    got = parse_record(value)
    assert isinstance(got, Rejected), got
    assert got.reason is reason, got.detail
    assert got.detail


def test_every_reason_has_a_row() -> None:
    assert {r[2] for r in INVALID} == set(Reason)


def test_reason_codes_are_stable() -> None:
    # Dead letters are counted in Redis under these strings; renaming one loses history.
    assert [r.value for r in Reason] == [
        "empty",
        "invalid_utf8",
        "invalid_json",
        "not_an_object",
        "missing_field",
        "wrong_type",
        "invalid_time",
        "invalid_value",
        "too_large",
        "too_long",
    ]


def test_detail_names_the_field_and_bounds_echoed_input() -> None:
    got = parse_record(ev(sent_time="x" * 10_000))
    assert isinstance(got, Rejected) and got.reason is Reason.INVALID_TIME
    assert "sent_time" in got.detail
    assert len(got.detail) < 200


def test_time_range_is_2000_to_2100() -> None:
    assert calendar.timegm((2000, 1, 1, 0, 0, 0)) * 1000 == MIN_TIME_MS
    assert calendar.timegm((2100, 1, 1, 0, 0, 0)) * 1000 == MAX_TIME_MS


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, Reason.WRONG_TYPE),
        (None, Reason.WRONG_TYPE),
        ([T], Reason.WRONG_TYPE),
        (1.5, Reason.INVALID_TIME),
        ("2026-11-22T10:00:00", Reason.INVALID_TIME),
        (0, Reason.INVALID_TIME),
    ],
)
def test_parse_time_raises_contract_error(value: object, reason: Reason) -> None:
    with pytest.raises(ContractError) as info:
        parse_time(value, "sent_time")
    assert info.value.reason is reason
    assert "sent_time" in info.value.detail
    assert isinstance(info.value, ValueError)


# --- never raises ---------------------------------------------------------------------------


def _mangled(seed: int, n: int) -> list[bytes]:
    """Truncations, byte flips and splices of valid records: what a broken producer sends."""
    rng = random.Random(seed)
    seeds = [r[1] for r in VALID] + [r[1] for r in INVALID if r[1]]
    out = []
    for _ in range(n):
        b = bytearray(rng.choice(seeds))
        op = rng.randrange(4)
        if op == 0:
            b = b[: rng.randrange(len(b) + 1)]
        elif op == 1:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2:
            other = rng.choice(seeds)
            b = b[: rng.randrange(len(b) + 1)] + other[rng.randrange(len(other) + 1) :]
        else:
            b = bytearray(rng.randbytes(rng.randrange(64)))
        out.append(bytes(b))
    return out


def test_parse_record_never_raises_on_mangled_records() -> None:
    for value in _mangled(seed=7, n=5_000):
        got = parse_record(value)
        assert isinstance(got, Event | Heartbeat | Rejected)


# The contract says "Never raises": the job calls parse_record on Spark executors, so an
# exception fails the micro-batch, and after a restart the checkpoint replays the same record.
# These rows are records any producer can send; each crashes parse_record today.
NEVER_RAISES: list[tuple[str, bytes]] = [
    # json.loads raises ValueError (not JSONDecodeError) for integers longer than
    # sys.get_int_max_str_digits() (4300 by default).
    ("5000-digit event_time", b'{"event_id":"e","service":"s","event_time":' + b"1" * 5000 + b"}"),
    # math.isfinite(int) converts to float: OverflowError for integers above ~1.8e308.
    ("400-digit latency_ms", ev()[:-1] + b',"latency_ms":' + b"9" * 400 + b"}"),
]


@pytest.mark.parametrize("value", [r[1] for r in NEVER_RAISES], ids=[r[0] for r in NEVER_RAISES])
def test_parse_record_never_raises_on_huge_integers(value: bytes) -> None:
    got = parse_record(value)
    assert isinstance(got, Rejected)


# --- records that pass the contract but break the pipeline downstream -----------------------


def test_reserved_all_services_name_is_rejected() -> None:
    # "*" is the pseudo-service the Redis sink computes (tidegauge.core.store.ALL_SERVICES); the
    # sink
    # raises ValueError("'*' is computed by the sink, not sent to it") when a window update
    # carries it, so an accepted {"service": "*"} fails every batch that holds it.
    from tidegauge.core.store import ALL_SERVICES

    got = parse_record(ev(service=ALL_SERVICES))
    assert isinstance(got, Rejected) and got.reason is Reason.INVALID_VALUE, got


@pytest.mark.parametrize("field", ["event_id", "service", "user_id"])
def test_text_that_cannot_be_utf8_encoded_is_rejected(field: str) -> None:
    # JSON allows the escape \ud800 (a lone surrogate); json.loads turns it into a str that
    # cannot be encoded as UTF-8, so pyarrow and redis-py raise UnicodeEncodeError on it later.
    value = ev()[:-1] + f',"{field}":"x\\ud800"}}'.encode()
    got = parse_record(value)
    assert isinstance(got, Rejected), (
        f"accepted {field}={getattr(got, field)!r}, which cannot be encoded as UTF-8"
    )


@pytest.mark.parametrize("status", [2**31, -(2**31) - 1, 10**10])
def test_status_outside_int32_is_rejected(status: int) -> None:
    # jobs/parse/parser.py stores status in an Arrow int32 column ("status int" in PARSED_SCHEMA);
    # pa.array raises ArrowInvalid for an accepted status outside int32 and fails the batch.
    got = parse_record(ev(status=status))
    assert isinstance(got, Rejected) and got.reason is Reason.INVALID_VALUE, got


def test_sub_millisecond_iso_time_stays_in_its_window() -> None:
    #            window [10:00:00, 10:00:10)   window [10:00:10, 10:00:20)
    #   ----|=============================|=============================|---->
    #                                  ^ 10:00:09.9995 happened here
    # Rounding to the nearest ms gives 10:00:10.000, the next window. Floor keeps it in its own
    # window, as Spark does when it truncates a timestamp to milliseconds.
    got = parse_record(ev(event_time="2026-11-22T10:00:09.9995Z"))
    assert isinstance(got, Event)
    assert got.event_time == T + 9_999


# --- round trips ----------------------------------------------------------------------------

ROUND_TRIP_EVENTS = [
    E(),
    E(user_id="u1", latency_ms=0.0, status=0, sent_time=T),
    E(event_id='quote " and \\ backslash', service="tab\there", user_id="ü☕\n"),
    E(event_time=MIN_TIME_MS, latency_ms=1e-9, status=-1),
    E(event_time=MAX_TIME_MS - 1, latency_ms=1.7976931348623157e308, sent_time=MAX_TIME_MS - 1),
]


def _random_events(seed: int, n: int) -> list[Event]:
    rng = random.Random(seed)
    alphabet = "abcXYZ019 -_.:/\"\\\t\n'é☕\U0001f30a"

    def text(min_len: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, 12)))

    def maybe(value: object) -> object:
        return value if rng.random() < 0.5 else None

    return [
        Event(
            event_id=text(1),
            event_time=rng.randrange(MIN_TIME_MS, MAX_TIME_MS),
            service=text(1),
            user_id=maybe(text(0)),  # type: ignore[arg-type]
            latency_ms=maybe(rng.choice([0.0, rng.random() * 10_000, float(rng.randint(0, 9))])),  # type: ignore[arg-type]
            status=maybe(rng.choice([200, 404, 500, 0])),  # type: ignore[arg-type]
            sent_time=maybe(rng.randrange(MIN_TIME_MS, MAX_TIME_MS)),  # type: ignore[arg-type]
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("event", ROUND_TRIP_EVENTS + _random_events(seed=1, n=300))
def test_event_round_trip(event: Event) -> None:
    assert parse_record(encode_event(event)) == event


@pytest.mark.parametrize(
    "hb",
    [Heartbeat(T), Heartbeat(T, 0), Heartbeat(T, 2, "gen-1"), Heartbeat(MIN_TIME_MS, None, "")],
)
def test_heartbeat_round_trip(hb: Heartbeat) -> None:
    assert parse_record(encode_heartbeat(hb)) == hb


def test_encoding_leaves_out_absent_fields_and_is_compact() -> None:
    assert encode_event(E()) == b'{"event_id":"e1","event_time":1795341600000,"service":"checkout"}'
    assert encode_heartbeat(Heartbeat(T, 1, "g")) == (
        b'{"heartbeat":true,"event_time":1795341600000,"partition":1,"source":"g"}'
    )


# --- docs/events.md is this module's human twin ---------------------------------------------


def test_docs_list_every_reason_and_limit() -> None:
    text = DOCS.read_text()
    for reason in Reason:
        assert re.search(rf"`{reason.value}`", text), f"docs/events.md misses reason {reason.value}"
    assert f"{DEAD_LETTER_RAW_CAP:,}" in text or str(DEAD_LETTER_RAW_CAP) in text
    assert "2000-01-01" in text and "2100-01-01" in text
    assert f"{MAX_RECORD_BYTES:,} bytes" in text
    for f in BUILT_IN_FIELDS:
        if f.max_length is not None:
            assert f"at most {f.max_length} characters" in text, f.name


# --- the fast decoder agrees with the standard library's -------------------------------------
#
# `parse_record` decodes with orjson where it gives what `json.loads` gives, and leaves the rest
# to `_parse_standard`. Whatever the bytes, both must reach the same verdict (event, heartbeat,
# or rejection with the same reason and detail).

from tests.mutations import FIELDS as _FIELDS  # noqa: E402
from tests.mutations import TOKENS as _TOKENS  # noqa: E402
from tests.mutations import mutations as _mutations  # noqa: E402
from tidegauge.core.events import _parse_standard  # noqa: E402
from tidegauge.traffic.config import GeneratorConfig  # noqa: E402
from tidegauge.traffic.generator import generate  # noqa: E402


def test_fast_decoding_reaches_the_standard_verdict_on_every_record() -> None:
    rng = random.Random(12)
    cfg = GeneratorConfig(
        seed=4,
        rate=500.0,
        count=1_500,
        pace="fast",
        start_time_ms=1_780_000_000_000,
        malformed_fraction=0.2,
        heartbeat_interval_ms=500,
    )
    values = [r.value for r in generate(cfg)]
    values += [b"{" + f + b":" + t + b"}" for f in _FIELDS for t in _TOKENS]
    checked = 0
    for value in values:
        for v in _mutations(rng, value):
            got, want = parse_record(v), _parse_standard(v) if v else parse_record(v)
            assert got == want, v
            checked += 1
    assert checked > 10_000


def test_names_and_records_at_their_limits_are_accepted() -> None:
    at_limit = ev(service="s" * 128, event_id="e" * 256, user_id="u" * 256)
    got = parse_record(at_limit)
    assert isinstance(got, Event) and len(got.service) == 128
    # characters, not bytes: 128 four-byte characters are a valid service name
    assert isinstance(parse_record(ev(service="\U0001f30a" * 128)), Event)
    padded = ev(padding="")
    exact = ev(padding="p" * (MAX_RECORD_BYTES - len(padded)))
    assert len(exact) == MAX_RECORD_BYTES
    assert isinstance(parse_record(exact), Event)
    assert parse_record(exact + b" ").reason is Reason.TOO_LARGE  # type: ignore[union-attr]


# --- every kind of bad input, generated by hypothesis ---------------------------------------
#
# Property-based tests: every kind of bad input, generated by hypothesis.
#
# Each test draws records of one kind and states the verdict the contract (docs/events.md) gives
# that kind, so a failure names the kind and hypothesis shrinks the record that broke it. Every
# record, whatever its bytes: `parse_record` never raises, returns exactly one outcome, and the
# fast (orjson) path agrees with the standard library's; through the job's parser every record
# becomes exactly one row, and a dead letter keeps the record's first 4,096 bytes.

required = st.sampled_from(["event_id", "event_time", "service"])


def verdict(value: bytes | None) -> Event | Heartbeat | Rejected:
    """`parse_record`, checked to be total and to agree with the standard library's path."""
    got = parse_record(value)
    assert isinstance(got, Event | Heartbeat | Rejected)
    if value:
        assert _parse_standard(value) == got, value[:200]
    if isinstance(got, Rejected):
        assert got.detail and len(got.detail) < 300
    return got


def rejected(value: bytes | None, reason: Reason) -> None:
    got = verdict(value)
    assert isinstance(got, Rejected), (value if value is None else value[:200], got)
    assert got.reason is reason, (value if value is None else value[:200], got.detail)


# --- one test per kind of bad input ---------------------------------------------------------


@FUZZ
@given(st.binary(max_size=2_000))
def test_random_bytes_get_exactly_one_verdict(value: bytes) -> None:
    verdict(value)


@FUZZ
@given(st.binary(min_size=0, max_size=300), st.integers(0x80, 0xBF))
def test_bytes_that_start_mid_character_are_invalid_utf8(tail: bytes, first: int) -> None:
    rejected(bytes([first]) + tail, Reason.INVALID_UTF8)


@FUZZ
@given(events(), st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xfe"]))
def test_invalid_utf8_inside_a_string_is_invalid_utf8(obj: dict[str, Any], bad: bytes) -> None:
    obj["service"] = "svc\x00marker"
    value = dumps(obj).replace(b"\\u0000marker", bad)
    rejected(value, Reason.INVALID_UTF8)


@FUZZ
@given(events(), st.data())
def test_truncated_json_is_invalid_json(obj: dict[str, Any], data: st.DataObject) -> None:
    text = json.dumps(obj, separators=(",", ":"))
    cut = data.draw(st.integers(1, len(text) - 1))
    rejected(text[:cut].encode("utf-8"), Reason.INVALID_JSON)


@FUZZ
@given(json_values.filter(lambda v: not isinstance(v, dict)))
def test_json_that_is_not_an_object_is_not_an_object(value: Any) -> None:
    text = json.dumps(value)  # NaN and Infinity included: Python's decoder reads them back
    rejected(text.encode("utf-8"), Reason.NOT_AN_OBJECT)


@FUZZ
@given(events(), st.integers(MAX_NESTING, 20_000))
def test_nesting_beyond_the_limit_is_invalid_json(obj: dict[str, Any], depth: int) -> None:
    obj["extra"] = "\x00deep"
    value = dumps(obj).replace(b'"\\u0000deep"', b"[" * depth + b"]" * depth)
    assume(len(value) <= MAX_RECORD_BYTES)
    rejected(value, Reason.INVALID_JSON)


@FUZZ
@given(events(), st.integers(1, MAX_NESTING - 1))
def test_nesting_within_the_limit_in_an_unknown_field_is_ignored(
    obj: dict[str, Any], depth: int
) -> None:
    bare = verdict(dumps(obj))
    obj["extra"] = "\x00deep"
    value = dumps(obj).replace(b'"\\u0000deep"', b"[" * depth + b"]" * depth)
    assert verdict(value) == bare


@FUZZ
@given(events(), st.integers(MAX_RECORD_BYTES + 1, 1_000_000))
def test_records_over_the_size_limit_are_too_large(obj: dict[str, Any], size: int) -> None:
    bare = len(dumps({**obj, "padding": ""}))
    value = dumps({**obj, "padding": "p" * (size - bare)})
    assert len(value) == size
    rejected(value, Reason.TOO_LARGE)


nan_or_inf = st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"])


@FUZZ
@given(events(), nan_or_inf, st.sampled_from(["latency_ms", "event_time", "sent_time"]))
def test_nan_and_infinity_are_rejected(obj: dict[str, Any], token: bytes, field: str) -> None:
    obj[field] = "\x00num"
    value = dumps(obj).replace(b'"\\u0000num"', token)
    rejected(value, Reason.INVALID_VALUE if field == "latency_ms" else Reason.INVALID_TIME)


@FUZZ
@given(events(), st.sampled_from(["latency_ms", "status", "event_time"]), st.data())
def test_numbers_as_strings_are_rejected(
    obj: dict[str, Any], field: str, data: st.DataObject
) -> None:
    number = {
        "latency_ms": data.draw(st.floats(0, 1e6, allow_nan=False)),
        "status": data.draw(st.integers(100, 599)),
        "event_time": data.draw(times),
    }[field]
    obj[field] = str(number)
    # a time given as a string must be ISO-8601; a number in a string is not
    reason = Reason.INVALID_TIME if field == "event_time" else Reason.WRONG_TYPE
    rejected(dumps(obj), reason)


@FUZZ
@given(
    events(), st.sampled_from(["latency_ms", "status", "event_time", "sent_time"]), st.booleans()
)
def test_booleans_are_never_numbers(obj: dict[str, Any], field: str, flag: bool) -> None:
    obj[field] = flag
    rejected(dumps(obj), Reason.WRONG_TYPE)


@FUZZ
@given(events(), st.floats(max_value=-1e-300) | st.integers(max_value=-1))
def test_negative_latency_is_an_invalid_value(obj: dict[str, Any], latency: float) -> None:
    obj["latency_ms"] = latency
    rejected(dumps(obj), Reason.INVALID_VALUE)


@FUZZ
@given(events(), st.integers(10**308 * 2, 10**400))
def test_latency_beyond_a_float_is_an_invalid_value(obj: dict[str, Any], latency: int) -> None:
    obj["latency_ms"] = latency
    rejected(dumps(obj), Reason.INVALID_VALUE)


@FUZZ
@given(events(), st.floats(1e12, 1e300))
def test_huge_but_finite_latency_is_a_number_like_any_other(
    obj: dict[str, Any], latency: float
) -> None:
    obj["latency_ms"] = latency
    got = verdict(dumps(obj))
    assert isinstance(got, Event) and got.latency_ms == latency and math.isfinite(latency)


out_of_range = st.integers(max_value=MIN_TIME_MS - 1) | st.integers(min_value=MAX_TIME_MS)


@FUZZ
@given(events(), out_of_range | st.integers(946_684_800, 4_102_444_799), st.booleans())
def test_times_out_of_range_or_in_seconds_are_invalid(
    obj: dict[str, Any], t: int, sent: bool
) -> None:
    assume(abs(t) < 2**200)
    obj["sent_time" if sent else "event_time"] = t
    rejected(dumps(obj), Reason.INVALID_TIME)


@FUZZ
@given(events(), st.sampled_from(["event_id", "service", "event_time", "status"]), json_scalars)
# found by hypothesis: a 221-digit event time once made a 300-character detail
@example({"event_id": "0", "event_time": 946_684_800_000, "service": "0"}, "event_time", 1e220)
def test_duplicate_keys_take_the_last_value(obj: dict[str, Any], key: str, last: Any) -> None:
    value = dumps(obj)[:-1] + b"," + dumps(key) + b":" + json.dumps(last).encode() + b"}"
    expected = verdict(json.dumps({**obj, key: last}).encode())
    assert verdict(value) == expected


@FUZZ
@given(events(), required)
def test_null_in_a_required_field_is_a_missing_field(obj: dict[str, Any], field: str) -> None:
    obj[field] = None
    rejected(dumps(obj), Reason.MISSING_FIELD)


@FUZZ
@given(
    events(),
    st.dictionaries(
        st.text(max_size=12).filter(
            lambda k: (
                k
                not in {
                    "event_id",
                    "event_time",
                    "service",
                    "user_id",
                    "latency_ms",
                    "status",
                    "sent_time",
                    "heartbeat",
                }
            )
        ),
        json_values,
        min_size=1,
        max_size=5,
    ),
)
def test_unknown_fields_are_ignored(obj: dict[str, Any], extra: dict[str, Any]) -> None:
    assert verdict(dumps({**obj, **extra})) == verdict(dumps(obj))


@FUZZ
@given(
    events(),
    st.sampled_from([("service", 128), ("event_id", 256), ("user_id", 256)]),
    st.integers(1, 5_000),
)
def test_names_and_ids_over_their_limit_are_too_long(
    obj: dict[str, Any], field_limit: tuple[str, int], extra: int
) -> None:
    field, limit = field_limit
    obj[field] = "n" * (limit + extra)
    rejected(dumps(obj), Reason.TOO_LONG)


@FUZZ
@given(st.sampled_from([None, b""]))
def test_empty_value_is_empty(value: bytes | None) -> None:
    rejected(value, Reason.EMPTY)
