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
from collections.abc import Iterable
from typing import Any

from tidegauge.core.durations import to_iso
from tidegauge.core.events import Heartbeat, encode_heartbeat
from tidegauge.traffic.attributes import DEFAULT, Attributes

__all__ = ["ValueEncoder", "dumps"]


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
        self,
        services: Iterable[str],
        source: str,
        record_format: str = "tidegauge",
        attributes: Attributes = DEFAULT,
        with_attributes: bool = False,
    ) -> None:
        self._service_json = {name: json.dumps(name) for name in services}
        self._source = source
        self._access_log = record_format == "access-log"
        self._otlp = record_format if record_format.startswith("otlp") else None
        self.attributes = attributes
        # the contract's events carry the attributes too (`--attributes`)
        self._with_attributes = with_attributes

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
        extra = ""
        if self._with_attributes:
            extra = "," + self.attributes.of(event_id, service).json_members()
        return (
            f'{{"event_id":"{event_id}","event_time":{et},"service":{self._service_json[service]}'
            f'{user},"latency_ms":{latency_ms!r},"status":{status},"sent_time":{st}{extra}}}'
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
        from `event_id`, so a repeated event is the same span. Route, method, region and version
        come from `attributes.Attributes`: fixed by the event id and service, not drawn from the
        run's random streams, so the other fields are what the contract's format would carry.
        """
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

        def kv(key: str, value: str | int) -> KeyValue:
            if isinstance(value, int):
                return KeyValue(key=key, value=AnyValue(int_value=value))
            return KeyValue(key=key, value=AnyValue(string_value=value))

        route, method, region, version = self.attributes.of(event_id, service)
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
