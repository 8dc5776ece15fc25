"""The read task's Python work alone, no Spark, no broker: parse and summarise, µs per record.

    .venv/bin/python benchmarks/bench_read_task.py [--records 100000] [--rounds 7]

What one read task of `tidegauge job` does with its records once fetched
(jobs/summary/read_task.py):
parse them in chunks of `CHUNK` (jobs/parse/parser.py) and summarise the parsed rows per service and
pane (jobs/summary/summarise.py, de-duplication on, the default 10 s window). Two kinds of traffic
from the project's generator: "offered" (what `benchmarks/offered_load.py` sends: epoch-ms times, no
malformed records) and "generator" (its defaults: 10 % ISO-8601 times, plus 1 % malformed
records of every kind). Prints the best and median of `--rounds` per step. Uses only functions
that older commits have too, so the same script measures before and after.

A third row, "nginx log", is the offered traffic written as nginx's JSON access log lines
(README's `log_format`) and parsed with `--format access-log` and the README's field map
(tidegauge/core/field_map.py): the price of reading logs as they are. Two more, "otlp_proto"
and "otlp_json", are the same requests as OpenTelemetry server spans, 100 to an
`ExportTraceServiceRequest` as the Collector batches them, parsed with `--format otlp_*`
(tidegauge/core/otlp.py); their figures are per span. Left out where the code has no such
format.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from jobs.parse.parser import parse_batches  # noqa: E402
from jobs.source.kafka_source import ARROW_SCHEMA  # noqa: E402
from jobs.source.offset_log import BatchClock  # noqa: E402
from jobs.summary.read_task import CHUNK, _summary  # noqa: E402
from jobs.summary.settings import ExecutorConfig  # noqa: E402
from tidegauge.core.windows import WindowSpec  # noqa: E402
from tidegauge.traffic.config import GeneratorConfig  # noqa: E402
from tidegauge.traffic.generator import generate  # noqa: E402

T0 = 1_795_341_600_000


def chunks(records: int, iso: float, malformed: float) -> list[pa.RecordBatch]:
    cfg = GeneratorConfig(
        seed=7,
        rate=10_000.0,
        count=records,
        pace="fast",
        start_time_ms=T0,
        iso_fraction=iso,
        malformed_fraction=malformed,
    )
    return raw_chunks([r.value for r in generate(cfg)][:records], T0)


def raw_chunks(values: list[bytes], t0: int) -> list[pa.RecordBatch]:
    """Record values as the source's read hands them to the parser, `CHUNK` at a time.

    One partition from offset 0, a broker timestamp 1 ms apart from `t0` on.
    """
    out = []
    for at in range(0, len(values), CHUNK):
        part = values[at : at + CHUNK]
        n = len(part)
        out.append(
            pa.RecordBatch.from_pydict(
                {
                    "partition": [0] * n,
                    "offset": list(range(at, at + n)),
                    "timestamp": [(t0 + at + i) * 1000 for i in range(n)],
                    "key": [None] * n,
                    "value": part,
                },
                schema=ARROW_SCHEMA,
            )
        )
    return out


def _parse_all(raw: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    return list(parse_batches(iter(raw)))


def nginx_lines(values: list[bytes]) -> list[bytes]:
    """The contract's events as nginx's JSON access log lines of the same requests."""
    out = []
    for v in values:
        e = json.loads(v)
        if e.get("heartbeat"):
            continue  # access logs have no heartbeats
        line = {
            "msec": f"{e['event_time'] / 1000:.3f}",
            "host": e["service"],
            "request_time": f"{e.get('latency_ms', 0) / 1000:.3f}",
            "status": e.get("status", 200),
            "remote_user": e.get("user_id", ""),
            "request_id": e["event_id"],
            "uri": "/api/items",
        }
        text = json.dumps(line, separators=(",", ":"))
        # nginx writes $msec and $request_time unquoted: numbers
        text = text.replace(f'"{line["msec"]}"', line["msec"])
        out.append(text.replace(f'"{line["request_time"]}"', line["request_time"]).encode())
    return out


def otlp_messages(values: list[bytes], encoding: str, per_message: int = 100) -> list[bytes]:
    """The contract's events as OTLP server spans, `per_message` to a message, by service."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    events = [e for e in map(json.loads, values) if not e.get("heartbeat")]
    out = []
    for at in range(0, len(events), per_message):
        request = ExportTraceServiceRequest()
        by_service: dict[str, Any] = {}
        for e in events[at : at + per_message]:
            rs = by_service.get(e["service"])
            if rs is None:
                rs = by_service[e["service"]] = request.resource_spans.add()
                kv = rs.resource.attributes.add()
                kv.key, kv.value.string_value = "service.name", e["service"]
                rs.scope_spans.add()
            span = rs.scope_spans[0].spans.add()
            digest = hashlib.blake2b(e["event_id"].encode(), digest_size=24).digest()
            span.trace_id, span.span_id = digest[:16], digest[16:]
            span.kind = 2  # server
            span.name = "GET /api/items/{id}"
            span.start_time_unix_nano = e["event_time"] * 1_000_000
            span.end_time_unix_nano = span.start_time_unix_nano + int(e["latency_ms"] * 1e6)
            for key, value in (("http.response.status_code", e["status"]),):
                kv = span.attributes.add()
                kv.key, kv.value.int_value = key, value
            for key, text in (("http.route", "/api/items/{id}"), ("enduser.id", e.get("user_id"))):
                if text:
                    kv = span.attributes.add()
                    kv.key, kv.value.string_value = key, text
        if encoding == "proto":
            out.append(request.SerializeToString())
        else:
            obj = MessageToDict(request, use_integers_for_enums=True)
            for rs_obj in obj["resourceSpans"]:
                for sp in rs_obj["scopeSpans"][0]["spans"]:
                    sp["traceId"] = base64.b64decode(sp["traceId"]).hex()
                    sp["spanId"] = base64.b64decode(sp["spanId"]).hex()
            out.append(json.dumps(obj).encode())
    return out


