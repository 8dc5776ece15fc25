"""OpenTelemetry spans read as they are: OTLP trace messages, one event per chosen span.

The OpenTelemetry Collector's Kafka exporter writes each batch of spans as one Kafka record:
an `ExportTraceServiceRequest`, encoded `otlp_proto` (its default) or `otlp_json`. `tidegauge
job --format otlp_proto|otlp_json` reads them with the OpenTelemetry project's own message
classes (`opentelemetry-proto`, protobuf's C decoder) and turns each span of the kinds asked for
(`--span-kind`, server and consumer by default: one per request a service handled) into one
event of the contract:

* `service`: the resource's `service.name`;
* `event_time`: the span's start, floored to the millisecond: when the request began, so a
  slow request counts in the window it arrived in, as a tracing UI orders it;
* `latency_ms`: end - start (to the nanosecond);
* `status`: `http.response.status_code` (or the older `http.status_code`); without one, 500
  for a span whose status is ERROR, else none;
* `user_id`: `enduser.id`, else `user.id` (span, then resource);
* `event_id`: trace id + span id (hex): a span the collector sent twice counts once.

A registered string field (a `--dimension`'s, tidegauge/core/dimensions.py) is read from the
attribute of its name or of its aliases (`route`: `http.route`, `region`: `cloud.region`, ...),
the span's first, then the resource's. A record that is not a trace
message is one dead letter; a span that does not make an event (no `service.name`, an end
before its start, a value the contract refuses) is a dead letter of its own, with the span
named in the detail and the record's bytes kept. Spans of other kinds are skipped, not counted.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from tidegauge.core.dimensions import attribute_keys
from tidegauge.core.events import (
    BUILT_IN_FIELDS,
    MAX_RECORD_BYTES,
    EventValues,
    Reason,
    Rejected,
    check_values,
    event_fields,
)

__all__ = ["SPAN_KINDS", "DEFAULT_SPAN_KINDS", "decoder"]

#: OTLP's span kinds by the names `--span-kind` takes.
SPAN_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
#: A request a service handled: served (server) or consumed from a queue (consumer).
DEFAULT_SPAN_KINDS = ("server", "consumer")

_STATUS_ERROR = 2
_HTTP_STATUS = ("http.response.status_code", "http.status_code")
_USER = ("enduser.id", "user.id")
#: The attributes an event field reads: only these are decoded (a span may carry dozens).
_READ = frozenset(("service.name", *_HTTP_STATUS, *_USER))

#: One span as both encodings give it: (trace id hex, span id hex, kind, start ns, end ns,
#: attributes, status code).
_Span = tuple[str, str, int, int, int, dict[str, Any], int]

Decoder = Callable[[bytes | None, int, int], list[EventValues | Rejected]]
_Reader = Callable[
    [bytes, frozenset[int], frozenset[str]], Iterator[tuple[int, dict[str, Any], _Span]]
]


def decoder(encoding: str, span_kinds: Sequence[str] = DEFAULT_SPAN_KINDS) -> Decoder:
    """The function from a record's value to its spans' events (and dead letters)."""
    kinds = frozenset(SPAN_KINDS[k] for k in span_kinds)
    read: _Reader = _proto_resources if encoding == "otlp_proto" else _json_resources
    extra = [
        (f.name, attribute_keys(f.name))
        for f in event_fields()[len(BUILT_IN_FIELDS) :]
        if f.type == "string"
    ]
    keys = _READ | {k for _, ks in extra for k in ks}

    def decode(value: bytes | None, partition: int, offset: int) -> list[EventValues | Rejected]:
        if not value:
            return [Rejected(Reason.EMPTY, "record has no value")]
        if len(value) > 64 * MAX_RECORD_BYTES:
            return [
                Rejected(
                    Reason.TOO_LARGE,
                    f"record is {len(value):,} bytes; an OTLP message may be at most "
                    f"{64 * MAX_RECORD_BYTES:,}",
                )
            ]
        try:
            chosen = list(read(value, kinds, keys))
        except _NotTraces as e:
            return [Rejected(e.reason, str(e))]
        return [_event(resource, span, n, extra) for n, resource, span in chosen]

    return decode


class _NotTraces(ValueError):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _event(
    resource: Mapping[str, Any],
    span: _Span,
    n: int,
    extra: Sequence[tuple[str, tuple[str, ...]]] = (),
) -> EventValues | Rejected:
    trace_id, span_id, _, start_ns, end_ns, attrs, status_code = span
    service = resource.get("service.name")
    if not isinstance(service, str) or not service:
        return _rejected(span, n, Reason.MISSING_FIELD, "the resource has no service.name")
    if not trace_id or not span_id:
        return _rejected(span, n, Reason.MISSING_FIELD, "no trace id or span id")
    if end_ns < start_ns:
        return _rejected(span, n, Reason.INVALID_VALUE, "ends before it starts")
    status = attrs.get(_HTTP_STATUS[0])
    if status is None:
        status = attrs.get(_HTTP_STATUS[1])
        if status is None and status_code == _STATUS_ERROR:
            status = 500
    user = attrs.get(_USER[0]) or attrs.get(_USER[1]) or resource.get(_USER[0])
    user = user or resource.get(_USER[1])
    obj = {
        "event_id": trace_id + span_id,
        "event_time": start_ns // 1_000_000,
        "service": service,
        "latency_ms": (end_ns - start_ns) / 1e6,
        "status": status,
        "user_id": None if user is None else user if type(user) is str else str(user),
    }
    for name, keys in extra:
        obj[name] = _first(keys, attrs, resource)
    got = check_values(obj)
    if isinstance(got, Rejected):
        return _rejected(span, n, got.reason, got.detail)
    return got


def _first(keys: Sequence[str], *scopes: Mapping[str, Any]) -> str | None:
    """The first of `keys` set in the first scope that has one, as a string."""
    for scope in scopes:
        for k in keys:
            v = scope.get(k)
            if v is not None and v != "":
                return v if type(v) is str else str(v)
    return None


def _rejected(span: _Span, n: int, reason: Reason, detail: str) -> Rejected:
    """A dead letter whose detail names the span: its number in the message and its ids."""
    return Rejected(reason, f"span {n} (trace {span[0] or '?'}, span {span[1] or '?'}): {detail}")


# --- otlp_proto ------------------------------------------------------------------------------


def _proto_resources(
    value: bytes, kinds: frozenset[int], keys: frozenset[str] = _READ
) -> Iterator[tuple[int, dict[str, Any], _Span]]:
    """(span number in the message, resource attributes, span) of each span of `kinds`."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(value)
    except DecodeError as e:
        raise _NotTraces(
            Reason.INVALID_JSON, f"not an OTLP trace message (protobuf): {e}"
        ) from None
    if not request.resource_spans:  # bytes that happen to parse, JSON among them
        raise _NotTraces(Reason.NOT_AN_OBJECT, "not an OTLP trace message: no resource spans")
    n = 0
    for rs in request.resource_spans:
        resource = _proto_attributes(rs.resource.attributes, keys)
        for ss in rs.scope_spans:
            for s in ss.spans:
                n += 1
                if s.kind not in kinds:
                    continue
                yield (
                    n,
                    resource,
                    (
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.kind,
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        _proto_attributes(s.attributes, keys),
                        s.status.code,
                    ),
                )


