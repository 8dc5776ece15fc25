"""A chunk's summaries of every service of one state shard, as columns: what crosses the shuffle.

A read task summarises each chunk of records per service (jobs/summary/summarise.py). With a
summary row per service and chunk, a chunk of 10,000 services made 10,000 rows, each with its
own header to write, ship and parse, and the state step decoded them one by one. A
`ChunkSummary` holds the summaries of all the chunk's services that live in one state shard
(jobs/summary/shards.py), each kind of fact as one table whose `service` column indexes `names`:
one row per shard and chunk leaves the read task, and the state step handles its services'
panes, late aggregates, counts and ids as arrays.

`service(i)` gives one service's part as a `ServiceSummary` (what the de-duplication's redo
and the tests read); `of_services` builds a chunk from such summaries. Pure: no Spark.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from jobs.parse.columns import Columns, decode_columns, encode_columns, take_rows
from sketches.preamble import CHUNK_SUMMARY
from tidegauge.core.windows import ARRIVAL_DOMAINS

__all__ = ["ChunkSummary", "ServiceSummary", "Table", "concat_tables", "empty_table", "take_table"]

#: Column name -> equal-length numpy arrays (int64, or uint64 for ids, float64 for lateness).
Table = dict[str, npt.NDArray[Any]]

_I64 = np.dtype("<i8")
#: The tables of a chunk summary and their columns; `service` first (an index into `names`).
_TABLES: dict[str, tuple[tuple[str, np.dtype[Any]], ...]] = {
    # per service (row i is names[i]): its first record, how many events, the newest event
    # time, and how many duplicates it dropped
    "services": (
        ("partition", _I64),
        ("offset", _I64),
        ("count", _I64),
        ("newest", _I64),
        ("duplicate_events", _I64),
    ),
    "panes": (("service", _I64), ("start", _I64)),
    "late": (("service", _I64), ("spec", _I64), ("start", _I64)),
    "stragglers": (("service", _I64), ("spec", _I64), ("start", _I64), ("count", _I64)),
    "arrivals": (
        ("service", _I64),
        ("domain", _I64),
        ("start", _I64),
        ("events", _I64),
        ("late", _I64),
        ("stragglers", _I64),
    ),
    "duplicates": (("service", _I64), ("spec", _I64), ("start", _I64), ("count", _I64)),
    "ids": (("service", _I64), ("id", np.dtype("<u8")), ("horizon", _I64)),
    "sessions": (("service", _I64), ("event_ms", _I64), ("lateness", np.dtype("<f8"))),
    "rows": (("service", _I64),),
    "late_events": (("service", _I64),),
}


def empty_table(name: str) -> Table:
    """A table of `name` with no rows."""
    return {c: np.empty(0, dtype=t) for c, t in _TABLES[name]}


def _empty_tables() -> dict[str, Table]:
    return {name: empty_table(name) for name in _TABLES}


def take_table(table: Table, rows: npt.NDArray[Any]) -> Table:
    """The rows `rows` (positions or a mask) of every column."""
    return {c: v[rows] for c, v in table.items()}


def concat_tables(tables: Sequence[Table]) -> Table:
    """Tables of the same columns, one after another."""
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


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
    #: De-duplication (jobs/panes/dedup.py): the chunk's duplicates per (spec key, window
    #: start); the id hashes and horizons of the events it accepted (each id once); and those
    #: events' columns, from which the stateful step summarises again without the ones it finds
    #: to be duplicates of earlier events (`redo_summary`).
    duplicates: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Duplicate events (each once, however many windows counted it).
    duplicate_events: int = 0
    ids: npt.NDArray[np.uint64] = field(default_factory=lambda: _empty(np.uint64))
    horizons: npt.NDArray[np.int64] = field(default_factory=lambda: _empty(np.int64))
    rows: Columns = field(default_factory=dict)


def _empty(dtype: Any) -> npt.NDArray[Any]:
    """A read-only empty array of `dtype`, shared: a summary is made per service and chunk."""
    out = _EMPTY.get(dtype)
    if out is None:
        out = _EMPTY[dtype] = np.empty(0, dtype=dtype)
        out.flags.writeable = False
    return out


_EMPTY: dict[Any, npt.NDArray[Any]] = {}


@dataclass
class ChunkSummary:
    """The summaries of one chunk's services of one state shard (see the module docstring)."""

    watermark_ms: int
    proc_ms: int | None
    #: The state shard these services live in, and how many shards the job has.
    shard: int = 0
    shards: int = 1
    #: The shard's quota of `--max-services` names in this batch (None: no limit;
    #: jobs/summary/slots.py).
    slots: int | None = None
    #: The services, sorted; every table's `service` column indexes this list.
    names: list[str] = field(default_factory=list)
    #: Window spec keys the `spec` columns index.
    specs: tuple[str, ...] = ()
    tables: dict[str, Table] = field(default_factory=_empty_tables)
    #: `WindowAgg` bytes of each `panes` row, `LateAgg` bytes of each `late` row.
    panes: list[bytes] = field(default_factory=list)
    late: list[bytes] = field(default_factory=list)
    #: Session jobs: each `sessions` row's user (None: no user).
    users: npt.NDArray[Any] = field(default_factory=lambda: np.empty(0, dtype=object))
    #: The accepted events of services with ids (`rows` table: their service), for the redo.
    rows: Columns = field(default_factory=dict)
    #: Each service's newest late events (`late_events` table: their service).
    late_events: Columns = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def bounds(self, table: str) -> list[int]:
        """Where each service's rows of `table` start and end (rows are grouped by service)."""
        return np.searchsorted(self.tables[table]["service"], np.arange(len(self) + 1)).tolist()

    def service(self, i: int) -> ServiceSummary:
        """Service `i`'s part of the chunk, as its own summary."""
        out = ServiceSummary(self.watermark_ms, self.proc_ms)
        t = self.tables
        lo, hi = self._range("panes", i)
        out.panes = dict(zip(t["panes"]["start"][lo:hi].tolist(), self.panes[lo:hi], strict=True))
        lo, hi = self._range("late", i)
        keys = [self.specs[s] for s in t["late"]["spec"][lo:hi].tolist()]
        starts = t["late"]["start"][lo:hi].tolist()
        out.late = dict(zip(zip(keys, starts, strict=True), self.late[lo:hi], strict=True))
        out.stragglers = self._counts("stragglers", i)
        out.duplicates = self._counts("duplicates", i)
        lo, hi = self._range("arrivals", i)
        a = t["arrivals"]
        for d, s, n, late, strag in zip(
            a["domain"][lo:hi].tolist(),
            a["start"][lo:hi].tolist(),
            a["events"][lo:hi].tolist(),
            a["late"][lo:hi].tolist(),
            a["stragglers"][lo:hi].tolist(),
            strict=True,
        ):
            out.arrivals[(ARRIVAL_DOMAINS[d], s)] = (n, late, strag)
        lo, hi = self._range("sessions", i)
        if hi > lo:
            out.users = self.users[lo:hi]
            out.event_ms = t["sessions"]["event_ms"][lo:hi]
            out.lateness = t["sessions"]["lateness"][lo:hi]
        out.duplicate_events = int(t["services"]["duplicate_events"][i])
        lo, hi = self._range("ids", i)
        out.ids, out.horizons = t["ids"]["id"][lo:hi], t["ids"]["horizon"][lo:hi]
        lo, hi = self._range("rows", i)
        if hi > lo:
            out.rows = take_rows(self.rows, np.arange(lo, hi))
        lo, hi = self._range("late_events", i)
        if hi > lo:
            out.late_events = take_rows(self.late_events, np.arange(lo, hi))
        return out

    def services(self) -> list[ServiceSummary]:
        """`service(i)` of every service."""
        return [self.service(i) for i in range(len(self))]

    def _range(self, table: str, i: int) -> tuple[int, int]:
        col = self.tables[table]["service"]
        lo, hi = np.searchsorted(col, [i, i + 1]).tolist()
        return lo, hi

    def _counts(self, table: str, i: int) -> Counter[tuple[str, int]]:
        lo, hi = self._range(table, i)
        t = self.tables[table]
        keys = [self.specs[s] for s in t["spec"][lo:hi].tolist()]
        starts, counts = t["start"][lo:hi].tolist(), t["count"][lo:hi].tolist()
        return Counter(dict(zip(zip(keys, starts, strict=True), counts, strict=True)))

    @classmethod
    def of_services(
        cls,
        names: Sequence[str],
        summaries: Sequence[ServiceSummary],
        services: Table,
        specs: tuple[str, ...],
        shard: int = 0,
        shards: int = 1,
    ) -> ChunkSummary:
        """A chunk of the given services' summaries (`services`: their per-service table)."""
        first = summaries[0] if summaries else ServiceSummary(0, None)
        out = cls(first.watermark_ms, first.proc_ms, shard, shards, None, list(names), specs)
        spec_of = {k: i for i, k in enumerate(specs)}
        domain_of = {d: i for i, d in enumerate(ARRIVAL_DOMAINS)}
        rows: dict[str, list[list[Any]]] = {name: [] for name in _TABLES}
        users, row_parts, late_parts = [], [], []
        for i, s in enumerate(summaries):
            for start, blob in sorted(s.panes.items()):
                rows["panes"].append([i, start])
                out.panes.append(blob)
            for (key, start), blob in sorted(s.late.items()):
                rows["late"].append([i, spec_of[key], start])
                out.late.append(blob)
            for (key, start), n in sorted(s.stragglers.items()):
                rows["stragglers"].append([i, spec_of[key], start, n])
            for (key, start), n in sorted(s.duplicates.items()):
                rows["duplicates"].append([i, spec_of[key], start, n])
            for (domain, start), counts in sorted(s.arrivals.items()):
                rows["arrivals"].append([i, domain_of[domain], start, *counts])
            rows["ids"] += [[i, h, z] for h, z in zip(s.ids, s.horizons, strict=True)]
            rows["sessions"] += [
                [i, e, x] for e, x in zip(s.event_ms.tolist(), s.lateness.tolist(), strict=True)
            ]
            users.append(s.users)
            if s.rows:
                n = len(next(iter(s.rows.values())))
                rows["rows"] += [[i]] * n
                row_parts.append(s.rows)
            if s.late_events:
                n = len(next(iter(s.late_events.values())))
                rows["late_events"] += [[i]] * n
                late_parts.append(s.late_events)
        for name, columns in _TABLES.items():
            if name != "services":
                out.tables[name] = _from_rows(rows[name], columns)
        services = dict(services)
        services["duplicate_events"] = np.array(
            [s.duplicate_events for s in summaries], dtype=np.int64
        )
        out.tables["services"] = services
        out.users = np.concatenate(users) if users else np.empty(0, dtype=object)
        out.rows = _concat_columns(row_parts)
        out.late_events = _concat_columns(late_parts)
        return out

    def to_bytes(self) -> bytes:
        """Versioned blob: header (JSON: names, specs, table sizes), tables, blobs, columns."""
        users = json.dumps(self.users.tolist()).encode() if len(self.users) else b""
        rows = encode_columns(self.rows) if self.rows else b""
        late_events = encode_columns(self.late_events) if self.late_events else b""
        head = json.dumps(
            {
                "wm": self.watermark_ms,
                "proc": self.proc_ms,
                "shard": [self.shard, self.shards],
                "slots": self.slots,
                "names": self.names,
                "specs": list(self.specs),
                "sizes": {name: _rows_of(self.tables[name]) for name in _TABLES},
                "bytes": [len(users), len(rows), len(late_events)],
            },
            separators=(",", ":"),
        ).encode()
        parts = [CHUNK_SUMMARY.preamble, _HEAD.pack(len(head)), head]
        for name, columns in _TABLES.items():
            for c, dtype in columns:
                values = np.asarray(self.tables[name][c], dtype=dtype)
                parts.append(_pack(values) if dtype == _I64 else values.tobytes())
        for blobs in (self.panes, self.late):
            parts.append(np.fromiter(map(len, blobs), _I64, len(blobs)).tobytes())
        parts += [*self.panes, *self.late, users, rows, late_events]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes) -> ChunkSummary:
        """Inverse of `to_bytes`; ValueError on anything else."""
        CHUNK_SUMMARY.check(blob)
        if len(blob) < _HEAD_END:
            raise ValueError("chunk summary: too short")
        try:
            (n_head,) = _HEAD.unpack_from(blob, CHUNK_SUMMARY.size)
            pos = _HEAD_END + n_head
            head = json.loads(blob[_HEAD_END:pos])
            shard, shards = head["shard"]
            out = cls(
                head["wm"],
                head["proc"],
                shard,
                shards,
                head["slots"],
                head["names"],
                tuple(head["specs"]),
            )
            sizes = head["sizes"]
            for name, columns in _TABLES.items():
                table = {}
                for c, dtype in columns:
                    n = sizes[name]
                    if dtype == _I64:
                        table[c], pos = _unpack(blob, pos, n)
                    else:
                        table[c] = np.frombuffer(blob, dtype, n, pos).astype(
                            dtype.newbyteorder("=")
                        )
                        pos += n * dtype.itemsize
                out.tables[name] = table
            n_panes, n_late = sizes["panes"], sizes["late"]
            pane_sizes = np.frombuffer(blob, "<i8", n_panes, pos)
            pos += 8 * n_panes
            late_sizes = np.frombuffer(blob, "<i8", n_late, pos)
            pos += 8 * n_late
            out.panes, pos = _split(blob, pos, pane_sizes)
            out.late, pos = _split(blob, pos, late_sizes)
            b_users, b_rows, b_late_events = head["bytes"]
            if b_users:
                out.users = np.array(json.loads(blob[pos : pos + b_users]), dtype=object)
            pos += b_users
            if b_rows:
                out.rows = decode_columns(blob[pos : pos + b_rows])
            pos += b_rows
            if b_late_events:
                out.late_events = decode_columns(blob[pos : pos + b_late_events])
            pos += b_late_events
        except (struct.error, KeyError, TypeError) as e:
            raise ValueError(f"chunk summary: malformed ({e})") from e
        if pos != len(blob):
            raise ValueError("chunk summary: length mismatch")
        return out


