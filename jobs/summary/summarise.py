"""What one chunk of records does to each service's windows, decided in the read task.

The job's source (jobs/summary/read_task.py) reads up to `CHUNK` records of one Kafka partition at a
time, parses them (jobs/parse/parser.py) and summarises up to `SUMMARY_RECORDS` of them at once here
(a "chunk" below), so what crosses into the JVM, the shuffle and the stateful step is a few rows
per service and chunk, not one wide row per record
(BENCHMARKS.md). The summary applies exactly the rules the stateful step used to apply
to raw rows, against the batch's watermark, which the planner reads from Spark's offset log
(jobs/source/offset_log.py) and the stateful step checks. Summary rows (`SUMMARY_SCHEMA`):

    service    one per service with events in the chunk: `ServiceSummary` bytes in `blob`,
               `event_time` = the newest of those events (Spark's watermark takes the max of
               this column, which is the max over the events), `partition`/`offset` = the
               first of them, `count` = how many
    heartbeat  one per chunk with heartbeats: the newest heartbeat time; copied to every event
               group, so a quiet stream still closes sessions and evicts state
    dead       one per malformed record, as parsed (reason, detail, raw bytes)
    times      one per chunk: the broker-time histogram of all its records (freshness) in
               `blob`, and how many records the chunk had in `count`

A `ServiceSummary` holds everything about a service that depends only on its events in the
chunk and on the batch's clock: the watermark class of every (window, event) pair, the pane
aggregates of accepted events, late aggregates, straggler counts, arrival counts and the late
events themselves (the service's newest `late_events_max` of the chunk,
jobs/summary/late_events.py).
Sessions span chunks, so a session job also carries each event's user, time and lateness into
the state (`ServiceWindows.add_sessions`). Pure: no Spark.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.panes.columnar import Plan, add_events, encode_late, unique_rows
from jobs.panes.dedup import duplicate_windows, first_occurrences, horizons, id_hashes
from jobs.parse.columns import (
    Columns,
    arrow_strings,
    decode_columns,
    encode_columns,
    present,
    take_rows,
)
from jobs.parse.parser import RecordKind
from jobs.summary.late_events import late_columns
from jobs.summary.schema import SUMMARY_ARROW, SummaryKind
from jobs.summary.settings import ExecutorConfig
from sketches.preamble import SERVICE_SUMMARY
from sketches.tg64 import hash32
from tidegauge.core.events import BUILT_IN_FIELDS, EventField
from tidegauge.core.freshness import encode_times
from tidegauge.core.windows import (
    LATE,
    STRAGGLER,
    classify_many,
    frontier,
    primary_size,
    tumbling_start,
    tumbling_starts,
)

__all__ = [
    "ServiceSummary",
    "arrival_counts",
    "dedup_summary",
    "redo_summary",
    "summarise",
    "summary_batch",
    "summary_frame",
]

_NAMES = SUMMARY_ARROW.names


def _empty(dtype: Any) -> npt.NDArray[Any]:
    """A read-only empty array of `dtype`, shared: a summary is made per service and chunk."""
    out = _EMPTY.get(dtype)
    if out is None:
        out = _EMPTY[dtype] = np.empty(0, dtype=dtype)
        out.flags.writeable = False
    return out


_EMPTY: dict[Any, npt.NDArray[Any]] = {}


@dataclass
class ServiceSummary:
    """What one chunk's events of one service did, against the batch's watermark."""

    watermark_ms: int
    proc_ms: int | None
    #: Pane start -> aggregate of the chunk's accepted events in that pane (`WindowAgg` bytes).
    panes: dict[int, bytes] = field(default_factory=dict)
    #: (spec key, window start) -> the chunk's late events of that window (`LateAgg` bytes).
    late: dict[tuple[str, int], bytes] = field(default_factory=dict)
    #: (spec key, window start) -> the chunk's stragglers of that window.
    stragglers: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: (domain, window start) -> (events, late, stragglers) of the chunk (`ARRIVAL_DOMAINS`).
    arrivals: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    #: The chunk's newest late events (jobs/summary/late_events.py `EVENT_COLUMNS`; empty: none).
    late_events: Columns = field(default_factory=dict)
    #: Session jobs only: every event's user, event time and lateness (NaN = unknown).
    users: npt.NDArray[Any] = field(default_factory=lambda: _empty(object))
    event_ms: npt.NDArray[np.int64] = field(default_factory=lambda: _empty(np.int64))
    lateness: npt.NDArray[np.float64] = field(default_factory=lambda: _empty(np.float64))
    #: De-duplication (jobs/panes/dedup.py), filled by `dedup_summary`: the chunk's duplicates per
    #: (spec key, window start); the id hashes and horizons of the events it accepted (each id
    #: once); and those events' columns (`encode_columns`), from which the stateful step
    #: summarises again without the ones it finds to be duplicates of earlier events.
    duplicates: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Duplicate events (each once, however many windows counted it).
    duplicate_events: int = 0
    ids: npt.NDArray[np.uint64] = field(default_factory=lambda: _empty(np.uint64))
    horizons: npt.NDArray[np.int64] = field(default_factory=lambda: _empty(np.int64))
    rows: bytes = b""

    def to_bytes(self) -> bytes:
        """Versioned blob: magic, version, header length, JSON header, then the binary parts."""
        blobs: list[bytes] = []
        panes = []
        for start, b in sorted(self.panes.items()):
            panes.append([start, len(b)])
            blobs.append(b)
        late = []
        for (key, start), b in sorted(self.late.items()):
            late.append([key, start, len(b)])
            blobs.append(b)
        users = json.dumps(self.users.tolist()).encode() if len(self.users) else b""
        # Horizons take a few values per chunk (the windows' ends): each one by its index.
        horizons, codes = _codes(self.horizons)
        late_events = encode_columns(self.late_events) if self.late_events else b""
        head = json.dumps(
            {
                "wm": self.watermark_ms,
                "proc": self.proc_ms,
                "panes": panes,
                "late": late,
                "strag": [[k, s, n] for (k, s), n in sorted(self.stragglers.items())],
                "arr": [[d, s, *v] for (d, s), v in sorted(self.arrivals.items())],
                "late_events": len(late_events),
                "sessions": [len(self.event_ms), len(users)],
                "dup": [[k, s, n] for (k, s), n in sorted(self.duplicates.items())],
                "ids": [len(self.ids), len(self.rows), self.duplicate_events],
                "hz": horizons,
            },
            separators=(",", ":"),
        ).encode()
        blobs += [
            users,
            self.event_ms.astype("<i8").tobytes(),
            self.lateness.astype("<f8").tobytes(),
            self.ids.astype("<u8").tobytes(),
            codes.astype(_code_type(len(horizons))).tobytes(),
            self.rows,
            late_events,
        ]
        return b"".join([SERVICE_SUMMARY.preamble, _HEAD.pack(len(head)), head, *blobs])

    @classmethod
    def from_bytes(cls, blob: bytes) -> ServiceSummary:
        """Inverse of `to_bytes`; ValueError on anything else."""
        SERVICE_SUMMARY.check(blob)
        if len(blob) < _HEAD_END:
            raise ValueError("service summary: too short")
        (n_head,) = _HEAD.unpack_from(blob, SERVICE_SUMMARY.size)
        pos = _HEAD_END + n_head
        head = json.loads(blob[_HEAD_END:pos])
        out = cls(head["wm"], head["proc"])
        for start, n in head["panes"]:
            out.panes[int(start)] = blob[pos : pos + n]  # checked when decoded
            pos += n
        for key, start, n in head["late"]:
            out.late[(key, int(start))] = blob[pos : pos + n]
            pos += n
        out.stragglers = Counter({(k, int(s)): int(n) for k, s, n in head["strag"]})
        out.arrivals = {(d, int(s)): (int(a), int(b), int(c)) for d, s, a, b, c in head["arr"]}
        n_events, n_users = head["sessions"]
        if n_events:
            out.users = np.array(json.loads(blob[pos : pos + n_users]), dtype=object)
            pos += n_users
            out.event_ms = np.frombuffer(blob, "<i8", n_events, pos).astype(np.int64)
            pos += 8 * n_events
            out.lateness = np.frombuffer(blob, "<f8", n_events, pos).astype(np.float64)
            pos += 8 * n_events
        out.duplicates = Counter({(k, int(s)): int(n) for k, s, n in head["dup"]})
        n_ids, n_rows, out.duplicate_events = head["ids"]
        if n_ids:
            out.ids = np.frombuffer(blob, "<u8", n_ids, pos).astype(np.uint64)
            pos += 8 * n_ids
            values = np.array(head["hz"], dtype=np.int64)
            code = np.dtype(_code_type(len(values)))
            out.horizons = values[np.frombuffer(blob, code, n_ids, pos)]
            pos += code.itemsize * n_ids
        out.rows = blob[pos : pos + n_rows]
        pos += n_rows
        if n_late := head["late_events"]:
            out.late_events = decode_columns(blob[pos : pos + n_late])
            pos += n_late
        if pos != len(blob):
            raise ValueError("service summary: length mismatch")
        return out


def _codes(values: npt.NDArray[np.int64]) -> tuple[list[int], npt.NDArray[np.int64]]:
    """`np.unique(values, return_inverse=True)`, as a list; without numpy's overhead when short."""
    if len(values) > 16:
        uniq, codes = np.unique(values, return_inverse=True)
        return uniq.tolist(), codes
    listed = values.tolist()
    uniq_list = sorted(set(listed))
    index = {v: i for i, v in enumerate(uniq_list)}
    return uniq_list, np.array([index[v] for v in listed], np.int64)


