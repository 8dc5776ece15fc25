"""Raw Kafka records -> typed rows, judged by the event contract (tidegauge/core/events.py).

Runs on executors inside the event source's read task (jobs/summary/read_task.py), one Arrow chunk
of one Kafka partition's records at a time (`mapInArrow`-shaped: batches in, batches out). Nothing
is dropped here: every record comes out as exactly one row whose `kind` says what it is (event,
heartbeat or dead), so the stateful step downstream can count each kind and the dead letters
reach Redis with their reason and raw bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from statistics import median_low
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import tidegauge.core.metrics  # noqa: F401  (registers the built-in metrics `make_parser` lists)
from jobs.parse.bulk import vouch
from tidegauge.core.events import (
    BUILT_IN_FIELDS,
    DEAD_LETTER_RAW_CAP,
    EventField,
    Heartbeat,
    Rejected,
    event_fields,
    parse_values,
)
from tidegauge.core.formats import Decoder, RecordFormat
from tidegauge.core.plugins import ensure_plugins
from tidegauge.core.registry import metrics

__all__ = [
    "PARSED_SCHEMA",
    "RecordKind",
    "clock_offsets",
    "make_parser",
    "parse_batches",
    "parsed_schema",
]


class RecordKind(StrEnum):
    """What a parsed row is: the `kind` column of `PARSED_SCHEMA`."""

    EVENT = "event"
    HEARTBEAT = "heartbeat"
    DEAD = "dead"


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
#: Chunks of fewer records are judged one by one: the Arrow path costs ~1 ms a chunk whatever its
#: size (a regex compiled, a reader set up, ~30 vectorised calls), ~200 records' worth.
BULK_FROM = 256

#: Columns only the records judged in Python fill (the vouched ones are events, never dead).
_SLOW_ONLY = ("kind", "reason", "detail", "raw", "raw_size")
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
    fields: Sequence[EventField] = BUILT_IN_FIELDS,
    bulk_from: int = BULK_FROM,
) -> pa.RecordBatch:
    """One chunk of raw records -> parsed rows, one per record.

    Arrow's decoder takes the records it can vouch for (jobs/parse/bulk.py); the contract's own
    judge (`parse_values`) takes every other one, one by one, as before.
    """
    n = batch.num_rows
    values = batch.column("value")
    fast = vouch(values if n >= bulk_from else values.slice(0, 0), fields, n)
    slow = np.flatnonzero(~fast.ok)
    # the records left to Python, one list per column, in `slow` order
    m = len(slow)
    names = [f.column for f in fields]
    cols: dict[str, list[Any]] = {name: [None] * m for name in [*names, *_SLOW_ONLY]}
    kind, event_ms = cols["kind"], cols["event_ms"]
    reason, detail, raw, raw_size = cols["reason"], cols["detail"], cols["raw"], cols["raw_size"]
    field_cols = [cols[c] for c in names]  # check order, as `parse_values` gives them
    for i, value in enumerate(values.take(pa.array(slow, pa.int64())).to_pylist()):
        got = parse_values(value)
        if isinstance(got, list):
            kind[i] = RecordKind.EVENT
            for col, v in zip(field_cols, got, strict=True):
                col[i] = v
        elif isinstance(got, Heartbeat):
            kind[i] = RecordKind.HEARTBEAT
            event_ms[i] = got.event_time
        else:
            kind[i] = RecordKind.DEAD
            reason[i] = got.reason.value
            detail[i] = got.detail
            body = value or b""
            raw[i] = body[:DEAD_LETTER_RAW_CAP]
            raw_size[i] = len(body)
    # every output row i is row `where[i]` of (vouched rows ++ slow rows)
    vouched = len(fast.columns[names[0]])
    where = fast.rows.copy()
    where[slow] = vouched + np.arange(m)
    take = pa.array(where, pa.int64())
    out: dict[str, pa.Array] = {}
    for f in schema:
        if f.name in fast.columns:
            both = pa.concat_arrays([fast.columns[f.name], pa.array(cols[f.name], f.type)])
        elif f.name in cols:
            first = pa.repeat(
                pa.scalar(RecordKind.EVENT if f.name == "kind" else None, f.type), vouched
            )
            both = pa.concat_arrays([first, pa.array(cols[f.name], f.type)])
        else:
            continue
        out[f.name] = both.take(take)
    out["partition"] = batch.column("partition")
    out["offset"] = batch.column("offset")
    ts = batch.column("timestamp").cast(pa.int64())  # microseconds
    out["kafka_ms"] = pa.array(
        np.floor_divide(ts.fill_null(0).to_numpy(), 1000),
        pa.int64(),
        mask=ts.is_null().to_numpy(zero_copy_only=False),
    )
    out["clock_offset_ms"] = pa.nulls(n, pa.int64())
    if correct_clock_skew:
        _correct_clocks(out)
    out["event_time"] = pc.multiply(out["event_ms"], 1000).cast(schema.field("event_time").type)
    return pa.RecordBatch.from_arrays([out[f.name] for f in schema], schema=schema)


def _correct_clocks(out: dict[str, pa.Array]) -> None:
    """Move each event's device times onto the broker's clock (`clock_offsets`), in place."""
    # Device = user: the generator (and a typical client SDK) has one clock per user device.
    is_event = [k == RecordKind.EVENT for k in out["kind"].to_pylist()]
    user_id, sent = out["user_id"].to_pylist(), out["sent_ms"].to_pylist()
    event_ms, kafka_ms = out["event_ms"].to_pylist(), out["kafka_ms"].to_pylist()
    offsets = clock_offsets(
        [u if e else None for u, e in zip(user_id, is_event, strict=True)],
        [t if e else None for t, e in zip(sent, is_event, strict=True)],
        [k if e else None for k, e in zip(kafka_ms, is_event, strict=True)],
    )
    for i, off in enumerate(offsets):
        if off is not None and event_ms[i] is not None:
            event_ms[i] += off
            sent[i] += off
    out["clock_offset_ms"] = pa.array(offsets, pa.int64())
    out["event_ms"] = pa.array(event_ms, pa.int64())
    out["sent_ms"] = pa.array(sent, pa.int64())


def _parse_decoded(
    batch: pa.RecordBatch, decode: Decoder, schema: pa.Schema, fields: Sequence[EventField]
) -> pa.RecordBatch:
    """One chunk of another format's records -> parsed rows, in record order.

    Each event or dead letter the decoder gives for a record (an access log line one, an OTLP
    message one per span) is a row at that record's position. A dead letter keeps the
    record's bytes.
    """
    width = len(fields)
    no_fields = [None] * width
    rows: list[list[Any]] = []  # position, kafka_ms, the fields, then the dead-letter columns
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds
    for value, partition, offset, t in zip(
        batch.column("value").to_pylist(),
        batch.column("partition").to_pylist(),
        batch.column("offset").to_pylist(),
        ts,
        strict=True,
    ):
        head = [partition, offset, None if t is None else t // 1000]
        for got in decode(value, partition, offset):
            if isinstance(got, Rejected):
                body = value or b""
                tail = [RecordKind.DEAD, got.reason.value, got.detail]
                rows.append([*head, *no_fields, *tail, body[:DEAD_LETTER_RAW_CAP], len(body)])
            else:
                rows.append([*head, *got, RecordKind.EVENT, None, None, None, None])
    names = ["partition", "offset", "kafka_ms", *(f.column for f in fields), *_SLOW_ONLY]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    out = {c: pa.array(v, schema.field(c).type) for c, v in zip(names, columns, strict=True)}
    out["clock_offset_ms"] = pa.nulls(len(rows), pa.int64())
    out["event_time"] = pc.multiply(out["event_ms"], 1000).cast(schema.field("event_time").type)
    return pa.RecordBatch.from_arrays([out[f.name] for f in schema], schema=schema)


def parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` function: raw source batches in, parsed batches (PARSED_SCHEMA) out."""
    for batch in batches:
        if batch.num_rows:
            yield _parse_batch(batch)


