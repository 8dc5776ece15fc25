"""How the generator writes record values: one encoder for every record it makes.

Events are written in the contract's canonical form, byte for byte what
`tidegauge.core.events.encode_event` writes (tests/unit/tidegauge/traffic/test_generator.py holds
them to that), but without a dict and a JSON encoder per record: this is the generator's hot path.
Heartbeats and control records are rare and go through the general encoders.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Iterable
from typing import Any, NamedTuple

from tidegauge.core.durations import to_iso
from tidegauge.core.events import Heartbeat, encode_heartbeat

__all__ = [
    "REGIONS",
    "ROUTES",
    "VERSIONS",
    "SpanAttributes",
    "ValueEncoder",
    "dumps",
    "span_attributes",
]

#: The routes of every generated service, and their shares of its requests (OTLP spans).
ROUTES = (
    ("/api/items/{id}", "GET", 0.34),
    ("/api/search", "GET", 0.22),
    ("/api/cart", "POST", 0.16),
    ("/", "GET", 0.12),
    ("/api/login", "POST", 0.08),
    ("/api/checkout", "POST", 0.05),
    ("/health", "GET", 0.03),
)
#: Each generated service runs in one of these (by its name).
REGIONS = ("eu-west-1", "us-east-1", "ap-southeast-2")
#: Every generated service is mid-rollout: the stable version and a canary, by share of requests.
VERSIONS = (("2.3.1", 0.9), ("2.4.0", 0.1))
_ROUTE_EDGES = [sum(w for _, _, w in ROUTES[: i + 1]) for i in range(len(ROUTES))]


class SpanAttributes(NamedTuple):
    """What a generated span says besides the contract's fields (its dimensions' values)."""

    route: str
    method: str
    region: str
    version: str

    def as_dimensions(self) -> dict[str, str]:
        """{dimension: value} under the names `--dimension` gives them."""
        return {
            "route": self.route,
            "method": self.method,
            "region": self.region,
            "version": self.version,
        }


def span_attributes(event_id: str, service: str) -> SpanAttributes:
    """Route, method, region and version of a generated request, fixed by its id and service.

    A hash, not the run's random streams: turning spans on changes no other field of a seed.
    """
    u = zlib.crc32(event_id.encode()) / 2**32
    i = next((k for k, edge in enumerate(_ROUTE_EDGES) if u < edge), len(ROUTES) - 1)
    route, method, _ = ROUTES[i]
    # a hash of its own, so the canary's requests spread over the routes as the others' do
    v = int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=4).digest()) / 2**32
    version = VERSIONS[0][0] if v < VERSIONS[0][1] else VERSIONS[1][0]
    region = REGIONS[zlib.crc32(service.encode()) % len(REGIONS)]
    return SpanAttributes(route, method, region, version)


def _otlp_json(request: Any) -> bytes:
    """OTLP's JSON encoding: protobuf's JSON mapping, enums as integers, ids in hex."""
    from google.protobuf.json_format import MessageToDict

    message = MessageToDict(request, use_integers_for_enums=True)
    for rs in message.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for k in ("traceId", "spanId"):
                    span[k] = base64.b64decode(span[k]).hex()
    return json.dumps(message, separators=(",", ":")).encode()


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes, as every generated value is encoded."""
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


