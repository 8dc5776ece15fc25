"""The stateful step's output rows: one schema for every kind, encoded and decoded here.

The state function writes them (`append_row`, `output_table`) in the stateful step (the driver
or its state workers); the sink's batch writer reads them back (`decode_rows`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from jobs.parse.columns import Columns, decode_columns
from tidegauge.core.events import OVERFLOW_SERVICE
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_aggs import json_value

if TYPE_CHECKING:  # the store (and redis-py) only where rows are decoded: in the driver
    from tidegauge.core.store import DeadLetter

__all__ = [
    "RowKind",
    "ArrivalUpdate",
    "LateUpdate",
    "WindowCount",
    "WindowUpdate",
    "OUTPUT_ARROW",
    "OUTPUT_SCHEMA",
    "BatchRows",
    "append_row",
    "decode_rows",
    "decode_table",
    "metrics_json",
    "new_rows",
    "output_table",
]


@dataclass(frozen=True)
class WindowUpdate:
    """The new absolute state of one (window, service) after a batch.

    `spec` is the window spec's key (tidegauge.core.windows.WindowSpec.key), `agg` the serialised
    WindowAgg (sketches included): the one value the store keeps per (window, service), from
    which readers compute its figures.
    """

    spec: str
    start_ms: int
    service: str
    agg: bytes
    #: Set for a part of a service kept by several state shards (the overflow service): the
    #: shard it comes from. The sink stores the parts and writes their merge as the service.
    shard: int | None = None


@dataclass(frozen=True)
class LateUpdate:
    """Rows of one (window, service) that arrived late in this batch; `agg` is LateAgg bytes."""

    spec: str
    start_ms: int
    service: str
    count: int
    agg: bytes = b""


@dataclass(frozen=True)
class WindowCount:
    """A batch's count for one (window, service): stragglers or duplicates.

    Stragglers were accepted after the window was emitted; duplicates were dropped from it.
    """

    spec: str
    start_ms: int
    service: str
    count: int


@dataclass(frozen=True)
class ArrivalUpdate:
    """A batch's events of one service in one processing- or broker-time window."""

    domain: str
    start_ms: int
    service: str
    count: int
    #: late, stragglers (ints) and proc_ms (the batch's timestamp).
    metrics: Mapping[str, Any]


class RowKind(StrEnum):
    """What an output row is: the `kind` column of `OUTPUT_SCHEMA`.

    Each kind's comment names the columns it fills; the others are null.
    """

    #: spec, service, window_start, count, agg (WindowAgg bytes): absolute
    WINDOW = "window"
    #: spec, service, window_start, count, agg (LateAgg bytes): late rows of this batch
    LATE = "late"
    #: spec, service, window_start, count: stragglers of this batch for that window
    STRAGGLER = "straggler"
    #: spec, service, window_start, count: duplicates of this batch dropped from that window
    DUPLICATE = "duplicate"
    #: spec (an `ARRIVAL_DOMAINS` clock), service, window_start, count, late, stragglers,
    #: proc_ms: events of this batch by processing-time or broker-time window
    ARRIVALS = "arrivals"
    #: agg (jobs/summary/late_events.py `STORED_COLUMNS`, Arrow IPC), count: a state group's
    #: newest late events of this batch
    LATE_EVENTS = "late_events"
    #: partition, offset, kafka_ms, reason, detail, raw, raw_size: one dead letter
    DEAD = "dead"
    #: service, count: events of this batch dropped as duplicates
    DUPLICATE_EVENTS = "duplicate_events"
    #: reason, count: dead letters so far (absolute)
    DEAD_COUNT = "dead_count"
    #: agg (tidegauge/core/freshness.py histogram), count: the broker timestamps of one chunk's
    #: records in this batch, from which the sink measures freshness, and how many records the
    #: chunk had (with or without a timestamp)
    BROKER_TIMES = "broker_times"
    #: service (the overflow service), count (events), metrics (JSON: names, shard, tracked):
    #: with `--max-services`, each shard's names of this batch beyond its quota, whose events
    #: count under the overflow service, and the names it tracks (jobs/summary/slots.py)
    OVERFLOW = "overflow"


