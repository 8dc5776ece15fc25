"""Malformed records: each kind is built from the event it replaces.

`tidegauge.core.events.parse_record` must judge each with exactly the listed `Reason`
(tests/unit/test_generator.py checks every kind).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tidegauge.core.durations import to_iso
from tidegauge.core.events import Reason
from tidegauge.traffic.encoder import dumps

__all__ = ["MALFORMED_KINDS"]


def _truncated(obj: dict[str, Any]) -> bytes:
    # A strict prefix of a JSON object is never valid JSON; cut the text (not the bytes) so the
    # result stays valid UTF-8 whatever the service names are.
    text = json.dumps(obj, separators=(",", ":"))
    return text[: max(1, len(text) // 2)].encode("utf-8")


def _without(name: str) -> Callable[[dict[str, Any]], bytes]:
    return lambda obj: dumps({k: v for k, v in obj.items() if k != name})


def _with(name: str, make: Callable[[Any], Any]) -> Callable[[dict[str, Any]], bytes]:
    return lambda obj: dumps({**obj, name: make(obj.get(name))})


#: (name, expected Reason, builder from the replaced event's JSON object), in rotation order.
MALFORMED_KINDS: tuple[tuple[str, Reason, Callable[[dict[str, Any]], bytes]], ...] = (
    ("truncated_json", Reason.INVALID_JSON, _truncated),
    ("invalid_utf8", Reason.INVALID_UTF8, lambda obj: b"\xff\xfe" + dumps(obj)),
    ("json_array", Reason.NOT_AN_OBJECT, lambda obj: dumps([obj])),
    ("no_service", Reason.MISSING_FIELD, _without("service")),
    ("no_event_id", Reason.MISSING_FIELD, _without("event_id")),
    ("no_event_time", Reason.MISSING_FIELD, _without("event_time")),
    ("latency_string", Reason.WRONG_TYPE, _with("latency_ms", lambda v: str(v))),
    ("status_string", Reason.WRONG_TYPE, _with("status", lambda v: str(v))),
    ("service_number", Reason.WRONG_TYPE, _with("service", lambda v: 42)),
    ("time_word", Reason.INVALID_TIME, _with("event_time", lambda v: "yesterday")),
    ("time_no_zone", Reason.INVALID_TIME, _with("event_time", lambda v: to_iso(v)[:-1])),
    ("time_seconds", Reason.INVALID_TIME, _with("event_time", lambda v: v // 1000)),
    ("negative_latency", Reason.INVALID_VALUE, _with("latency_ms", lambda v: -max(v, 1.0))),
    ("empty", Reason.EMPTY, lambda obj: b""),
)