def _proto_attributes(attributes: Any, keys: frozenset[str]) -> dict[str, Any]:
    return {kv.key: _proto_value(kv.value) for kv in attributes if kv.key in keys}


def _proto_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value"):
        return None  # no contract field takes one
    return getattr(v, which)


# --- otlp_json -------------------------------------------------------------------------------


def _json_resources(
    value: bytes, kinds: frozenset[int], keys: frozenset[str] = _READ
) -> Iterator[tuple[int, dict[str, Any], _Span]]:
    """OTLP's JSON encoding: camelCase keys, ids in hex, 64-bit integers often as strings."""
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise _NotTraces(
            Reason.INVALID_JSON, f"not an OTLP trace message (JSON): {e.msg}"
        ) from None
    if (
        type(obj) is not dict
        or not obj.get("resourceSpans")
        or type(obj["resourceSpans"]) is not list
    ):
        raise _NotTraces(Reason.NOT_AN_OBJECT, "not an OTLP trace message: no resourceSpans array")
    n = 0
    for rs in obj["resourceSpans"]:
        rs = _dict(rs)
        resource = _json_attributes(_dict(rs.get("resource")).get("attributes"), keys)
        for ss in _list(rs.get("scopeSpans")):
            for s in _list(_dict(ss).get("spans")):
                if type(s) is not dict:
                    continue
                n += 1
                kind = _int(s.get("kind"))
                if kind not in kinds:
                    continue
                yield (
                    n,
                    resource,
                    (
                        _hex_id(s.get("traceId")),
                        _hex_id(s.get("spanId")),
                        kind,
                        _int(s.get("startTimeUnixNano")),
                        _int(s.get("endTimeUnixNano")),
                        _json_attributes(s.get("attributes"), keys),
                        _int(_dict(s.get("status")).get("code")),
                    ),
                )


def _dict(v: Any) -> dict[str, Any]:
    return v if type(v) is dict else {}


def _list(v: Any) -> list[Any]:
    return v if type(v) is list else []


def _int(v: Any) -> int:
    """A JSON integer, or a decimal string of one (OTLP writes 64-bit integers as strings)."""
    if type(v) is int:
        return v
    if type(v) is str and v.lstrip("-").isdigit():
        return int(v)
    if type(v) is str:  # protobuf's generic JSON mapping names enum values
        return _ENUM_NAMES.get(v, 0)
    return 0


_ENUM_NAMES = {
    **{f"SPAN_KIND_{k.upper()}": n for k, n in SPAN_KINDS.items()},
    "STATUS_CODE_OK": 1,
    "STATUS_CODE_ERROR": _STATUS_ERROR,
}


def _hex_id(v: Any) -> str:
    if type(v) is not str:
        return ""
    try:
        bytes.fromhex(v)
    except ValueError:
        try:  # protobuf's generic JSON mapping writes bytes as base64
            return base64.b64decode(v, validate=True).hex()
        except ValueError:
            return ""
    return v.lower()


def _json_attributes(v: Any, keys: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in _list(v):
        if type(kv) is not dict or kv.get("key") not in keys:
            continue
        val = kv.get("value")
        if type(val) is not dict or len(val) != 1:
            continue
        ((kind, x),) = val.items()
        if kind == "intValue":
            out[kv["key"]] = _int(x) if type(x) is str else x if type(x) is int else None
        elif kind in ("stringValue", "boolValue", "doubleValue"):
            out[kv["key"]] = x
    return out