class ValueEncoder:
    """Record values of one run; service names are JSON-encoded once, up front."""

    def __init__(
        self, services: Iterable[str], source: str, record_format: str = "tidegauge"
    ) -> None:
        self._service_json = {name: json.dumps(name) for name in services}
        self._source = source
        self._access_log = record_format == "access-log"
        self._otlp = record_format if record_format.startswith("otlp") else None

    def event(
        self,
        event_id: str,
        event_time: int,
        service: str,
        user_id: str | None,
        latency_ms: float,
        status: int,
        sent_time: int,
        iso: bool = False,
    ) -> bytes:
        """An event with every field present (the generator always sends them all).

        `event_id` and `user_id` are generator-made ASCII ids, written without escaping;
        `iso` writes both times as ISO-8601 strings instead of epoch ms. In the access-log
        format the same request is nginx's JSON access log line (`access_log_line`).
        """
        if self._access_log:
            return self.access_log_line(event_id, event_time, service, user_id, latency_ms, status)
        if self._otlp is not None:
            return self.otlp_message(event_id, event_time, service, user_id, latency_ms, status)
        if iso:
            et: object = f'"{to_iso(event_time)}"'
            st: object = f'"{to_iso(sent_time)}"'
        else:
            et, st = event_time, sent_time
        user = "" if user_id is None else f',"user_id":"{user_id}"'
        return (
            f'{{"event_id":"{event_id}","event_time":{et},"service":{self._service_json[service]}'
            f'{user},"latency_ms":{latency_ms!r},"status":{status},"sent_time":{st}}}'
        ).encode()

    def access_log_line(
        self,
        event_id: str,
        event_time: int,
        service: str,
        user_id: str | None,
        latency_ms: float,
        status: int,
    ) -> bytes:
        """The request as nginx logs it with the README's `log_format tidegauge`.

        `$msec` is epoch seconds with milliseconds and `$request_time` seconds with
        milliseconds, both unquoted; `$remote_user` is "" without a user. The event time
        comes back exactly; the latency at nginx's resolution (a millisecond).
        """
        user = "" if user_id is None else user_id
        return (
            f'{{"msec":{event_time // 1000}.{event_time % 1000:03d},'
            f'"host":{self._service_json[service]},"request_time":{latency_ms / 1000:.3f},'
            f'"status":{status},"remote_user":"{user}","request_id":"{event_id}","uri":"/"}}'
        ).encode()

    def otlp_message(
        self,
        event_id: str,
        event_time: int,
        service: str,
        user_id: str | None,
        latency_ms: float,
        status: int,
    ) -> bytes:
        """The request as one server span in one OTLP trace message (`otlp_proto`/`otlp_json`).

        As the OpenTelemetry Collector's Kafka exporter writes it (tidegauge/core/otlp.py reads
        it): the resource's `service.name`, `service.version` and `cloud.region`, the span's
        `http.route`,
        `http.request.method`, `http.response.status_code` and `enduser.id`; the ids derived
        from `event_id`, so a repeated event is the same span. Route, method, region, version come
        from `span_attributes`: fixed by the event id and service, not drawn from the run's
        random streams, so the other fields are what the contract's format would carry.
        """
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

        def kv(key: str, value: str | int) -> KeyValue:
            if isinstance(value, int):
                return KeyValue(key=key, value=AnyValue(int_value=value))
            return KeyValue(key=key, value=AnyValue(string_value=value))

        route, method, region, version = span_attributes(event_id, service)
        digest = hashlib.blake2b(event_id.encode(), digest_size=24).digest()
        start = event_time * 1_000_000
        attrs = [
            kv("http.route", route),
            kv("http.request.method", method),
            kv("http.response.status_code", status),
        ]
        if user_id is not None:
            attrs.append(kv("enduser.id", user_id))
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.extend(
            [
                kv("service.name", service),
                kv("service.version", version),
                kv("cloud.region", region),
            ]
        )
        span = rs.scope_spans.add().spans.add()
        span.trace_id, span.span_id = digest[:16], digest[16:]
        span.name = f"{method} {route}"
        span.kind = 2  # SPAN_KIND_SERVER
        span.start_time_unix_nano = start
        span.end_time_unix_nano = start + round(latency_ms * 1_000_000)
        span.attributes.extend(attrs)
        if status >= 500:
            span.status.code = 2  # STATUS_CODE_ERROR
        if self._otlp == "otlp_proto":
            return request.SerializeToString()
        return _otlp_json(request)

    def heartbeat(self, at: int, partition: int) -> bytes:
        """A heartbeat of this run's source for one partition."""
        return encode_heartbeat(Heartbeat(event_time=at, partition=partition, source=self._source))

    def control(self, command: dict[str, Any]) -> bytes:
        """A control record's value."""
        return dumps(command)
