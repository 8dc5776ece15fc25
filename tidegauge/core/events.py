"""The event contract: what one Kafka record must hold, and how a record is judged.

Every part of Tidegauge (generator, job, tests) agrees on this module; docs/events.md is its
human-readable twin. Parsing is a pure function of the record's bytes, so the job (which calls it
on Spark executors) and the tests (which call it to compute ground truth) cannot disagree.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import accumulate
from typing import Any, Literal

import orjson

__all__ = [
    "BUILT_IN_FIELDS",
    "ContractError",
    "DEAD_LETTER_RAW_CAP",
    "EventField",
    "MAX_NESTING",
    "MAX_RECORD_BYTES",
    "MAX_TIME_MS",
    "MIN_TIME_MS",
    "OVERFLOW_SERVICE",
    "ALL_SERVICES",
    "Event",
    "EventValues",
    "Heartbeat",
    "Reason",
    "Rejected",
    "as_event",
    "encode_event",
    "encode_heartbeat",
    "event_fields",
    "parse_record",
    "parse_values",
    "parse_time",
    "register_field",
    "unregister_field",
]

#: Event times outside [2000-01-01, 2100-01-01) are rejected: they are almost always seconds sent
#: where milliseconds were meant (or the reverse), and would open absurd windows.
MIN_TIME_MS = 946_684_800_000
MAX_TIME_MS = 4_102_444_800_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_INT32 = 2**31

#: The pseudo-service that aggregates every service; reserved.
ALL_SERVICES = "*"
#: The service that counts the events of names beyond the job's `--max-services`; reserved, like
#: ALL_SERVICES, so no producer's name can be mistaken for either.
OVERFLOW_SERVICE = "(other)"

#: How many bytes of a malformed record the dead-letter store keeps.
DEAD_LETTER_RAW_CAP = 4096

#: A record value longer than this is a dead letter (`too_large`) before any decoding: a request
#: event is a few hundred bytes, so 64 KiB leaves room for plugins' fields, while a megabyte of
#: JSON would cost the read task milliseconds and the dead-letter store only its first 4 KiB.
MAX_RECORD_BYTES = 65_536


class Reason(StrEnum):
    """Why a record broke the contract; dead letters are counted by these codes."""

    EMPTY = "empty"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    INVALID_TIME = "invalid_time"
    INVALID_VALUE = "invalid_value"
    TOO_LARGE = "too_large"
    TOO_LONG = "too_long"


@dataclass(frozen=True, slots=True)
class Event:
    """One request of one service: the unit every metric counts. Times are epoch ms, UTC.

    `extras` holds the values of registered optional fields (`register_field`) that the record
    carried, as (name, value) pairs in registration order.
    """

    event_id: str
    event_time: int
    service: str
    user_id: str | None = None
    latency_ms: float | None = None
    status: int | None = None
    sent_time: int | None = None
    extras: tuple[tuple[str, Any], ...] = ()


#: What `parse_values` gives for an event: its values in check order (`event_fields()`).
EventValues = list[Any]

FieldType = Literal["string", "time", "float", "int"]


@dataclass(frozen=True)
class EventField:
    """One field of the event contract: its JSON name, type, rules and parsed column.

    * `string`: a JSON string; required ones must not be empty; `reserved` values are refused;
      at most `max_length` characters when one is set (names become Redis keys and chart labels).
    * `time`: epoch ms or ISO-8601 with a zone (`parse_time`); the column holds epoch ms.
    * `float`: a JSON number (not a boolean), finite, `>= minimum` when one is set; integers
      are read as floats.
    * `int`: a JSON integer (not a boolean, not `200.0`) that fits in 32 bits.

    `column` is its name in the job's parsed rows (Spark and Arrow schemas are derived from
    these declarations, jobs/parse/parser.py). Registered fields are optional and numeric or string;
    a metric reads them by `column` from its batch (tidegauge/core/registry.py).
    """

    name: str
    type: FieldType
    required: bool = False
    column: str = ""
    minimum: float | None = None
    reserved: tuple[str, ...] = ()
    max_length: int | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.column:
            object.__setattr__(self, "column", self.name)

    def checker(self, valid_unicode: bool = False) -> Callable[[Any], Any]:
        """A function from the raw JSON value (None when absent) to the parsed value.

        Built once per field: parsing runs it for every record, so the per-type branches are
        decided here, not per value. `valid_unicode`: the decoder already refused lone
        surrogates (orjson does), so strings need no UTF-8 check.
        """
        name, required = self.name, self.required

        def absent() -> None:
            if required:
                raise ContractError(Reason.MISSING_FIELD, f"{name} is required")

        if self.type == "string":
            reserved = frozenset(self.reserved)
            longest = self.max_length if self.max_length is not None else math.inf

            def string(value: Any) -> str | None:
                if value is None:
                    absent()
                    return None
                if type(value) is not str:
                    return _string(self, value)  # raises WRONG_TYPE (or returns a str subclass)
                if (required and not value) or value in reserved or len(value) > longest:
                    return _string(self, value)  # raises with the contract's detail
                if valid_unicode:
                    return value
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return _string(self, value)
                return value

            return string
        if self.type == "time":

            def time_value(value: Any) -> int | None:
                if value is None:
                    absent()
                    return None
                if type(value) is int and MIN_TIME_MS <= value < MAX_TIME_MS:
                    return value  # the common case: epoch ms in range
                return parse_time(value, name)

            return time_value
        if self.type == "float":
            minimum = self.minimum

            def number(value: Any) -> float | None:
                if value is None:
                    absent()
                    return None
                if type(value) is float and math.isfinite(value):
                    if minimum is None or value >= minimum:
                        return value
                return _number(self, value)

            return number

        def integer(value: Any) -> int | None:
            if value is None:
                absent()
                return None
            if type(value) is int and -_INT32 <= value < _INT32:
                return value
            return _integer(self, value)

        return integer


#: The contract's fields in the order a record is checked (docs/events.md): the first fault
#: found is the one counted. Registered fields come after these.
BUILT_IN_FIELDS: tuple[EventField, ...] = (
    EventField("event_id", "string", required=True, max_length=256, doc="unique id of the request"),
    EventField("event_time", "time", required=True, column="event_ms", doc="when it happened"),
    EventField(
        "service",
        "string",
        required=True,
        reserved=(ALL_SERVICES, OVERFLOW_SERVICE),
        max_length=128,
        doc="the key metrics group by",
    ),
    EventField("user_id", "string", max_length=256, doc="who made it (distinct users)"),
    EventField("sent_time", "time", column="sent_ms", doc="when the device sent it"),
    EventField("latency_ms", "float", minimum=0.0, doc="how slow it was"),
    EventField("status", "int", doc="its status code; >= 500 is an error"),
)
_REGISTERED: dict[str, EventField] = {}


def register_field(f: EventField) -> EventField:
    """Add an optional field to the contract (a plugin's metric reads it). ValueError if taken."""
    if f.required:
        raise ValueError(f"registered field {f.name!r} must be optional")
    taken = {g.name for g in event_fields()} | {g.column for g in event_fields()}
    if f.name in taken or f.column in taken or f.name == "heartbeat":
        raise ValueError(f"event field {f.name!r} is already part of the contract")
    _REGISTERED[f.name] = f
    _compile()
    return f


def unregister_field(name: str) -> None:
    """Remove a registered field (tests that register one clean up with this)."""
    _REGISTERED.pop(name, None)
    _compile()


def event_fields() -> tuple[EventField, ...]:
    """The contract's fields: the built-in ones, then the registered ones, in check order."""
    return BUILT_IN_FIELDS + tuple(_REGISTERED.values())


#: (name, checker) of every field in check order, rebuilt when the registered fields change;
#: `_FAST_CHECKERS` for objects orjson decoded (no lone surrogates in their strings).
_CHECKERS: list[tuple[str, Callable[[Any], Any]]] = []
_FAST_CHECKERS: list[tuple[str, Callable[[Any], Any]]] = []
_EXTRA_NAMES: list[str] = []


#: Where orjson gives a top-level value a float of 2^63 or more, the literal may have been an
#: integer beyond 64 bits, which the standard library keeps exact: such records are decoded
#: again by it (`parse_record`).
_BIG = 2.0**63


def _compile() -> None:
    _CHECKERS[:] = [(f.name, f.checker()) for f in event_fields()]
    _FAST_CHECKERS[:] = [(f.name, f.checker(valid_unicode=True)) for f in event_fields()]
    _EXTRA_NAMES[:] = list(_REGISTERED)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A producer's promise that its event time on one partition has reached `event_time`.

    Heartbeats move the watermark forward when traffic is quiet; they are never counted.
    """

    event_time: int
    partition: int | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record that broke the contract: the code it is counted under and a readable detail."""

    reason: Reason
    detail: str


class ContractError(ValueError):
    """A value broke the contract; carries the `Reason` it is counted under."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def parse_time(value: Any, field: str = "event_time") -> int:
    """Turn a contract time (epoch ms integer or ISO-8601 string with a zone) into epoch ms.

    Raises `ContractError` with a reason; `parse_record` turns it into `Rejected`.
    """
    if isinstance(value, bool):
        raise ContractError(
            Reason.WRONG_TYPE, f"{field} must be epoch ms or ISO-8601, got a boolean"
        )
    if isinstance(value, int):
        ms = value
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ContractError(Reason.INVALID_TIME, f"{field} must be whole epoch milliseconds")
        ms = int(value)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise ContractError(
                Reason.INVALID_TIME, f"{field} is not ISO-8601: {value[:64]!r}"
            ) from None
        if dt.tzinfo is None:
            raise ContractError(Reason.INVALID_TIME, f"{field} has no time zone: {value[:64]!r}")
        ms = (dt - _EPOCH) // _MS  # floor: 09.9995 stays in the window that holds 09.999
    else:
        raise ContractError(
            Reason.WRONG_TYPE,
            f"{field} must be epoch ms or an ISO-8601 string, got {type(value).__name__}",
        )
    if not MIN_TIME_MS <= ms < MAX_TIME_MS:
        raise ContractError(
            Reason.INVALID_TIME,
            f"{field}={_short(ms)} is outside 2000..2100 (epoch milliseconds expected, seconds "
            "given?)",
        )
    return ms


def _string(f: EventField, value: Any) -> str:
    if not isinstance(value, str):
        raise ContractError(
            Reason.WRONG_TYPE, f"{f.name} must be a string, got {type(value).__name__}"
        )
    if f.required and not value:
        raise ContractError(Reason.INVALID_VALUE, f"{f.name} must not be empty")
    if value in f.reserved:
        raise ContractError(
            Reason.INVALID_VALUE, f"{f.name} {value!r} is a name Tidegauge reserves"
        )
    if f.max_length is not None and len(value) > f.max_length:
        raise ContractError(
            Reason.TOO_LONG,
            f"{f.name} is {len(value):,} characters long; the limit is {f.max_length:,}",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ContractError(Reason.INVALID_VALUE, f"{f.name} holds a lone surrogate") from None
    return value


def _number(f: EventField, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ContractError(
            Reason.WRONG_TYPE, f"{f.name} must be a number, got {type(value).__name__}"
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or (f.minimum is not None and number < f.minimum):
        bound = "" if f.minimum is None else f" >= {f.minimum:g}"
        raise ContractError(
            Reason.INVALID_VALUE, f"{f.name} must be a finite number{bound}: {str(number)[:32]}"
        )
    return number


def _integer(f: EventField, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(
            Reason.WRONG_TYPE, f"{f.name} must be an integer, got {type(value).__name__}"
        )
    if not -_INT32 <= value < _INT32:
        raise ContractError(Reason.INVALID_VALUE, f"{f.name} must fit in 32 bits")
    return value


def _checked(obj: dict[str, Any], checkers: list[tuple[str, Callable[[Any], Any]]]) -> EventValues:
    get = obj.get
    return [check(get(name)) for name, check in checkers]


def as_event(v: EventValues) -> Event:
    """The `Event` of an event's checked values (`parse_values`)."""
    extras: tuple[tuple[str, Any], ...] = ()
    if _EXTRA_NAMES:
        extras = tuple((n, x) for n, x in zip(_EXTRA_NAMES, v[7:], strict=True) if x is not None)
    # check order: event_id, event_time, service, user_id, sent_time, latency_ms, status
    return Event(v[0], v[1], v[2], v[3], v[5], v[6], v[4], extras)


_compile()


def _short(n: int) -> str:
    """An integer for a message: as is up to 24 digits, else its first digits and its size."""
    text = str(n)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def _heartbeat(obj: dict[str, Any]) -> Heartbeat:
    if "event_time" not in obj or obj["event_time"] is None:
        raise ContractError(Reason.MISSING_FIELD, "heartbeat event_time is required")
    partition = obj.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)):
        raise ContractError(Reason.WRONG_TYPE, "heartbeat partition must be an integer")
    source = obj.get("source")
    return Heartbeat(
        parse_time(obj["event_time"]), partition, source if isinstance(source, str) else None
    )


