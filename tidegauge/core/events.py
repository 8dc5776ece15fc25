"""The event contract: what one Kafka record must hold, and how a record is judged.

Every part of Tidegauge (generator, job, tests) agrees on this module; docs/events.md is its
human-readable twin. Parsing is a pure function of the record's bytes, so the job (which calls it
on Spark executors) and the tests (which call it to compute ground truth) cannot disagree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

__all__ = [
    "ContractError",
    "DEAD_LETTER_RAW_CAP",
    "MAX_TIME_MS",
    "MIN_TIME_MS",
    "Event",
    "Heartbeat",
    "Reason",
    "Rejected",
    "encode_event",
    "encode_heartbeat",
    "parse_record",
    "parse_time",
]

#: Event times outside [2000-01-01, 2100-01-01) are rejected: they are almost always seconds sent
#: where milliseconds were meant (or the reverse), and would open absurd windows.
MIN_TIME_MS = 946_684_800_000
MAX_TIME_MS = 4_102_444_800_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_INT32 = 2**31

#: How many bytes of a malformed record the dead-letter store keeps.
DEAD_LETTER_RAW_CAP = 4096


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


@dataclass(frozen=True, slots=True)
class Event:
    """One request of one service: the unit every metric counts. Times are epoch ms, UTC."""

    event_id: str
    event_time: int
    service: str
    user_id: str | None = None
    latency_ms: float | None = None
    status: int | None = None
    sent_time: int | None = None


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
            f"{field}={ms} is outside 2000..2100 (epoch milliseconds expected, seconds given?)",
        )
    return ms


def _string(obj: dict[str, Any], field: str, required: bool) -> str | None:
    value = obj.get(field)
    if value is None:
        if required:
            raise ContractError(Reason.MISSING_FIELD, f"{field} is required")
        return None
    if not isinstance(value, str):
        raise ContractError(
            Reason.WRONG_TYPE, f"{field} must be a string, got {type(value).__name__}"
        )
    if required and not value:
        raise ContractError(Reason.INVALID_VALUE, f"{field} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ContractError(Reason.INVALID_VALUE, f"{field} holds a lone surrogate") from None
    return value


def _event(obj: dict[str, Any]) -> Event:
    event_id = _string(obj, "event_id", required=True)
    if "event_time" not in obj or obj["event_time"] is None:
        raise ContractError(Reason.MISSING_FIELD, "event_time is required")
    event_time = parse_time(obj["event_time"])
    service = _string(obj, "service", required=True)
    if service == "*":
        raise ContractError(Reason.INVALID_VALUE, "service '*' is reserved for all services")
    user_id = _string(obj, "user_id", required=False)
    sent = obj.get("sent_time")
    sent_time = None if sent is None else parse_time(sent, "sent_time")
    latency = obj.get("latency_ms")
    if latency is not None:
        if isinstance(latency, bool) or not isinstance(latency, int | float):
            raise ContractError(
                Reason.WRONG_TYPE, f"latency_ms must be a number, got {type(latency).__name__}"
            )
        try:
            latency = float(latency)
        except OverflowError:
            latency = math.inf
        if not math.isfinite(latency) or latency < 0:
            raise ContractError(
                Reason.INVALID_VALUE,
                f"latency_ms must be a finite number >= 0: {str(latency)[:32]}",
            )
    status = obj.get("status")
    if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
        raise ContractError(
            Reason.WRONG_TYPE, f"status must be an integer, got {type(status).__name__}"
        )
    if status is not None and not -_INT32 <= status < _INT32:
        raise ContractError(Reason.INVALID_VALUE, "status must fit in 32 bits")
    assert event_id is not None and service is not None
    return Event(event_id, event_time, service, user_id, latency, status, sent_time)


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


def parse_record(value: bytes | None) -> Event | Heartbeat | Rejected:
    """Judge one Kafka record value against the contract. Never raises."""
    if not value:
        return Rejected(Reason.EMPTY, "record has no value")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        return Rejected(Reason.INVALID_UTF8, f"not UTF-8 at byte {e.start}")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:  # ValueError covers 4300+ digit integers
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e).split(";")[0][:80]
        return Rejected(Reason.INVALID_JSON, f"not JSON: {msg}")
    if not isinstance(obj, dict):
        return Rejected(Reason.NOT_AN_OBJECT, f"JSON {type(obj).__name__}, not an object")
    try:
        if obj.get("heartbeat") is True:
            return _heartbeat(obj)
        return _event(obj)
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
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_heartbeat(hb: Heartbeat) -> bytes:
    """Serialise a heartbeat record."""
    obj: dict[str, Any] = {"heartbeat": True, "event_time": hb.event_time}
    if hb.partition is not None:
        obj["partition"] = hb.partition
    if hb.source is not None:
        obj["source"] = hb.source
    return json.dumps(obj, separators=(",", ":")).encode()