def timed(step: Callable[[], object], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        step()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print(describe(["pyarrow", "orjson"]))
    cfg = ExecutorConfig((WindowSpec.tumbling(10_000),))
    clock = BatchClock(1, T0, T0 + 60_000)
    print(f"{args.records:,} records, chunks of {CHUNK:,}, best / median of {args.rounds}")
    print(f"{'traffic':<10} {'parse µs/record':>18} {'summarise µs/record':>22}")
    for name, iso, malformed in (("offered", 0.0, 0.0), ("generator", 0.1, 0.01)):
        raw = chunks(args.records, iso, malformed)
        n = sum(b.num_rows for b in raw)
        parsed = list(parse_batches(iter(raw)))
        p = timed(partial(_parse_all, raw), args.rounds)
        s = timed(partial(_summary, parsed, clock, cfg), args.rounds)
        fmt = "{:.2f} / {:.2f}"
        print(
            f"{name:<10} {fmt.format(min(p) / n * 1e6, statistics.median(p) / n * 1e6):>18}"
            f" {fmt.format(min(s) / n * 1e6, statistics.median(s) / n * 1e6):>22}"
        )
        if name != "offered":
            continue
        try:
            from jobs.parse.parser import make_parser
            from tidegauge.core.field_map import NGINX_FIELDS
            from tidegauge.core.formats import RecordFormat
        except ImportError:
            continue
        values = [v for b in raw for v in b.column("value").to_pylist()]
        for label, record_format, records in (
            ("nginx log", RecordFormat.parse("access-log", NGINX_FIELDS), nginx_lines(values)),
            ("otlp_proto", RecordFormat.parse("otlp_proto"), otlp_messages(values, "proto")),
            ("otlp_json", RecordFormat.parse("otlp_json"), otlp_messages(values, "json")),
        ):
            parse_as = make_parser(record_format=record_format.to_json())
            encoded = raw_chunks(records, T0)
            parsed = list(parse_as(iter(encoded)))
            n = sum(b.num_rows for b in parsed)  # events: a message holds many
            assert all(set(b.column("kind").to_pylist()) == {"event"} for b in parsed)
            p = timed(lambda: list(parse_as(iter(encoded))), args.rounds)  # noqa: B023
            s = timed(partial(_summary, parsed, clock, cfg), args.rounds)
            print(
                f"{label:<10} {fmt.format(min(p) / n * 1e6, statistics.median(p) / n * 1e6):>18}"
                f" {fmt.format(min(s) / n * 1e6, statistics.median(s) / n * 1e6):>22}"
            )


if __name__ == "__main__":
    main()
