"""Raw Kafka records -> typed rows, judged by the event contract (tidegauge/events.py).

Runs on executors inside `mapInArrow`, one Arrow batch at a time. Nothing is dropped here: every
record comes out as exactly one row whose `kind` says what it is (event, heartbeat or dead), so
the stateful step downstream can count each kind and the dead letters reach Redis with their
reason and raw bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from tidegauge.events import DEAD_LETTER_RAW_CAP, Event, Heartbeat, parse_record

__all__ = ["PARSED_SCHEMA", "KIND_DEAD", "KIND_EVENT", "KIND_HEARTBEAT", "parse_batches"]

KIND_EVENT = "event"
KIND_HEARTBEAT = "heartbeat"
KIND_DEAD = "dead"

#: Spark DDL of the parsed rows. `event_ms` duplicates `event_time` as epoch ms so Python code
#: downstream never has to guess a timestamp unit.
PARSED_SCHEMA = (
    "partition int, offset long, kafka_ms long, kind string, event_time timestamp, "
    "event_ms long, service string, user_id string, event_id string, latency_ms double, "
    "status int, sent_ms long, reason string, detail string, raw binary, raw_size int"
)

_ARROW = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_ms", pa.int64()),
        ("kind", pa.string()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("event_ms", pa.int64()),
        ("service", pa.string()),
        ("user_id", pa.string()),
        ("event_id", pa.string()),
        ("latency_ms", pa.float64()),
        ("status", pa.int32()),
        ("sent_ms", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw", pa.binary()),
        ("raw_size", pa.int32()),
    ]
)


def _parse_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    n = batch.num_rows
    values = batch.column("value").to_pylist()
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds
    cols: dict[str, list[Any]] = {name: [None] * n for name in _ARROW.names}
    cols["partition"] = batch.column("partition").to_pylist()
    cols["offset"] = batch.column("offset").to_pylist()
    cols["kafka_ms"] = [None if t is None else t // 1000 for t in ts]
    kind, event_ms, service, user_id = (
        cols["kind"],
        cols["event_ms"],
        cols["service"],
        cols["user_id"],
    )
    event_id, latency, status, sent = (
        cols["event_id"],
        cols["latency_ms"],
        cols["status"],
        cols["sent_ms"],
    )
    reason, detail, raw, raw_size = cols["reason"], cols["detail"], cols["raw"], cols["raw_size"]
    for i, value in enumerate(values):
        got = parse_record(value)
        if isinstance(got, Event):
            kind[i] = KIND_EVENT
            event_ms[i] = got.event_time
            service[i] = got.service
            user_id[i] = got.user_id
            event_id[i] = got.event_id
            latency[i] = got.latency_ms
            status[i] = got.status
            sent[i] = got.sent_time
        elif isinstance(got, Heartbeat):
            kind[i] = KIND_HEARTBEAT
            event_ms[i] = got.event_time
        else:
            kind[i] = KIND_DEAD
            reason[i] = got.reason.value
            detail[i] = got.detail
            body = value or b""
            raw[i] = body[:DEAD_LETTER_RAW_CAP]
            raw_size[i] = len(body)
    cols["event_time"] = [None if m is None else m * 1000 for m in event_ms]
    arrays = [
        pa.array(cols[f.name], type=pa.int64()).cast(f.type)
        if f.name == "event_time"
        else pa.array(cols[f.name], type=f.type)
        for f in _ARROW
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW)


def parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` function: raw source batches in, parsed batches (PARSED_SCHEMA) out."""
    for batch in batches:
        if batch.num_rows:
            yield _parse_batch(batch)