OUTPUT_SCHEMA = (
    "kind string, spec string, service string, window_start long, count long, metrics string, "
    "agg binary, partition int, offset long, kafka_ms long, reason string, detail string, "
    "raw binary, raw_size int, late long, stragglers long, proc_ms long"
)
_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]
_ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "binary": pa.binary()}
#: OUTPUT_SCHEMA as an Arrow schema (the stateful step's result table, jobs/state/step.py).
OUTPUT_ARROW = pa.schema(
    [(name, _ARROW_TYPES[t]) for name, t in (c.split() for c in OUTPUT_SCHEMA.split(","))]
)


def metrics_json(metrics: Mapping[str, Any]) -> str:
    """`json.dumps(metrics, separators=(",", ":"), sort_keys=True)`, several times faster.

    A window row's metrics are numbers and None (plugins may add strings and booleans); their
    keys are the same row after row, so the sorted, quoted keys are made once per key set.
    Anything else (a non-finite number, a nested value) goes through `json.dumps`.
    """
    names = tuple(metrics)
    quoted = _QUOTED.get(names)
    if quoted is None:
        quoted = _QUOTED[names] = [(k, json.dumps(k) + ":") for k in sorted(names)]
    return "{" + ",".join([head + json_value(metrics[key]) for key, head in quoted]) + "}"


#: Key sets seen by `metrics_json` -> their keys, sorted, with their quoted form.
_QUOTED: dict[tuple[str, ...], list[tuple[str, str]]] = {}


def new_rows() -> dict[str, list[Any]]:
    """An empty collection of output rows, one list per column."""
    return {c: [] for c in _COLUMNS}


def output_table(rows: dict[str, list[Any]]) -> pa.Table:
    """The collected rows as one output table (every column of `OUTPUT_ARROW`).

    Built column by column from the lists, without a pandas frame in between (a third of the
    time, with thousands of window rows a group). NaN is null, as pandas has it: no column is
    of floats.
    """
    n = max((len(v) for v in rows.values()), default=0)
    return pa.Table.from_arrays(
        [
            pa.array(rows[f.name] if f.name in rows else [None] * n, f.type, from_pandas=True)
            for f in OUTPUT_ARROW
        ],
        schema=OUTPUT_ARROW,
    )


def append_row(rows: dict[str, list[Any]], **values: Any) -> None:
    """Append one output row (columns not given are null)."""
    n = len(rows["kind"])
    for c, v in values.items():
        rows[c].append(v)
    for c in _COLUMNS:  # the columns not given: null (a few list lengths to compare)
        column = rows[c]
        if len(column) == n:
            column.append(None)


def extend_rows(rows: dict[str, list[Any]], **columns: list[Any]) -> None:
    """Append many output rows at once: equal-length lists by column (others are null)."""
    n = len(next(iter(columns.values()), []))
    for c in _COLUMNS:
        values = columns.get(c)
        if values is None:
            rows[c] += [None] * n
        elif len(values) != n:
            raise ValueError(f"extend_rows: column {c} has {len(values)} values, not {n}")
        else:
            rows[c] += values


def _arrival_metrics(late: int, stragglers: int, proc_ms: int | None) -> dict[str, Any]:
    """An arrivals row's metrics as the sink stores them (`ArrivalUpdate.metrics`)."""
    return {"late": late, "proc_ms": proc_ms, "stragglers": stragglers}


