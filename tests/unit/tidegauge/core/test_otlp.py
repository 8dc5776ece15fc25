"""OTLP trace messages (tidegauge/core/otlp.py) made by the OpenTelemetry Python SDK itself.

A real tracer with a real resource records spans of every kind; the SDK's own OTLP encoder
(`opentelemetry-exporter-otlp-proto-common`) makes the `ExportTraceServiceRequest`, written as
protobuf (the Collector's Kafka exporter's `otlp_proto`) and as OTLP JSON (`otlp_json`: hex ids,
integer enums). Each server and consumer span must come back as the event the SDK's finished
span says it is; anything else a record can hold is one dead letter or nothing, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tests.otel import otlp_json, otlp_proto
from tests.unit.fixtures import FUZZ, json_values
from tidegauge.core.events import Reason, Rejected, parse_values
from tidegauge.core.otlp import decoder

T_NS = 1_764_201_600_123_456_789  # 2025-11-27T00:00:00.123456789Z


def _spans(service: str, n: int, *, seed: int = 0) -> list[ReadableSpan]:
    """`n` spans of one service through a real SDK tracer, kinds and outcomes mixed."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    kinds = [SpanKind.SERVER, SpanKind.CLIENT, SpanKind.CONSUMER, SpanKind.INTERNAL]
    for i in range(n):
        start = T_NS + (seed * 1_000 + i) * 7_919_000
        attrs: dict[str, Any] = {"http.route": f"/items/{i % 3}"}
        if i % 4 == 0:
            attrs["http.response.status_code"] = 503 if i % 8 == 0 else 200
        if i % 3 == 0:
            attrs["enduser.id"] = f"user-{i % 5}"
        span = tracer.start_span(f"op {i}", kind=kinds[i % 4], attributes=attrs, start_time=start)
        if i % 5 == 1:
            span.set_status(Status(StatusCode.ERROR, "boom"))
        span.end(end_time=start + 1_000_000 * (i % 40) + 123_456)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _truth(spans: list[ReadableSpan], kinds: tuple[SpanKind, ...]) -> list[Any]:
    """What the contract's own record of each chosen span gives: the ground truth."""
    out = []
    for s in spans:
        if s.kind not in kinds:
            continue
        assert s.context is not None and s.start_time is not None and s.end_time is not None
        attrs = dict(s.attributes or {})
        status = attrs.get("http.response.status_code")
        if status is None and s.status.status_code == StatusCode.ERROR:
            status = 500
        record = {
            "event_id": f"{s.context.trace_id:032x}{s.context.span_id:016x}",
            "event_time": s.start_time // 1_000_000,
            "service": s.resource.attributes["service.name"],
            "latency_ms": (s.end_time - s.start_time) / 1e6,
            "status": status,
            "user_id": attrs.get("enduser.id"),
        }
        got = parse_values(json.dumps({k: v for k, v in record.items() if v is not None}).encode())
        assert isinstance(got, list)
        out.append(got)
    return out


@pytest.fixture(scope="module")
def spans() -> Iterator[list[ReadableSpan]]:
    yield _spans("checkout", 40) + _spans("search", 17, seed=1)


SERVER_AND_CONSUMER = (SpanKind.SERVER, SpanKind.CONSUMER)


def test_the_sdks_protobuf_message_gives_one_event_per_server_and_consumer_span(
    spans: list[ReadableSpan],
) -> None:
    value = otlp_proto(spans)
    got = decoder("otlp_proto")(value, 0, 0)
    want = _truth(spans, SERVER_AND_CONSUMER)
    assert len(want) == 29 and got == want  # in the message's order
    assert {v[2] for v in got} == {"checkout", "search"}
    assert any(v[6] == 500 for v in got) and any(v[6] == 503 for v in got)


def test_the_same_spans_in_otlp_json_give_the_same_events(spans: list[ReadableSpan]) -> None:
    assert decoder("otlp_json")(otlp_json(spans), 0, 0) == _truth(spans, SERVER_AND_CONSUMER)
    # protobuf's generic JSON mapping (base64 ids, enum names) is read too
    generic = json.dumps(MessageToDict(encode_spans(spans))).encode()
    assert decoder("otlp_json")(generic, 0, 0) == _truth(spans, SERVER_AND_CONSUMER)


def test_span_kinds_choose_which_spans_are_requests(spans: list[ReadableSpan]) -> None:
    value = otlp_proto(spans)
    client = decoder("otlp_proto", ("client",))(value, 0, 0)
    assert client == _truth(spans, (SpanKind.CLIENT,))
    everything = decoder("otlp_proto", ("internal", "server", "client", "consumer"))(value, 0, 0)
    assert len(everything) == len(spans)


def test_a_span_without_a_service_is_a_dead_letter_naming_the_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"host.name": "h1"}))  # no service.name
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("t").start_span("x", kind=SpanKind.SERVER, start_time=T_NS).end(T_NS + 5)
    (span,) = exporter.get_finished_spans()
    assert span.context is not None
    (got,) = decoder("otlp_proto")(encode_spans([span]).SerializeToString(), 0, 0)
    assert isinstance(got, Rejected) and got.reason == Reason.MISSING_FIELD
    assert f"{span.context.span_id:016x}" in got.detail and "service.name" in got.detail


def test_a_span_that_ends_before_it_starts_is_a_dead_letter(spans: list[ReadableSpan]) -> None:
    message = encode_spans(spans[:1])
    message.resource_spans[0].scope_spans[0].spans[0].end_time_unix_nano = T_NS - 1
    message.resource_spans[0].scope_spans[0].spans[0].kind = 2
    (got,) = decoder("otlp_proto")(message.SerializeToString(), 0, 0)
    assert isinstance(got, Rejected) and "ends before it starts" in got.detail


@pytest.mark.parametrize(
    ("encoding", "value", "reason"),
    [
        ("otlp_proto", b"", Reason.EMPTY),
        ("otlp_proto", b"\xff\xff\xff\xff", Reason.INVALID_JSON),
        ("otlp_proto", b'{"resourceSpans": []}', Reason.INVALID_JSON),
        ("otlp_json", b"\x0a\x02\x0a\x00", Reason.INVALID_JSON),
        ("otlp_json", b"[1, 2]", Reason.NOT_AN_OBJECT),
        ("otlp_json", b'{"resourceLogs": []}', Reason.NOT_AN_OBJECT),
    ],
)
def test_a_record_that_is_not_a_trace_message_is_one_dead_letter(
    encoding: str, value: bytes, reason: Reason
) -> None:
    (got,) = decoder(encoding)(value, 0, 0)
    assert isinstance(got, Rejected) and got.reason == reason, got


@FUZZ
@given(st.binary(max_size=300), json_values)
def test_any_record_is_events_dead_letters_or_nothing_never_a_crash(
    noise: bytes, value: Any
) -> None:
    for encoding, raw in (
        ("otlp_proto", noise),
        ("otlp_json", noise),
        ("otlp_json", json.dumps({"resourceSpans": [value]}).encode()),
        ("otlp_json", json.dumps(value).encode()),
    ):
        for got in decoder(encoding)(raw, 0, 0):
            assert isinstance(got, list | Rejected)
            if isinstance(got, list):
                assert isinstance(got[2], str) and got[2]