def _code_type(values: int) -> str:
    """The narrowest unsigned integer that indexes `values` distinct values."""
    return "<u1" if values <= 1 << 8 else "<u2" if values <= 1 << 16 else "<u4"


#: After the preamble (magic b"TGSD", version: sketches/preamble.py): the JSON header's length.
_HEAD = struct.Struct("<I")
_HEAD_END = SERVICE_SUMMARY.size + _HEAD.size


def arrival_counts(
    bucket_ms: npt.NDArray[np.int64], kinds: npt.NDArray[np.int64]
) -> dict[int, tuple[int, int, int]]:
    """Window start -> (events, late, stragglers), from per-event buckets and classes."""
    codes = np.zeros(len(bucket_ms), np.int64)
    return {b: counts for (_, b), counts in service_arrival_counts(codes, bucket_ms, kinds).items()}


def service_arrival_counts(
    codes: npt.NDArray[np.int64], bucket_ms: npt.NDArray[np.int64], kinds: npt.NDArray[np.int64]
) -> dict[tuple[int, int], tuple[int, int, int]]:
    """`arrival_counts` of many services at once: (service code, window start) -> counts."""
    if not len(codes):
        return {}
    (code_of, bucket_of), inverse = unique_rows(codes, bucket_ms)
    n = np.bincount(inverse)
    late = np.bincount(inverse, weights=kinds == LATE).astype(np.int64)
    strag = np.bincount(inverse, weights=kinds == STRAGGLER).astype(np.int64)
    rows = zip(
        code_of.tolist(), bucket_of.tolist(), n.tolist(), late.tolist(), strag.tolist(), strict=True
    )
    return {(code, b): (a, c, d) for code, b, a, c, d in rows}


