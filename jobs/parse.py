"""Raw Kafka records -> typed rows, judged by the event contract (tidegauge/core/events.py).

Runs on executors inside the event source's read task (jobs/event_source.py), one Arrow chunk of
one Kafka partition's records at a time (`mapInArrow`-shaped: batches in, batches out). Nothing
is dropped here: every record comes out as exactly one row whose `kind` says what it is (event,
heartbeat or dead), so the stateful step downstream can count each kind and the dead letters
reach Redis with their reason and raw bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from statistics import median_low
from typing import Any

import pyarrow as pa

from tidegauge.core.events import (
    BUILT_IN_FIELDS,
    DEAD_LETTER_RAW_CAP,
    EventField,
    Heartbeat,
    event_fields,
    parse_values,
)
from tidegauge.core.plugins import ensure_plugins
from tidegauge.core.registry import metrics

__all__ = [
    "PARSED_SCHEMA",
    "KIND_DEAD",
    "KIND_EVENT",
    "KIND_HEARTBEAT",
    "clock_offsets",
    "make_parser",
    "parse_batches",
    "parsed_schema",
]

KIND_EVENT = "event"
KIND_HEARTBEAT = "heartbeat"
KIND_DEAD = "dead"

# Columns every parsed row has before the event fields, and after them (dead letters, clocks).
_BASE = [
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("kafka_ms", pa.int64()),
    ("kind", pa.string()),
    ("event_time", pa.timestamp("us", tz="UTC")),
]
_TAIL = [
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("raw", pa.binary()),
    ("raw_size", pa.int32()),
    ("clock_offset_ms", pa.int64()),
]
#: Arrow type of each kind of event field (tidegauge/core/events.py); times are epoch ms.
_FIELD_TYPES = {"string": pa.string(), "time": pa.int64(), "float": pa.float64(), "int": pa.int32()}
_DDL = {
    pa.int32(): "int",
    pa.int64(): "long",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.timestamp("us", tz="UTC"): "timestamp",
}


def parsed_schema(fields: Sequence[EventField] | None = None) -> tuple[str, pa.Schema]:
    """(Spark DDL, Arrow schema) of the parsed rows for these event fields (default: all).

    Derived from the event contract: one column per field (`EventField.column`), between the
    record's position and kind and the dead-letter columns. `event_ms` is the event time as
    epoch ms, so Python code downstream never has to guess a timestamp unit; `event_time` is
    the same instant as a Spark timestamp for the watermark.
    """
    declared = event_fields() if fields is None else fields
    columns = [*_BASE, *((f.column, _FIELD_TYPES[f.type]) for f in declared), *_TAIL]
    ddl = ", ".join(f"{name} {_DDL[t]}" for name, t in columns)
    return ddl, pa.schema(columns)


#: Spark DDL and Arrow schema of the parsed rows of the built-in contract.
PARSED_SCHEMA, _ARROW = parsed_schema(BUILT_IN_FIELDS)


def clock_offsets(
    devices: list[str | None], sent_ms: list[int | None], receive_ms: list[int | None]
) -> list[int | None]:
    """Each event's estimated device clock offset (ms): what to add to its device times.

    An event that carries its device's send time, received at the broker's `receive_ms`, shows
    the offset `receive - sent` (device clock behind: positive), plus the network delay. A
    device's offset is taken as the median (low) of its events' offsets in the batch, which
    is robust to a few slow deliveries; an event without a device uses its own. None where
    the event has no send time or no receive time. Pure; order-preserving.
    """
    own: list[int | None] = [
        None if s is None or r is None else r - s for s, r in zip(sent_ms, receive_ms, strict=True)
    ]
    per_device: dict[str, list[int]] = defaultdict(list)
    for d, o in zip(devices, own, strict=True):
        if d is not None and o is not None:
            per_device[d].append(o)
    estimate = {d: median_low(v) for d, v in per_device.items()}
    return [o if o is None or d is None else estimate[d] for d, o in zip(devices, own, strict=True)]


def _parse_batch(
    batch: pa.RecordBatch,
    correct_clock_skew: bool = False,
    schema: pa.Schema = _ARROW,
    extra_columns: Mapping[str, str] | None = None,
) -> pa.RecordBatch:
    n = batch.num_rows
    values = batch.column("value").to_pylist()
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds
    cols: dict[str, list[Any]] = {name: [None] * n for name in schema.names}
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
    extras = [cols[c] for c in extra_columns.values()] if extra_columns else []  # field order
    for i, value in enumerate(values):
        got = parse_values(value)
        if isinstance(got, list):  # values in check order (`event_fields()`)
            kind[i] = KIND_EVENT
            (event_id[i], event_ms[i], service[i], user_id[i]) = got[:4]
            (sent[i], latency[i], status[i]) = got[4:7]
            if extras:
                for col, v in zip(extras, got[7:], strict=True):
                    col[i] = v
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
    if correct_clock_skew:
        # Device = user: the generator (and a typical client SDK) has one clock per user device.
        is_event = [k == KIND_EVENT for k in kind]
        offsets = clock_offsets(
            [u if e else None for u, e in zip(user_id, is_event, strict=True)],
            [t if e else None for t, e in zip(sent, is_event, strict=True)],
            [k if e else None for k, e in zip(cols["kafka_ms"], is_event, strict=True)],
        )
        cols["clock_offset_ms"] = offsets
        for i, off in enumerate(offsets):
            if off is not None and event_ms[i] is not None:
                event_ms[i] += off
                sent[i] += off
    cols["event_time"] = [None if m is None else m * 1000 for m in event_ms]
    arrays = [
        pa.array(cols[f.name], type=pa.int64()).cast(f.type)
        if f.name == "event_time"
        else pa.array(cols[f.name], type=f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` function: raw source batches in, parsed batches (PARSED_SCHEMA) out."""
    for batch in batches:
        if batch.num_rows:
            yield _parse_batch(batch)


def make_parser(
    correct_clock_skew: bool = False, plugins: Sequence[str] = ()
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The `mapInArrow` function for the contract now; fixes device clocks when asked.

    Its output schema is `parsed_schema()` of this process (the driver). `plugins` are the
    plugin modules the driver loaded: the executors load them too and check that they give
    the same fields (and metrics), so they parse exactly the columns the schema promises. With
    `correct_clock_skew`, device times are moved onto the broker's clock (`clock_offsets`)
    before anything looks at event time, watermark included. Each Arrow batch holds records of
    one Kafka partition (the source reads per partition, and the key, the user, picks the
    partition), so a device's offset is estimated from its own records of that batch,
    deterministically for a given offset range.
    """
    snapshot = event_fields()
    _, schema = parsed_schema(snapshot)
    extra = {f.name: f.column for f in snapshot[len(BUILT_IN_FIELDS) :]}
    if not correct_clock_skew and not extra:
        return parse_batches
    field_names = [f.name for f in snapshot]
    metric_names = [m.name for m in metrics()]
    names = tuple(plugins)

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ensure_plugins(names, metric_names, field_names)
        for batch in batches:
            if batch.num_rows:
                yield _parse_batch(batch, correct_clock_skew, schema, extra)

    return parse