@dataclass
class BatchRows:
    """A micro-batch's output rows, by kind, as the sink takes them."""

    windows: list[WindowUpdate] = field(default_factory=list)
    late: list[LateUpdate] = field(default_factory=list)
    stragglers: list[WindowCount] = field(default_factory=list)
    duplicates: list[WindowCount] = field(default_factory=list)
    arrivals: list[ArrivalUpdate] = field(default_factory=list)
    #: Each state group's newest late events (jobs/summary/late_events.py), to be cut to the newest.
    late_events: list[Columns] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    dead_counts: dict[str, int] = field(default_factory=dict)
    #: Broker-time histograms of the batch's records, one per chunk read.
    broker_times: list[bytes] = field(default_factory=list)
    #: Records the batch read from Kafka (events, heartbeats and dead letters).
    records: int = 0
    #: Events the batch dropped as duplicates (each once).
    duplicate_events: int = 0
    #: Names beyond `--max-services` whose events the batch counted under OVERFLOW_SERVICE
    #: (distinct per state shard; shards hold disjoint names), and how many events those were.
    overflow_names: int = 0
    overflow_events: int = 0
    #: With `--max-services`: shard -> (names it tracks, names over its quota in this batch).
    slots: dict[int, tuple[int, int]] = field(default_factory=dict)


def decode_rows(rows: Iterable[Mapping[str, Any]], batch_id: int) -> BatchRows:
    """Output rows (dicts of OUTPUT_SCHEMA columns) back into the sink's updates."""
    from tidegauge.core.store import DeadLetter

    out = BatchRows()
    for row in rows:
        kind = row["kind"]
        if kind == RowKind.WINDOW:
            out.windows.append(
                WindowUpdate(
                    row["spec"],
                    row["window_start"],
                    row["service"],
                    row["agg"],
                    # the state shard of an overflow service's part (jobs/state/aggregate.py)
                    None if row.get("partition") is None else int(row["partition"]),
                )
            )
        elif kind == RowKind.LATE:
            out.late.append(
                LateUpdate(
                    row["spec"], row["window_start"], row["service"], row["count"], row["agg"]
                )
            )
        elif kind in (RowKind.STRAGGLER, RowKind.DUPLICATE):
            counts = out.stragglers if kind == RowKind.STRAGGLER else out.duplicates
            counts.append(
                WindowCount(row["spec"], row["window_start"], row["service"], row["count"])
            )
        elif kind == RowKind.ARRIVALS:
            out.arrivals.append(
                ArrivalUpdate(
                    row["spec"],
                    row["window_start"],
                    row["service"],
                    row["count"],
                    _arrival_metrics(row["late"], row["stragglers"], row["proc_ms"]),
                )
            )
        elif kind == RowKind.LATE_EVENTS:
            out.late_events.append(decode_columns(row["agg"]))
        elif kind == RowKind.DEAD:
            out.dead.append(
                DeadLetter(
                    partition=row["partition"],
                    offset=row["offset"],
                    kafka_timestamp=row["kafka_ms"] or 0,
                    reason=row["reason"],
                    detail=row["detail"],
                    raw=row["raw"] or b"",
                    raw_size=row["raw_size"] or 0,
                    batch_id=batch_id,
                )
            )
        elif kind == RowKind.DUPLICATE_EVENTS:
            out.duplicate_events += int(row["count"])
        elif kind == RowKind.OVERFLOW:
            report = json.loads(row["metrics"])
            out.overflow_names += int(report["names"])
            out.overflow_events += int(row["count"])
            out.slots[int(report["shard"])] = (int(report["tracked"]), int(report["names"]))
        elif kind == RowKind.DEAD_COUNT:
            out.dead_counts[row["reason"]] = row["count"]
        elif kind == RowKind.BROKER_TIMES:
            out.broker_times.append(row["agg"])
            out.records += int(row["count"] or 0)
    return _merge_shards(out)


