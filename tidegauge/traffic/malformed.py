"""Malformed records: each kind is built from the event it replaces.

`tidegauge.core.events.parse_record` must judge each with exactly the listed `Reason`
(tests/unit/tidegauge/traffic/test_malformed.py checks every kind). Together the kinds are the
fuzzing the job is tested with (tests/integration/test_fuzzed_input.py): broken bytes, broken JSON,
the wrong shape, wrong types and values in every field, and records or names beyond the contract's
limits. A kind's bytes depend only on the event it replaces (its "random" bytes come from a hash of
the event id), so a seeded stream stays reproducible.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from tidegauge.core.durations import to_iso
from tidegauge.core.events import MAX_RECORD_BYTES, Reason
from tidegauge.traffic.encoder import dumps

__all__ = ["BASIC_ROTATION", "EMPTY_KEY_KINDS", "MALFORMED_KINDS", "MALFORMED_ROTATION"]

Builder = Callable[[dict[str, Any]], bytes]


def _truncated(obj: dict[str, Any]) -> bytes:
    # A strict prefix of a JSON object is never valid JSON; cut the text (not the bytes) so the
    # result stays valid UTF-8 whatever the service names are.
    text = json.dumps(obj, separators=(",", ":"))
    return text[: max(1, len(text) // 2)].encode("utf-8")


def _without(name: str) -> Builder:
    return lambda obj: dumps({k: v for k, v in obj.items() if k != name})


def _with(name: str, make: Callable[[Any], Any]) -> Builder:
    return lambda obj: dumps({**obj, name: make(obj.get(name))})


def _literal(name: str, token: bytes) -> Builder:
    """The event with `name` set to a JSON token json.dumps cannot write (NaN, 1e400...)."""

    def build(obj: dict[str, Any]) -> bytes:
        marker = "\x00literal\x00"
        return dumps({**obj, name: marker}).replace(dumps(marker), token)

    return build


def _noise(obj: dict[str, Any], n: int) -> bytes:
    """`n` bytes that look random, fixed by the event id."""
    seed = str(obj.get("event_id", "")).encode("utf-8")
    out = b""
    block = 0
    while len(out) < n:
        out += hashlib.blake2b(seed + block.to_bytes(4, "little")).digest()
        block += 1
    return out[:n]


def _random_bytes(obj: dict[str, Any]) -> bytes:
    # Random bytes that are never UTF-8: the first is a continuation byte (0x80-0xBF), which no
    # UTF-8 text starts with, so the expected reason is certain whatever follows.
    noise = _noise(obj, 1 + _noise(obj, 1)[0] * 2)
    return bytes([0x80 | (noise[0] & 0x3F)]) + noise[1:]


def _deep(obj: dict[str, Any]) -> bytes:
    # An unknown field nested 5,000 lists deep: beyond any JSON decoder's recursion budget.
    return _literal("extra", b"[" * 5_000 + b"]" * 5_000)(obj)


def _padded(size: Callable[[dict[str, Any]], int]) -> Builder:
    """The event with an unknown `padding` field that makes the value `size(obj)` bytes long."""

    def build(obj: dict[str, Any]) -> bytes:
        bare = dumps({**obj, "padding": ""})
        return dumps({**obj, "padding": "p" * (size(obj) - len(bare))})

    return build


def _duplicate_key(obj: dict[str, Any]) -> bytes:
    # JSON decoders keep the last of duplicate keys: a valid service, then a number.
    return dumps(obj)[:-1] + b',"service":42}'


#: (name, expected Reason, builder from the replaced event's JSON object).
MALFORMED_KINDS: tuple[tuple[str, Reason, Builder], ...] = (
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
    ("random_bytes", Reason.INVALID_UTF8, _random_bytes),
    ("json_string", Reason.NOT_AN_OBJECT, lambda obj: dumps(json.dumps(obj))),
    ("deep_nesting", Reason.INVALID_JSON, _deep),
    ("nan_latency", Reason.INVALID_VALUE, _literal("latency_ms", b"NaN")),
    ("huge_latency", Reason.INVALID_VALUE, _literal("latency_ms", b"1e400")),
    ("infinite_time", Reason.INVALID_TIME, _literal("event_time", b"Infinity")),
    ("time_microseconds", Reason.INVALID_TIME, _with("event_time", lambda v: v * 1000)),
    ("boolean_status", Reason.WRONG_TYPE, _with("status", lambda v: True)),
    ("boolean_time", Reason.WRONG_TYPE, _with("event_time", lambda v: True)),
    ("duplicate_key", Reason.WRONG_TYPE, _duplicate_key),
    ("null_event_time", Reason.MISSING_FIELD, _with("event_time", lambda v: None)),
    ("reserved_service", Reason.INVALID_VALUE, _with("service", lambda v: "*")),
    ("long_service", Reason.TOO_LONG, _with("service", lambda v: f"{v}-" + "x" * 300)),
    ("long_event_id", Reason.TOO_LONG, _with("event_id", lambda v: f"{v}-" + "0" * 300)),
    (
        "oversized",
        Reason.TOO_LARGE,
        _padded(lambda obj: MAX_RECORD_BYTES + 1 + _noise(obj, 1)[0] * 16),
    ),
    ("megabyte", Reason.TOO_LARGE, _padded(lambda obj: 1_000_000)),
    ("empty_key_and_value", Reason.EMPTY, lambda obj: b""),
)

#: Kinds whose record also has an empty key (b"").
EMPTY_KEY_KINDS = frozenset({"empty_key_and_value"})

_RARE = {"megabyte": 50}  # kind -> once per this many cycles of the others (1 MB each)


def _rotation() -> tuple[int, ...]:
    common = [i for i, k in enumerate(MALFORMED_KINDS) if k[0] not in _RARE]
    cycles = max(_RARE.values())
    out: list[int] = []
    for c in range(cycles):
        out.extend(common)
        if c == 0:
            out.extend(i for i, k in enumerate(MALFORMED_KINDS) if k[0] in _RARE)
    return tuple(out)


#: The order malformed records take their kinds in under `--fuzz` (indexes into MALFORMED_KINDS),
#: repeated: every kind once per cycle, except a megabyte record after the first cycle of every 50.
MALFORMED_ROTATION = _rotation()

#: The order without `--fuzz`: the first 14 kinds, as every seeded stream had them before.
BASIC_ROTATION = tuple(range(14))
