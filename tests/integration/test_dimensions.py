"""Dimensions through the job: OpenTelemetry spans sliced by route, region and status class.

Three services' spans from real SDK tracers over two minutes of event time, with `http.route` on
the span (six routes of very different traffic), `cloud.region` on the resource and an HTTP status
on most spans; one export is sent twice. The job runs with `--dimension route --dimension region
--dimension status_class --dimension-values 3`. Redis must then hold, in each dimension's store,
per (10 s window, service or `*`, value), exactly what the spans say: counts, errors, distinct
users and percentiles of the spans with that value, the three busiest routes of each service (and
of all services) under their own name and the rest under `(other)`, the repeated export's spans
as duplicates of their slices, and the services' own windows exactly as without dimensions.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
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
from opentelemetry.trace import SpanKind

from tests.integration.helpers import tidegauge
from tests.otel import otlp_proto
from tidegauge.core.dimensions import OTHER_VALUE, SEP
from tidegauge.core.store import Keys, read_windows

T_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
ROUTES = ["/cart", "/items/{id}", "/search", "/login", "/health", "/admin"]
#: Route weights differ per service, so each service's top 3 differ from the others' and `*`'s.
WEIGHTS = {
    "checkout": [40, 25, 15, 10, 6, 4],
    "search": [5, 20, 45, 15, 10, 5],
    "payments": [30, 4, 6, 35, 15, 10],
}
REGIONS = {"checkout": "eu-west-1", "search": "us-east-1", "payments": "eu-west-1"}
TOP = 3


def _record_spans(seed: int) -> list[ReadableSpan]:
    rng = np.random.default_rng(seed)
    out: list[ReadableSpan] = []
    for service, weights in WEIGHTS.items():
        exporter = InMemorySpanExporter()
        provider = TracerProvider(
            resource=Resource.create({"service.name": service, "cloud.region": REGIONS[service]})
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("load")
        p = np.array(weights, float) / sum(weights)
        for i in range(500):
            start = T_NS + int(rng.integers(0, 120_000_000_000))
            attrs: dict[str, Any] = {"http.route": str(rng.choice(ROUTES, p=p))}
            if rng.random() < 0.8:
                attrs["http.response.status_code"] = int(rng.choice([200, 201, 404, 500, 503]))
            if rng.random() < 0.6:
                attrs["enduser.id"] = f"u{int(rng.integers(0, 40))}"
            span = tracer.start_span(
                f"GET {i}", kind=SpanKind.SERVER, attributes=attrs, start_time=start
            )
            span.end(end_time=start + int(rng.lognormal(np.log(20e6), 0.6)))
        provider.shutdown()
        out += exporter.get_finished_spans()
    return out


def _status(s: ReadableSpan) -> int | None:
    v = (s.attributes or {}).get("http.response.status_code")
    return None if v is None else int(str(v))


def _values(s: ReadableSpan) -> dict[str, str | None]:
    status = _status(s)
    return {
        "route": str((s.attributes or {})["http.route"]),
        "region": str(s.resource.attributes["cloud.region"]),
        "status_class": None if status is None else f"{status // 100}xx",
    }


def _top(counts: Counter[str]) -> set[str]:
    """The values with a slice of their own: the busiest, ties by name (every value counted)."""
    return {v for v, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]}


def _truth(spans: list[ReadableSpan], dim: str) -> dict[tuple[int, str], dict[str, Any]]:
    """(window start, `service SEP value`) -> count, errors, users, latencies."""
    weights: dict[str, Counter[str]] = defaultdict(Counter)
    for s in spans:
        value = _values(s)[dim]
        if value is not None:
            service = str(s.resource.attributes["service.name"])
            weights[service][value] += 1
            weights["*"][value] += 1
    kept = {service: _top(c) for service, c in weights.items()}
    out: dict[tuple[int, str], dict[str, Any]] = defaultdict(
        lambda: {"count": 0, "errors": 0, "users": set(), "latency": []}
    )
    for s in spans:
        value = _values(s)[dim]
        if value is None:
            continue
        assert s.start_time is not None and s.end_time is not None
        ms = s.start_time // 1_000_000
        for service in (str(s.resource.attributes["service.name"]), "*"):
            name = value if value in kept[service] else OTHER_VALUE
            cell = out[(ms - ms % 10_000, f"{service}{SEP}{name}")]
            cell["count"] += 1
            cell["errors"] += (_status(s) or 0) >= 500
            if "enduser.id" in (s.attributes or {}):
                cell["users"].add((s.attributes or {})["enduser.id"])
            cell["latency"].append((s.end_time - s.start_time) / 1e6)
    return dict(out)


def test_spans_sliced_by_route_region_and_status_class_equal_the_spans(
    broker, job, redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    spans = _record_spans(seed=11)
    spans.sort(key=lambda s: s.start_time or 0)
    messages = [otlp_proto(spans[i : i + 50]) for i in range(0, len(spans), 50)]
    topic = "spans-dimensions"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=5)
    for m in [*messages, messages[7]]:  # messages[7] again: an export the collector retried
        producer.send(topic, m)
    producer.flush()
    producer.close()

    job(
        topic,
        redis_settings.url,
        tmp_path / "checkpoint",
        format="otlp_proto",
        window="10s",
        allowed_lateness="1h",
        dimension=["route", "region", "status_class"],
        dimension_values=TOP,
    )
    r = redis.Redis.from_url(redis_settings.url)
    assert {m.decode() for m in r.smembers(Keys().dimensions)} == {
        "route",
        "region",
        "status_class",
    }
    services = {(w.window_start, w.service): w for w in read_windows(r, Keys())}
    retried = {s.context.span_id for s in spans[350:400]}
    for dim in ("route", "region", "status_class"):
        truth = _truth(spans, dim)
        rows = {(w.window_start, w.service): w for w in read_windows(r, Keys().by(dim))}
        assert set(rows) == set(truth), dim
        for key, want in truth.items():
            got = rows[key]
            assert (got.count, got.errors, got.late) == (want["count"], want["errors"], 0), key
            assert got.distinct_users == len(want["users"]), key
            lat = np.array(want["latency"])
            if len(lat) >= 20:
                assert got.p50 == pytest.approx(np.quantile(lat, 0.5), rel=0.1), key
        # the retried export's spans are duplicates in each of their slices, once per slice
        dups = sum(w.duplicates for (_, name), w in rows.items() if not name.startswith("*"))
        with_value = [s for s in spans[350:400] if _values(s)[dim] is not None]
        assert dups == len(with_value) > 0, dim
        assert len(retried) == 50
    # every span has a route: per window, a service's routes add up to the service
    route_rows = {(w.window_start, w.service): w for w in read_windows(r, Keys().by("route"))}
    for (start, service), w in services.items():
        routes = [
            x.count
            for (s, name), x in route_rows.items()
            if s == start and name.split(SEP)[0] == service
        ]
        assert sum(routes) == w.count, (start, service)
    # the services' own store has no slices, and its `*` counts each span once
    assert all(SEP not in name for _, name in services)
    assert sum(w.count for (_, name), w in services.items() if name == "*") == len(spans)

    # `query`: a service's routes window by window, and all services' routes ranked over the range
    prefix = ["--redis", redis_settings.url]
    got = json.loads(
        tidegauge(
            "query", "windows", "--by", "route", "--service", "checkout", "--json", *prefix
        ).stdout
    )
    truth = _truth(spans, "route")
    want = {
        (start, name.split(SEP)[1]): cell["count"]
        for (start, name), cell in truth.items()
        if name.startswith("checkout" + SEP)
    }
    assert {(g["window_start"], g["route"]): g["count"] for g in got} == want
    assert {g["service"] for g in got} == {"checkout"}
    since, until = str(T_NS // 1_000_000), str(T_NS // 1_000_000 + 130_000)
    top = json.loads(
        tidegauge(
            "query", "top", "--by", "route", "--from", since, "--to", until, "--json", *prefix
        ).stdout
    )
    totals: Counter[str] = Counter()
    for (_, name), cell in truth.items():
        if name.startswith("*" + SEP):
            totals[name.split(SEP)[1]] += cell["count"]
    assert [(t["route"], t["events"]) for t in top] == sorted(
        totals.items(), key=lambda kv: (-kv[1], kv[0])
    )
    errors = json.loads(
        tidegauge(
            "query",
            "top",
            "--by",
            "status_class",
            "--metric",
            "errors",
            "--from",
            since,
            "--to",
            until,
            "--json",
            *prefix,
        ).stdout
    )
    assert errors[0]["status_class"] == "5xx" and errors[0]["errors"] == errors[0]["events"]
    unknown = tidegauge("query", "top", "--by", "zone", *prefix, check=False)
    assert unknown.returncode == 1 and "stored: region, route, status_class" in unknown.stderr