#: After the preamble (magic b"TGCS", version: sketches/preamble.py): the JSON header's length.
_HEAD = struct.Struct("<I")
_HEAD_END = CHUNK_SUMMARY.size + _HEAD.size


def _from_rows(rows: list[list[Any]], columns: tuple[tuple[str, np.dtype[Any]], ...]) -> Table:
    if not rows:
        return {c: np.empty(0, dtype=t) for c, t in columns}
    return {
        c: np.array([r[k] for r in rows], dtype=t.newbyteorder("="))
        for k, (c, t) in enumerate(columns)
    }


#: A packed integer column: base, step, byte width of each value (0: all equal to the base).
_INTS = struct.Struct("<qQB")
_WIDTHS: dict[int, np.dtype[Any]] = {
    1: np.dtype("<u1"),
    2: np.dtype("<u2"),
    4: np.dtype("<u4"),
    8: np.dtype("<u8"),
}


def _pack(values: npt.NDArray[np.int64]) -> bytes:
    """An int64 column as (value - base) / step in the narrowest unsigned width that holds it.

    Pane starts, window starts and horizons are multiples of a window's slide, service codes
    are small: most columns take one or two bytes a value instead of eight.
    """
    if not len(values):
        return _INTS.pack(0, 1, 0)
    base = int(values.min())
    offsets = values.astype(np.uint64) - np.uint64(base & 0xFFFFFFFFFFFFFFFF)
    step = int(np.gcd.reduce(offsets)) if len(values) > 1 else 0
    if step == 0:
        return _INTS.pack(base, 1, 0)
    scaled = offsets // np.uint64(step)
    top = int(scaled.max())
    width = next(w for w in (1, 2, 4, 8) if top < 1 << (8 * w))
    return _INTS.pack(base, step, width) + scaled.astype(_WIDTHS[width]).tobytes()