def make_parser(
    correct_clock_skew: bool = False, plugins: Sequence[str] = (), record_format: str | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The `mapInArrow` function for the contract now; fixes device clocks when asked.

    Its output schema is `parsed_schema()` of this process (the driver). `plugins` are the
    plugin modules the driver loaded: the executors load them too and check that they give
    the same fields (and metrics), so they parse exactly the columns the schema promises. With
    `correct_clock_skew`, device times are moved onto the broker's clock (`clock_offsets`)
    before anything looks at event time, watermark included. Each Arrow batch holds records of
    one Kafka partition (the source reads per partition, and the key, the user, picks the
    partition), so a device's offset is estimated from its own records of that batch,
    deterministically for a given offset range. `record_format` (`RecordFormat.to_json`) reads
    another format than the contract's own records: access logs, OTLP spans
    (tidegauge/core/formats.py); there is no device clock to correct in those.
    """
    snapshot = event_fields()
    _, schema = parsed_schema(snapshot)
    fmt = RecordFormat() if record_format is None else RecordFormat.from_json(record_format)
    if fmt.own and not correct_clock_skew and len(snapshot) == len(BUILT_IN_FIELDS):
        return parse_batches
    field_names = [f.name for f in snapshot]
    metric_names = [m.name for m in metrics()]
    names = tuple(plugins)

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ensure_plugins(names, metric_names, field_names)
        decode = None if fmt.own else fmt.decoder()
        for batch in batches:
            if not batch.num_rows:
                continue
            if decode is None:
                yield _parse_batch(batch, correct_clock_skew, schema, snapshot)
            else:
                yield _parse_decoded(batch, decode, schema, snapshot)

    return parse
