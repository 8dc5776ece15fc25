"""OpenTelemetry spans through the job: the SDK's own OTLP messages on the topic, as the
Collector's Kafka exporter writes them (one `ExportTraceServiceRequest` per record), in both
encodings.

Three services' spans are recorded by real SDK tracers over two minutes of event time; each
message holds a batch of them (server, client, consumer and internal spans mixed), one message
is sent twice (a retried export), one record is not a trace message and one holds only client
spans. Redis must then hold, per (10 s window, service), exactly the server and consumer spans
the SDK finished (counts, errors, distinct users; latency percentiles close to the spans'),
the retried message counted once, and the bad record as one dead letter.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from kafka import KafkaProducer
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tests.integration.helpers import tidegauge
from tests.otel import otlp_json, otlp_proto
from tidegauge.core.store import Keys, read_dead_counts, read_windows

T_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
KINDS = [SpanKind.SERVER, SpanKind.CLIENT, SpanKind.SERVER, SpanKind.CONSUMER, SpanKind.INTERNAL]


def _record_spans(seed: int) -> list[ReadableSpan]:
    """Spans of three services over two minutes from real SDK tracers."""
    rng = np.random.default_rng(seed)
    out: list[ReadableSpan] = []
    for service in ("checkout", "search", "payments"):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(
            resource=Resource.create({"service.name": service, "service.version": "1.4.2"})
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("load")
        for i in range(400):
            start = T_NS + int(rng.integers(0, 120_000_000_000))
            attrs: dict[str, Any] = {"http.route": "/items/{id}"}
            if rng.random() < 0.7:
                attrs["http.response.status_code"] = int(rng.choice([200, 201, 404, 500, 503]))
            if rng.random() < 0.6:
                attrs["enduser.id"] = f"u{int(rng.integers(0, 40))}"
            span = tracer.start_span(
                f"GET {i}", kind=KINDS[i % len(KINDS)], attributes=attrs, start_time=start
            )
            if rng.random() < 0.1:
                span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=start + int(rng.lognormal(np.log(20e6), 0.6)))
        provider.shutdown()
        out += exporter.get_finished_spans()
    return out


def _truth(spans: list[ReadableSpan]) -> dict[tuple[int, str], dict[str, Any]]:
    out: dict[tuple[int, str], dict[str, Any]] = defaultdict(
        lambda: {"count": 0, "errors": 0, "users": set(), "latency": []}
    )
    for s in spans:
        if s.kind not in (SpanKind.SERVER, SpanKind.CONSUMER):
            continue
        assert s.start_time is not None and s.end_time is not None
        ms = s.start_time // 1_000_000
        cell = out[(ms - ms % 10_000, str(s.resource.attributes["service.name"]))]
        attrs = dict(s.attributes or {})
        status = attrs.get("http.response.status_code")
        if status is None and s.status.status_code == StatusCode.ERROR:
            status = 500
        cell["count"] += 1
        cell["errors"] += status is not None and int(str(status)) >= 500
        if "enduser.id" in attrs:
            cell["users"].add(attrs["enduser.id"])
        cell["latency"].append((s.end_time - s.start_time) / 1e6)
    return dict(out)


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_sdk_spans_through_the_job_equal_the_finished_spans(
    encoding: str, broker, job, redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    spans = _record_spans(seed=5)
    spans.sort(key=lambda s: s.start_time or 0)  # a collector batches spans as they end, roughly
    encode = otlp_proto if encoding == "otlp_proto" else otlp_json
    messages = [encode(spans[i : i + 50]) for i in range(0, len(spans), 50)]
    clients_only = encode([s for s in spans if s.kind == SpanKind.CLIENT][:5])
    topic = f"spans-{encoding}"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=5)
    for m in [*messages, messages[3], b"not a trace message", clients_only]:
        producer.send(topic, m)  # messages[3] again: an export the collector retried
    producer.flush()
    producer.close()

    job(
        topic,
        redis_settings.url,
        tmp_path / "checkpoint",
        format=encoding,
        window="10s",
        allowed_lateness="1h",  # every span counts: the batches arrive in any order
    )
    truth = _truth(spans)
    assert sum(c["count"] for c in truth.values()) == 3 * 240  # 3 of every 5 spans
    r = redis.Redis.from_url(redis_settings.url)
    rows = {(w.window_start, w.service): w for w in read_windows(r, Keys()) if w.service != "*"}
    assert set(rows) == set(truth)
    for key, want in truth.items():
        got = rows[key]
        assert (got.count, got.errors, got.late) == (want["count"], want["errors"], 0), key
        assert got.distinct_users == len(want["users"]), key  # a few dozen: exact
        lat = np.array(want["latency"])
        if len(lat) >= 20:
            assert got.p50 == pytest.approx(np.quantile(lat, 0.5), rel=0.1)
    # the retried export: each of its requests counted once, the second copy as a duplicate
    retried = [s for s in spans[150:200] if s.kind in (SpanKind.SERVER, SpanKind.CONSUMER)]
    assert sum(w.duplicates for w in rows.values()) == len(retried) > 0
    assert read_dead_counts(r, Keys()) == {"invalid_json": 1}