#: JSON nested deeper than this is `invalid_json`. A fixed limit, because the standard library's
#: decoder gives up at a depth that depends on the process's recursion limit (and orjson at
#: 1,024): a record's verdict must not depend on where it is parsed.
MAX_NESTING = 64

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def _depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets in strings ignored)."""
    steps = (1 if b in "[{" else -1 for b in _BRACKETS.findall(_STRING.sub("", text)))
    return max(accumulate(steps, initial=0))


def parse_record(value: bytes | None) -> Event | Heartbeat | Rejected:
    """Judge one Kafka record value against the contract. Never raises."""
    return _wrapped(parse_values(value))


def _wrapped(got: EventValues | Heartbeat | Rejected) -> Event | Heartbeat | Rejected:
    return as_event(got) if isinstance(got, list) else got


def parse_values(value: bytes | None) -> EventValues | Heartbeat | Rejected:
    """`parse_record` without building the `Event`: its checked values, in check order.

    The job's parser (jobs/parse/parser.py) writes them straight into columns. Decodes with orjson
    (C, ~4x faster than the standard library) when it can give exactly what `json.loads`
    gives; a value it rejects, objects holding arrays or objects (whose depth the standard
    path checks) and objects where a number it turned into a float may have been an integer
    too big for 64 bits go the standard library's way (`_parse_standard`), which also words
    every rejection. The two agree on every record (tests/unit/tidegauge/core/test_events.py
    checks them against each other).
    """
    if not value:
        return Rejected(Reason.EMPTY, "record has no value")
    if len(value) > MAX_RECORD_BYTES:
        return _too_large(value)
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:  # not UTF-8, not JSON, NaN, a lone surrogate, 1e400...
        return _standard_values(value)
    if type(obj) is not dict:
        return _standard_values(value)
    for v in obj.values():
        t = type(v)
        if (t is float and not -_BIG < v < _BIG) or t is dict or t is list:
            # a float may be an integer beyond 64 bits; nesting needs the depth check
            return _standard_values(value)
    return _judge(obj, _FAST_CHECKERS)


def _parse_standard(value: bytes) -> Event | Heartbeat | Rejected:
    """`parse_record` with the standard library's decoder: the reference, and every rejection."""
    return _wrapped(_standard_values(value))