def decode_table(table: pa.Table, batch_id: int) -> BatchRows:
    """`decode_rows` of the output rows as an Arrow table (what the sink collects).

    Window and arrival rows, thousands a batch with many services, are read column by column
    instead of as a dict per row; the other kinds go through `decode_rows`.
    """
    kind = table.column("kind")
    bulk = pc.is_in(kind, pa.array([RowKind.WINDOW.value, RowKind.ARRIVALS.value]))
    out = decode_rows(table.filter(pc.invert(bulk)).to_pylist(), batch_id)
    windows = table.filter(pc.equal(kind, RowKind.WINDOW.value))
    out.windows = [
        WindowUpdate(spec, start, service, agg, None if shard is None else int(shard))
        for spec, start, service, agg, shard in zip(
            *(
                windows.column(c).to_pylist()
                for c in ("spec", "window_start", "service", "agg", "partition")
            ),
            strict=True,
        )
    ]
    arrivals = table.filter(pc.equal(kind, RowKind.ARRIVALS.value))
    out.arrivals = [
        ArrivalUpdate(domain, start, service, count, _arrival_metrics(late, stragglers, proc))
        for domain, start, service, count, late, stragglers, proc in zip(
            *(
                arrivals.column(c).to_pylist()
                for c in (
                    "spec",
                    "window_start",
                    "service",
                    "count",
                    "late",
                    "stragglers",
                    "proc_ms",
                )
            ),
            strict=True,
        )
    ]
    return _merge_shards(out)


def _merge_shards(out: BatchRows) -> BatchRows:
    """One fact per (window, service) of the batch.

    The overflow service exists in every state shard, so its per-batch facts (late rows,
    stragglers, duplicates, arrivals) come from several shards and are summed here; every other
    service lives in one shard and passes unchanged (and is not looked at: thousands a batch).
    """
    kept, parts = _split_overflow(out.late)
    late: dict[tuple[str, int, str], LateUpdate] = {}
    for u in parts:
        key = (u.spec, u.start_ms, u.service)
        have = late.get(key)
        if have is None:
            late[key] = u
        else:
            merged = LateAgg.from_bytes(have.agg) if have.agg else LateAgg(have.count)
            merged.merge(LateAgg.from_bytes(u.agg) if u.agg else LateAgg(u.count))
            late[key] = LateUpdate(u.spec, u.start_ms, u.service, merged.count, merged.to_bytes())
    out.late = kept + list(late.values())
    for name in ("stragglers", "duplicates"):
        kept_counts, count_parts = _split_overflow(getattr(out, name))
        counts: Counter[tuple[str, int, str]] = Counter()
        for c in count_parts:
            counts[(c.spec, c.start_ms, c.service)] += c.count
        setattr(out, name, kept_counts + [WindowCount(*key, n) for key, n in counts.items()])
    kept_arrivals, arrival_parts = _split_overflow(out.arrivals)
    arrivals: dict[tuple[str, int, str], ArrivalUpdate] = {}
    for a in arrival_parts:
        key = (a.domain, a.start_ms, a.service)
        have_a = arrivals.get(key)
        if have_a is None:
            arrivals[key] = a
        else:
            metrics = {
                **have_a.metrics,
                "late": have_a.metrics["late"] + a.metrics["late"],
                "stragglers": have_a.metrics["stragglers"] + a.metrics["stragglers"],
            }
            arrivals[key] = ArrivalUpdate(
                a.domain, a.start_ms, a.service, have_a.count + a.count, metrics
            )
    out.arrivals = kept_arrivals + list(arrivals.values())
    return out


_Fact = TypeVar("_Fact", LateUpdate, WindowCount, ArrivalUpdate)


def _split_overflow(facts: list[_Fact]) -> tuple[list[_Fact], list[_Fact]]:
    """(the facts of services in one shard, those of the overflow service, kept by all)."""
    if not any(f.service == OVERFLOW_SERVICE for f in facts):
        return facts, []
    return (
        [f for f in facts if f.service != OVERFLOW_SERVICE],
        [f for f in facts if f.service == OVERFLOW_SERVICE],
    )