def _extra_columns(
    pdf: pd.DataFrame, fields: tuple[EventField, ...]
) -> dict[str, npt.NDArray[Any]] | None:
    """The columns of registered event fields, by column name (numbers as float, NaN = absent)."""
    out: dict[str, npt.NDArray[Any]] = {}
    for f in fields[len(BUILT_IN_FIELDS) :]:
        col = pdf[f.column]
        if f.type == "string":
            out[f.column] = col.to_numpy(dtype=object)
        else:
            out[f.column] = col.to_numpy(dtype=np.float64, na_value=np.nan)
    return out or None


def _int_or_none(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _event_columns(
    pdf: pd.DataFrame, rows: npt.NDArray[np.bool_], fields: tuple[EventField, ...] = ()
) -> Columns:
    """The parsed event `rows` that `service_summary` needs (NaN / -1 / null = absent)."""
    cols: Columns = {
        "service": arrow_strings(pdf["service"]),
        "event_ms": pdf["event_ms"].to_numpy(dtype=np.int64, na_value=0),
        "kafka_ms": pdf["kafka_ms"].to_numpy(dtype=np.float64, na_value=np.nan),
        "user_id": arrow_strings(pdf["user_id"]),
        "latency_ms": pdf["latency_ms"].to_numpy(dtype=np.float64, na_value=np.nan),
        "status": pdf["status"].to_numpy(dtype=np.int64, na_value=-1),
        "partition": pdf["partition"].to_numpy(dtype=np.int64),
        "offset": pdf["offset"].to_numpy(dtype=np.int64),
        "event_id": arrow_strings(pdf["event_id"]),
    }
    if "clock_offset_ms" in pdf:
        cols["clock_offset_ms"] = pdf["clock_offset_ms"].to_numpy(dtype=np.float64, na_value=np.nan)
    for name, col in (_extra_columns(pdf, fields) or {}).items():
        cols[_EXTRA + name] = col
    return cols if rows.all() else take_rows(cols, rows)


#: Prefix of registered event fields' columns in `Columns`.
_EXTRA = "extra:"


def service_summary(
    cols: Columns,
    watermark_ms: int,
    proc_ms: int | None,
    cfg: ExecutorConfig,
    late_events: bool = True,
) -> ServiceSummary:
    """The summary of one service's events (`Columns`, Kafka order) against the watermark.

    Without `late_events` the summary keeps none (and `cols` need not have their columns).
    """
    codes = np.zeros(len(cols["event_ms"]), np.int64)
    return service_summaries(cols, codes, 1, watermark_ms, proc_ms, cfg, late_events)[0]


def service_summaries(
    cols: Columns,
    codes: npt.NDArray[np.int64],
    n: int,
    watermark_ms: int,
    proc_ms: int | None,
    cfg: ExecutorConfig,
    late_events: bool = True,
) -> list[ServiceSummary]:
    """`service_summary` of each of `n` services, whose events are `cols` (service `codes`).

    Rows are grouped by code (ascending), in Kafka order within a service. Everything is
    computed for the whole chunk at once (the panes, late aggregates and stragglers in one
    `add_events`, jobs/panes/columnar.py; the arrival counts in one count); only what differs
    per service is split out.
    """
    front = frontier(watermark_ms, cfg.allowed_lateness_ms)
    plan = Plan(cfg.specs)
    outs = [ServiceSummary(watermark_ms, proc_ms) for _ in range(n)]
    bounds = np.searchsorted(codes, np.arange(n + 1)).tolist()
    event_ms, arrival = cols["event_ms"], cols["kafka_ms"]
    if plan.specs and len(event_ms):
        _panes(outs, cols, codes, plan, watermark_ms, front)
    if len(plan.specs) != len(cfg.specs):  # sessions: each event's user, time and lateness
        users = np.array(cols["user_id"].to_pylist(), dtype=object)
        lateness = arrival - event_ms
        for i, out in enumerate(outs):
            lo, hi = bounds[i], bounds[i + 1]
            out.users, out.event_ms, out.lateness = users[lo:hi], event_ms[lo:hi], lateness[lo:hi]
    size = primary_size(cfg.specs)
    classes = classify_many(tumbling_starts(event_ms, size) + size, watermark_ms, front)
    known = ~np.isnan(arrival)
    if proc_ms is not None:
        bucket = np.full(len(event_ms), tumbling_start(proc_ms, size), dtype=np.int64)
        _arrivals(outs, "processing", codes, bucket, classes)
    if known.any():
        bucket = tumbling_starts(arrival[known].astype(np.int64), size)
        _arrivals(outs, "broker", codes[known], bucket, classes[known])
    late = classes == LATE
    if late.any() and cfg.late_events_max and late_events:
        for i in np.unique(codes[late]).tolist():
            lo, hi = bounds[i], bounds[i + 1]
            mine = _slice(cols, lo, hi) if n > 1 else cols
            idx = np.flatnonzero(late[lo:hi])
            outs[i].late_events = late_columns(mine, idx, cfg.late_events_max)
    return outs


def _slice(cols: Columns, lo: int, hi: int) -> Columns:
    """Rows [lo, hi) of every column (views, not copies)."""
    return {
        k: v.slice(lo, hi - lo) if isinstance(v, pa.Array) else v[lo:hi] for k, v in cols.items()
    }


def _arrivals(
    outs: list[ServiceSummary],
    domain: str,
    codes: npt.NDArray[np.int64],
    bucket_ms: npt.NDArray[np.int64],
    kinds: npt.NDArray[np.int64],
) -> None:
    """Each service's (events, late, stragglers) per window of `domain`."""
    for (code, b), counts in service_arrival_counts(codes, bucket_ms, kinds).items():
        outs[code].arrivals[(domain, b)] = counts


def _panes(
    outs: list[ServiceSummary],
    cols: Columns,
    codes: npt.NDArray[np.int64],
    plan: Plan,
    watermark_ms: int,
    front: int | None,
) -> None:
    """Every service's encoded panes, late aggregates and stragglers, from one pass."""
    user_ids = cols["user_id"]
    extra = {k[len(_EXTRA) :]: v for k, v in cols.items() if k.startswith(_EXTRA)}
    batch = add_events(
        plan,
        codes,
        cols["event_ms"],
        cols["latency_ms"],
        cols["status"],
        present(user_ids),
        hash32(user_ids),
        watermark_ms,
        cols["kafka_ms"],
        front,
        extra or None,
    )
    blobs = batch.aggs.encode()
    at = np.searchsorted(batch.service, np.arange(len(outs) + 1)).tolist()
    starts = batch.start.tolist()
    for i, out in enumerate(outs):
        out.panes = dict(zip(starts[at[i] : at[i + 1]], blobs[at[i] : at[i + 1]], strict=True))
    keys = [s.key for s in plan.specs]
    late = encode_late(batch)
    for code, s, w, blob in zip(
        batch.late_service.tolist(),
        batch.late_spec.tolist(),
        batch.late_start.tolist(),
        late,
        strict=True,
    ):
        outs[code].late[(keys[s], w)] = blob
    for code, s, w, n in zip(
        batch.straggler_service.tolist(),
        batch.straggler_spec.tolist(),
        batch.straggler_start.tolist(),
        batch.straggler_count.tolist(),
        strict=True,
    ):
        outs[code].stragglers[(keys[s], w)] += n


def dedup_summary(
    cols: Columns, watermark_ms: int, proc_ms: int | None, cfg: ExecutorConfig
) -> ServiceSummary:
    """`service_summary` of the chunk's events that are not duplicates within the chunk."""
    codes = np.zeros(len(cols["event_ms"]), np.int64)
    return dedup_summaries(cols, codes, 1, watermark_ms, proc_ms, cfg)[0]


#: Mixes a service's code into its events' id hashes, so one search finds repeats per service.
_SERVICE_MIX = np.uint64(0x9E3779B97F4A7C15)


def dedup_summaries(
    cols: Columns,
    codes: npt.NDArray[np.int64],
    n: int,
    watermark_ms: int,
    proc_ms: int | None,
    cfg: ExecutorConfig,
) -> list[ServiceSummary]:
    """`dedup_summary` of each service (`service_summaries`' arguments), the chunk at once.

    The first event of an id in Kafka order is kept, later ones of the same service within
    their horizon are counted as duplicates (jobs/panes/dedup.py). Each summary carries its
    kept events' ids and columns: the stateful step drops the ones it has seen in earlier
    chunks or batches and summarises the rest again (`redo_summary`).
    """
    hashes = id_hashes(cols["event_id"])
    has_user = present(cols["user_id"])
    hz = horizons(cols["event_ms"], has_user, cfg.specs)
    open_ = hz > watermark_ms
    keep = np.ones(len(hashes), dtype=bool)
    candidates = np.flatnonzero(open_)
    with np.errstate(over="ignore"):
        per_service = hashes[candidates] + codes[candidates].astype(np.uint64) * _SERVICE_MIX
    keep[candidates] = first_occurrences(per_service)
    dup = ~keep
    kept = take_rows(cols, keep) if dup.any() else cols
    kept_codes = codes[keep]
    outs = service_summaries(kept, kept_codes, n, watermark_ms, proc_ms, cfg)
    if dup.any():
        for i in np.unique(codes[dup]).tolist():
            mine = dup & (codes == i)
            outs[i].duplicates = duplicate_windows(
                cols["event_ms"][mine], has_user[mine], cfg.specs, watermark_ms
            )
            outs[i].duplicate_events = int(np.count_nonzero(mine))
    accepted = open_[keep]
    ids, kept_hz = hashes[keep], hz[keep]
    late = _late(kept["event_ms"], watermark_ms, cfg)
    bounds = np.searchsorted(kept_codes, np.arange(n + 1)).tolist()
    for i, out in enumerate(outs):
        lo, hi = bounds[i], bounds[i + 1]
        mine = accepted[lo:hi]
        out.ids, out.horizons = ids[lo:hi][mine], kept_hz[lo:hi][mine]
        if not len(out.ids):
            continue
        rows = _slice(kept, lo, hi) if n > 1 else kept
        # The late events' columns (jobs/summary/late_events.py) are only read when
        # `redo_summary` drops a late event, which only one still open for a larger window can
        # be: ship them only if the service has such an event (with one window: never), and
        # event ids only of late events.
        mine_late = late[lo:hi]
        if (mine_late & mine).any():
            event_ids = rows["event_id"]
            payload = dict(
                rows,
                event_id=pc.if_else(
                    pa.array(mine_late), event_ids, pa.scalar(None, event_ids.type)
                ),
            )
        else:
            payload = {k: v for k, v in rows.items() if k not in _LATE_ONLY}
        # No id hashes: `redo_summary` finds the rows `out.ids` belong to from the rows.
        out.rows = encode_columns(payload)
    return outs


#: Columns only late events need (`late_columns`).
_LATE_ONLY = ("partition", "offset", "event_id", "clock_offset_ms")


def _late(event_ms: npt.NDArray[np.int64], watermark_ms: int, cfg: ExecutorConfig) -> Any:
    """Which events are late for their primary window (the late events kept are of those)."""
    size = primary_size(cfg.specs)
    front = frontier(watermark_ms, cfg.allowed_lateness_ms)
    return classify_many(tumbling_starts(event_ms, size) + size, watermark_ms, front) == LATE


def redo_summary(
    summary: ServiceSummary, seen: npt.NDArray[np.uint64], cfg: ExecutorConfig
) -> ServiceSummary:
    """`summary` summarised again without its events whose id hash is in `seen` (sorted).

    Those were accepted before (jobs/panes/dedup.py) and count as duplicates now.
    """
    cols = decode_columns(summary.rows)
    has_user = present(cols["user_id"])
    hz = horizons(cols["event_ms"], has_user, cfg.specs)
    # `summary.ids` are the hashes of exactly the rows whose horizon is ahead of the watermark,
    # in row order (`dedup_summary`); the other rows are late for every window, never duplicates.
    open_ = hz > summary.watermark_ms
    if np.count_nonzero(open_) != len(summary.ids):
        raise ValueError("a summary's ids do not match its rows")
    hashes = np.zeros(len(hz), dtype=np.uint64)
    hashes[open_] = summary.ids
    at = np.searchsorted(seen, hashes)
    hit = at < len(seen)
    hit[hit] = seen[at[hit]] == hashes[hit]
    dup = hit & open_
    kept = take_rows(cols, ~dup)
    # Dropping no late event leaves the summary's late events as they are (and its rows may
    # carry none of their columns, see `dedup_summary`).
    late_dropped = bool(_late(cols["event_ms"][dup], summary.watermark_ms, cfg).any())
    if late_dropped and "offset" not in cols:
        raise ValueError("a summary's rows lack the late events' columns")
    out = service_summary(
        kept, summary.watermark_ms, summary.proc_ms, cfg, late_events=late_dropped
    )
    if not late_dropped:
        out.late_events = summary.late_events
    out.duplicates = summary.duplicates + duplicate_windows(
        cols["event_ms"][dup], has_user[dup], cfg.specs, summary.watermark_ms
    )
    out.duplicate_events = summary.duplicate_events + int(np.count_nonzero(dup))
    return out


def _by_service(services: pa.Array) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The chunk's service names, sorted, and each row's code in them (-1: no service)."""
    encoded = services.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    # Codes renumbered in sorted name order; -1 where the service is null.
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
    names.sort()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    keep = codes >= 0
    codes[keep] = rank[codes[keep]]
    return [str(n) for n in names], codes


def _row(cols: dict[str, list[Any]], **values: Any) -> None:
    for name in _NAMES:
        cols[name].append(values.get(name))


def summarise(
    pdf: pd.DataFrame, watermark_ms: int, proc_ms: int | None, cfg: ExecutorConfig
) -> dict[str, list[Any]]:
    """Summary rows (column -> values, event_time as epoch ms) of one chunk of parsed rows."""
    cols: dict[str, list[Any]] = {name: [] for name in _NAMES}
    if not len(pdf):
        return cols
    kind = pdf["kind"].to_numpy(dtype=object)
    is_event = kind == RecordKind.EVENT
    if is_event.any():
        events = _event_columns(pdf, is_event, cfg.fields)
        p, o = events["partition"], events["offset"]
        if not bool(np.all((p[1:] > p[:-1]) | ((p[1:] == p[:-1]) & (o[1:] >= o[:-1])))):
            order = np.lexsort((o, p))  # Kafka order, stable
            events = take_rows(events, order)
        names, codes = _by_service(events.pop("service"))
        if len(names) > 1 or not (codes >= 0).all():
            # Rows grouped by service, Kafka order within each; rows without one left out.
            # Small codes sort stably by radix (numpy, <= 16 bits): ~2.5x faster than int64.
            small = codes.astype(np.int16) if len(names) < 2**15 else codes
            order = np.argsort(small, kind="stable")
            order = order[codes[order] >= 0]
            events, codes = take_rows(events, order), codes[order]
        summarise_all = dedup_summaries if cfg.dedup else service_summaries
        summaries = summarise_all(events, codes, len(names), watermark_ms, proc_ms, cfg)
        bounds = np.searchsorted(codes, np.arange(len(names) + 1))
        starts = bounds[:-1]
        newest = np.maximum.reduceat(events["event_ms"], starts) if len(starts) else starts
        for i, (service, one) in enumerate(zip(names, summaries, strict=True)):
            first = int(starts[i])
            _row(
                cols,
                kind=SummaryKind.SERVICE,
                service=service,
                event_time=int(newest[i]),
                partition=int(events["partition"][first]),
                offset=int(events["offset"][first]),
                count=int(bounds[i + 1] - first),
                blob=one.to_bytes(),
            )
    is_beat = kind == RecordKind.HEARTBEAT
    if is_beat.any():
        _row(
            cols,
            kind=SummaryKind.HEARTBEAT,
            event_time=int(pdf["event_ms"].to_numpy(dtype=np.int64, na_value=0)[is_beat].max()),
            partition=int(pdf["partition"].to_numpy(dtype=np.int64)[is_beat][0]),
            offset=int(pdf["offset"].to_numpy(dtype=np.int64)[is_beat][0]),
            count=int(np.count_nonzero(is_beat)),
        )
    dead = pdf[kind == RecordKind.DEAD] if (kind == RecordKind.DEAD).any() else pdf.iloc[0:0]
    for p, o, k, reason, detail, raw, size in zip(
        dead["partition"].tolist(),
        dead["offset"].tolist(),
        dead["kafka_ms"].tolist(),
        dead["reason"].tolist(),
        dead["detail"].tolist(),
        dead["raw"].tolist(),
        dead["raw_size"].tolist(),
        strict=True,
    ):
        _row(
            cols,
            kind=SummaryKind.DEAD,
            partition=int(p),
            offset=int(o),
            kafka_ms=_int_or_none(k),
            reason=reason,
            detail=detail,
            raw=raw,
            raw_size=_int_or_none(size),
        )
    _row(
        cols,
        kind=SummaryKind.TIMES,
        partition=int(pdf["partition"].iloc[0]),
        offset=int(pdf["offset"].iloc[0]),
        count=len(pdf),
        blob=encode_times(pdf["kafka_ms"].to_numpy(dtype=np.float64, na_value=np.nan)),
    )
    return cols


def summary_batch(cols: dict[str, list[Any]]) -> pa.RecordBatch:
    """Summary rows as an Arrow batch of `SUMMARY_ARROW` (what the read task yields)."""
    arrays = []
    for name, typ in zip(SUMMARY_ARROW.names, SUMMARY_ARROW.types, strict=True):
        if name == "event_time":
            ms = [None if v is None else v * 1000 for v in cols[name]]
            arrays.append(pa.array(ms, type=pa.int64()).cast(typ))
        else:
            arrays.append(pa.array(cols[name], type=typ))
    return pa.RecordBatch.from_arrays(arrays, schema=SUMMARY_ARROW)


def summary_frame(cols: dict[str, list[Any]]) -> pd.DataFrame:
    """Summary rows as a pandas frame, as the stateful step receives them from Spark."""
    return summary_batch(cols).to_pandas()