def _standard_values(value: bytes) -> EventValues | Heartbeat | Rejected:
    if len(value) > MAX_RECORD_BYTES:
        return _too_large(value)
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        return Rejected(Reason.INVALID_UTF8, f"not UTF-8 at byte {e.start}")
    if value.count(b"[") + value.count(b"{") > MAX_NESTING and _depth(text) > MAX_NESTING:
        return Rejected(Reason.INVALID_JSON, f"not JSON: nested deeper than {MAX_NESTING} levels")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:  # ValueError covers 4300+ digit integers
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e).split(";")[0][:80]
        return Rejected(Reason.INVALID_JSON, f"not JSON: {msg}")
    if not isinstance(obj, dict):
        return Rejected(Reason.NOT_AN_OBJECT, f"JSON {type(obj).__name__}, not an object")
    return _judge(obj)


def _too_large(value: bytes) -> Rejected:
    return Rejected(
        Reason.TOO_LARGE, f"record is {len(value):,} bytes; the limit is {MAX_RECORD_BYTES:,}"
    )


def _judge(
    obj: dict[str, Any], checkers: list[tuple[str, Callable[[Any], Any]]] = _CHECKERS
) -> EventValues | Heartbeat | Rejected:
    try:
        if obj.get("heartbeat") is True:
            return _heartbeat(obj)
        return _checked(obj, checkers)
    except ContractError as e:
        return Rejected(e.reason, e.detail)


def check_values(obj: dict[str, Any]) -> EventValues | Rejected:
    """The contract's judgement of an object already decoded: checked values, or why not.

    No heartbeats. Inputs that map their own records onto the contract
    (tidegauge/core/field_map.py) end here, so every format obeys the same rules.
    """
    try:
        return _checked(obj, _FAST_CHECKERS)
    except ContractError as e:
        return Rejected(e.reason, e.detail)


def encode_event(event: Event) -> bytes:
    """Serialise an event the way the contract expects (optional fields left out when None)."""
    obj: dict[str, Any] = {
        "event_id": event.event_id,
        "event_time": event.event_time,
        "service": event.service,
    }
    for name in ("user_id", "latency_ms", "status", "sent_time"):
        v = getattr(event, name)
        if v is not None:
            obj[name] = v
    obj.update(event.extras)
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_heartbeat(hb: Heartbeat) -> bytes:
    """Serialise a heartbeat record."""
    obj: dict[str, Any] = {"heartbeat": True, "event_time": hb.event_time}
    if hb.partition is not None:
        obj["partition"] = hb.partition
    if hb.source is not None:
        obj["source"] = hb.source
    return json.dumps(obj, separators=(",", ":")).encode()