def _unpack(blob: bytes, pos: int, n: int) -> tuple[npt.NDArray[np.int64], int]:
    """Inverse of `_pack` for a column of `n` values at `pos`; and the position after it."""
    base, step, width = _INTS.unpack_from(blob, pos)
    pos += _INTS.size
    if not width:
        return np.full(n, base, np.int64), pos
    if width not in _WIDTHS:
        raise ValueError(f"chunk summary: bad column width {width}")
    scaled = np.frombuffer(blob, _WIDTHS[width], n, pos).astype(np.uint64)
    values = scaled * np.uint64(step) + np.uint64(base & 0xFFFFFFFFFFFFFFFF)
    return values.view(np.int64), pos + n * width


def _rows_of(table: Table) -> int:
    return len(next(iter(table.values())))


def _split(blob: bytes, pos: int, sizes: npt.NDArray[np.int64]) -> tuple[list[bytes], int]:
    """The byte strings of `sizes` joined from `pos` on, and the position after them."""
    ends = (pos + np.cumsum(sizes)).tolist()
    if ends and ends[-1] > len(blob):
        raise ValueError("chunk summary: truncated")
    starts = [pos, *ends[:-1]] if ends else []
    return [blob[a:b] for a, b in zip(starts, ends, strict=True)], (ends[-1] if ends else pos)


def _concat_columns(parts: Sequence[Columns]) -> Columns:
    """Several sets of columns as one (empty: none); a column some lack is null/NaN there."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    names = list(dict.fromkeys(name for p in parts for name in p))
    out: Columns = {}
    for name in names:
        like = next(p[name] for p in parts if name in p)
        cols = [
            p[name] if name in p else _missing(like, len(next(iter(p.values())))) for p in parts
        ]
        if isinstance(like, pa.Array):
            out[name] = pa.concat_arrays(cols)
        else:
            out[name] = np.concatenate(cols)
    return out


def _missing(like: Any, n: int) -> Any:
    """`n` absent values of the type of column `like`."""
    if isinstance(like, pa.Array):
        return pa.nulls(n, like.type)
    if like.dtype == object:
        return np.full(n, None, dtype=object)
    return np.full(n, np.nan)
