"""Per-service event-time windows in Spark state; Spark's watermark rule applied to raw rows.

Why `applyInPandasWithState` and not `groupBy(window(...)).count()`: the built-in aggregation drops
late rows before any code of ours sees them, and one streaming query can only have one sink.
Here the stateful function sees every raw row of its group, so it can (a) apply exactly Spark's
rule for windowed aggregation (a row is late when its window end <= the watermark in force) while
counting the late rows instead of hiding them, and (b) pass dead letters through to the same
sink. The watermark itself is still Spark's (`withWatermark` upstream, read here through
`GroupState.getCurrentWatermarkMs`), checkpointed with the state. See docs/architecture.md.

Runs on executors. Groups are (group, shard): event groups ("event", shard) each hold the
services that hash to that shard, and every heartbeat is copied into every shard, so a batch of
heartbeats alone still calls every event group: that is how a quiet stream's sessions close and
its state is evicted (Spark's own event-time timeouts would make Spark drop rows older than the
watermark before we can count them as late). Dead letters form one group ("dead", 0).

Besides window results, each batch emits what it decided about time (docs/time.md): late rows
per window (count and lateness digests), stragglers per window, per-event arrival counts in
processing-time and broker-time windows, and the late events themselves (capped).
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from jobs.parse import KIND_DEAD, KIND_EVENT
from jobs.sessions import Sessions
from sketches.hll import hash32
from tidegauge.core.events import BUILT_IN_FIELDS, EventField, event_fields
from tidegauge.core.metrics import LateAgg, WindowAgg
from tidegauge.core.plugins import ensure_plugins
from tidegauge.core.registry import metrics
from tidegauge.core.windows import (
    LATE,
    STRAGGLER,
    WindowSpec,
    classify,
    classify_many,
    frontier,
    is_late,
    late_mask,
    pane_size,
    primary_size,
    tumbling_start,
    tumbling_starts,
    window_end,
)

__all__ = [
    "DOMAINS",
    "OUTPUT_SCHEMA",
    "STATE_SCHEMA",
    "Added",
    "DeadCounts",
    "ServiceWindows",
    "ShardState",
    "StateConfig",
    "arrival_counts",
    "make_state_fn",
]

#: Time domains of the arrival series, beside event time: when the job processed an event
#: (its micro-batch's timestamp) and when the broker received it (the Kafka record timestamp).
DOMAINS = ("processing", "broker")

STATE_SCHEMA = "blob binary"

#: One schema for every output kind (columns that do not apply are null):
#: window     spec, service, window_start, count, metrics (JSON), agg (WindowAgg bytes): absolute
#: late       spec, service, window_start, count, agg (LateAgg bytes): late rows of this batch
#: straggler  spec, service, window_start, count   (stragglers of this batch for that window)
#: arrivals   spec (a DOMAIN), service, window_start, count, metrics (JSON: late, stragglers,
#:            proc_ms): events of this batch by processing-time or broker-time window
#: late_event service, window_start, partition, offset, kafka_ms, metrics (JSON: the event)
#: dead       partition, offset, kafka_ms, reason, detail, raw, raw_size
#: dead_count reason, count                  (absolute count so far)
OUTPUT_SCHEMA = (
    "kind string, spec string, service string, window_start long, count long, metrics string, "
    "agg binary, partition int, offset long, kafka_ms long, reason string, detail string, "
    "raw binary, raw_size int"
)
_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]

_STATE_MAGIC = b"TGSW"
_STATE_VERSION = 2
_PANE = struct.Struct("<qI")  # pane start (ms), length of its WindowAgg bytes


@dataclass
class Added:
    """What one batch of one service did to its windows (see `ServiceWindows.add`)."""

    #: Pane starts that received events.
    touched: set[int] = field(default_factory=set)
    #: (spec key, window start) -> the late events of that window in this batch.
    late: dict[tuple[str, int], LateAgg] = field(default_factory=dict)
    #: (spec key, window start) -> stragglers of that window in this batch.
    stragglers: Counter[tuple[str, int]] = field(default_factory=Counter)

    def late_counts(self) -> Counter[tuple[str, int]]:
        """Late events per (spec key, window start)."""
        return Counter({k: v.count for k, v in self.late.items()})


@dataclass
class ServiceWindows:
    """One service's open panes (tumbling windows of `pane_ms`) and the window specs built on them.

    A row is added to its pane unless every window containing that pane (in every spec) has
    already ended at or before the watermark; a window whose end <= watermark counts the row as
    late instead. Windows with end > watermark that contain an updated pane are re-emitted.
    """

    specs: tuple[WindowSpec, ...]
    panes: dict[int, WindowAgg] = field(default_factory=dict)
    sessions: Sessions | None = None

    def __post_init__(self) -> None:
        self.window_specs = tuple(s for s in self.specs if s.kind != "session")
        session_specs = [s for s in self.specs if s.kind == "session"]
        if len(session_specs) > 1:
            raise ValueError("at most one --session-gap")
        if session_specs and self.sessions is None:
            self.sessions = Sessions(session_specs[0])
        self.pane_ms = pane_size(self.window_specs)
        self._sessions_touched: set[int] = set()

    def _last_end(self, pane_start: int) -> int:
        """End of the last window (any spec) that contains the pane."""
        return max(s.last_end_containing(pane_start) for s in self.window_specs)

    def add(
        self,
        event_ms: npt.NDArray[np.int64],
        latency_ms: npt.NDArray[np.float64],
        status: npt.NDArray[np.int64],
        users: npt.NDArray[Any],
        watermark_ms: int,
        arrival_ms: npt.NDArray[np.float64] | None = None,
        frontier_ms: int | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> Added:
        """Add a batch (watermark in force, frontier = max event time seen before it).

        `arrival_ms` is each event's broker timestamp (NaN when unknown); lateness is
        arrival - event time. Every (window, event) pair is classified by `classify`: late
        pairs go to the result's `late` (never to a pane), stragglers are counted per window.
        `extra` holds the columns of registered event fields (one entry per event), which
        registered metrics read.
        """
        added = Added()
        lateness = None
        if arrival_ms is not None:
            lateness = np.asarray(arrival_ms, dtype=np.float64) - event_ms
        if self.sessions is not None:
            self._sessions_touched |= self.sessions.add(users, event_ms, watermark_ms)
            self._session_late(added, event_ms, users, lateness, watermark_ms, frontier_ms)
        if not len(event_ms):
            return added
        valid = pd.notna(users)
        hashes = hash32(users[valid])  # once per batch; each pane takes its share
        starts = tumbling_starts(event_ms, self.pane_ms)
        uniq, inverse = np.unique(starts, return_inverse=True)
        for i, pane in enumerate(uniq.tolist()):
            mask = inverse == i
            n = int(np.count_nonzero(mask))
            pane_lateness = np.full(n, np.nan) if lateness is None else lateness[mask]
            for spec in self.window_specs:
                for w in spec.windows_containing(pane, self.pane_ms):
                    end = spec.end(w)
                    kind = classify(end, watermark_ms, frontier_ms)
                    if kind == LATE:
                        overdue = 0 if frontier_ms is None else frontier_ms - end
                        added.late.setdefault((spec.key, w), LateAgg()).add(pane_lateness, overdue)
                    elif kind == STRAGGLER:
                        added.stragglers[(spec.key, w)] += n
            if is_late(self._last_end(pane), watermark_ms):
                continue
            agg = self.panes.get(pane)
            if agg is None:
                agg = self.panes[pane] = WindowAgg()
            overdue_ms = None
            if frontier_ms is not None and frontier_ms >= pane + self.pane_ms:
                overdue_ms = np.full(n, float(frontier_ms - pane - self.pane_ms))
            agg.add_hashed(
                latency_ms[mask],
                status[mask],
                hashes[mask[valid]],
                None if lateness is None else pane_lateness,
                overdue_ms,
                {name: col[mask] for name, col in extra.items()} if extra else None,
            )
            added.touched.add(pane)
        return added

    def _session_late(
        self,
        added: Added,
        event_ms: npt.NDArray[np.int64],
        users: npt.NDArray[Any],
        lateness: npt.NDArray[np.float64] | None,
        watermark_ms: int,
        frontier_ms: int | None,
    ) -> None:
        """Count the events `Sessions.add` ignored (their own session was over) as late.

        They are keyed by the session spec and the bucket of their event time, so late counts
        and the what-if table cover session windows too. Overdue = frontier - (event + gap).
        """
        assert self.sessions is not None
        spec = self.sessions.spec
        ends = event_ms + spec.gap_ms
        late = pd.notna(users) & late_mask(ends, watermark_ms)
        if not late.any():
            return
        buckets = tumbling_starts(event_ms[late], spec.size_ms)
        values = np.full(len(event_ms), np.nan) if lateness is None else lateness
        overdue = (
            np.zeros(len(buckets)) if frontier_ms is None else (frontier_ms - ends[late]) * 1.0
        )
        for b in np.unique(buckets).tolist():
            sel = buckets == b
            added.late.setdefault((spec.key, b), LateAgg()).add(
                values[late][sel], np.maximum(overdue[sel], 0.0)
            )

    def windows(
        self, panes: set[int], watermark_ms: int
    ) -> dict[tuple[WindowSpec, int], WindowAgg]:
        """The still-open windows (end > watermark) containing any of `panes`, merged from panes."""
        wanted = {
            (spec, w)
            for pane in panes
            for spec in self.window_specs
            for w in spec.windows_containing(pane, self.pane_ms)
            if not is_late(spec.end(w), watermark_ms)
        }
        out = {}
        for spec, w in wanted:
            have = [p for p in spec.panes_of(w, self.pane_ms) if p in self.panes]
            if len(have) == 1 and window_end(have[0], self.pane_ms) == spec.end(w):
                out[(spec, w)] = self.panes[have[0]]
                continue
            # Overdue is measured against each pane's end; re-base it on the window's end.
            shifts = [float(window_end(p, self.pane_ms) - spec.end(w)) for p in have]
            out[(spec, w)] = WindowAgg.merged((self.panes[p] for p in have), shifts)
        if self.sessions is not None:
            for b in self._sessions_touched:
                out[(self.sessions.spec, b)] = self.sessions.buckets[b]
            self._sessions_touched = set()
        return out

    def evict(self, watermark_ms: int) -> list[int]:
        """Forget panes no open window needs any more; return their starts."""
        gone = [p for p in self.panes if is_late(self._last_end(p), watermark_ms)]
        for p in gone:
            del self.panes[p]
        if self.sessions is not None:
            self.sessions.evict(watermark_ms)
        return gone

    @property
    def is_empty(self) -> bool:
        """Nothing left to keep: no pane, no open session, no session bucket."""
        s = self.sessions
        return not self.panes and (s is None or (not len(s.users) and not s.buckets))

    def to_bytes(self) -> bytes:
        """Versioned state blob: header (specs), then each pane's WindowAgg bytes."""
        sessions = self.sessions.to_bytes() if self.sessions is not None else b""
        head = json.dumps(
            {
                "specs": [s.key for s in self.specs],
                "sessions": len(sessions),
                "panes": len(self.panes),
            }
        )
        parts = [
            _STATE_MAGIC,
            struct.pack("<BI", _STATE_VERSION, len(head)),
            head.encode(),
            sessions,
        ]
        for start, agg in sorted(self.panes.items()):
            blob = agg.to_bytes()
            parts += [_PANE.pack(start, len(blob)), blob]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes, specs: tuple[WindowSpec, ...]) -> ServiceWindows:
        """Inverse of `to_bytes`; refuses state written for other window specs."""
        if blob[:4] != _STATE_MAGIC:
            raise ValueError(
                "the checkpoint holds window state from an older Tidegauge version: "
                "use a new --checkpoint directory"
            )
        if len(blob) < 9:
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        version, n_head = struct.unpack_from("<BI", blob, 4)
        if version != _STATE_VERSION:
            raise ValueError(f"window state version {version} is not {_STATE_VERSION}")
        pos = 9 + n_head
        head = json.loads(blob[9:pos])
        stored = tuple(head["specs"])
        if sorted(stored) != sorted(s.key for s in specs):
            raise ValueError(
                f"checkpoint holds windows {list(stored)} but the job asks for "
                f"{[s.key for s in specs]}: use a new --checkpoint directory to change --window"
            )
        n_sessions = head.get("sessions", 0)
        session_spec = next((s for s in specs if s.kind == "session"), None)
        sessions = None
        if n_sessions and session_spec is not None:
            sessions = Sessions.from_bytes(blob[pos : pos + n_sessions], session_spec)
        pos += n_sessions
        panes = {}
        while pos < len(blob):
            if pos + _PANE.size > len(blob):
                raise ValueError("window state is truncated: use a new --checkpoint directory")
            start, n = _PANE.unpack_from(blob, pos)
            pos += _PANE.size
            panes[start] = WindowAgg.from_bytes(blob[pos : pos + n])
            pos += n
        if len(panes) != head.get("panes", len(panes)):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        return cls(specs, panes, sessions)


@dataclass
class DeadCounts:
    """Dead letters seen so far, by reason (absolute, so the sink can overwrite)."""

    by_reason: dict[str, int] = field(default_factory=dict)

    def add(self, reasons: Iterable[str]) -> None:
        """Count a batch of reasons."""
        for r in reasons:
            self.by_reason[r] = self.by_reason.get(r, 0) + 1

    def to_bytes(self) -> bytes:
        """Versioned state blob."""
        return json.dumps({"v": 1, "by_reason": self.by_reason}).encode()

    @classmethod
    def from_bytes(cls, blob: bytes) -> DeadCounts:
        """Inverse of `to_bytes`."""
        return cls(dict(json.loads(blob)["by_reason"]))


def _frame(rows: dict[str, list[Any]]) -> pd.DataFrame:
    n = max((len(v) for v in rows.values()), default=0)
    return pd.DataFrame({c: rows.get(c, [None] * n) for c in _COLUMNS})


def _metric_names() -> tuple[str, ...]:
    return tuple(m.name for m in metrics())


@dataclass(frozen=True)
class StateConfig:
    """What the state function needs from the job's configuration (pickled to executors)."""

    specs: tuple[WindowSpec, ...]
    allowed_lateness_ms: int = 0
    #: Late events kept per group and batch for the late store (the store itself is capped too).
    late_events_max: int = 1_000
    #: Event groups; fixed for a checkpoint (services are hashed onto shards).
    shards: int = 1
    #: Plugin modules of the driver when the query was built, and the metric and event field
    #: names they give: executors load the same plugins and check they got the same registry.
    plugins: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = field(default_factory=_metric_names)
    fields: tuple[EventField, ...] = field(default_factory=event_fields)

    def __post_init__(self) -> None:
        if self.allowed_lateness_ms < 0:
            raise ValueError("allowed lateness must be >= 0")
        if self.shards < 1:
            raise ValueError("shards must be >= 1")
        if self.late_events_max < 0:
            raise ValueError("late_events_max must be >= 0")

    @property
    def primary_ms(self) -> int:
        """Window size of the per-event views (`tidegauge.core.windows.primary_size`)."""
        return primary_size(self.specs)


_SHARD_MAGIC = b"TGSH"
_SHARD_HEAD = struct.Struct("<4sBII")  # magic, version, shards, services
_SHARD_VERSION = 1
_SERVICE = struct.Struct("<II")  # len(name), len(ServiceWindows bytes)


@dataclass
class ShardState:
    """The state of one event group: the windows of every service hashed onto the shard."""

    shards: int
    services: dict[str, ServiceWindows] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Versioned blob: header, then (name, ServiceWindows bytes) per service, sorted."""
        parts = [_SHARD_HEAD.pack(_SHARD_MAGIC, _SHARD_VERSION, self.shards, len(self.services))]
        for name, sw in sorted(self.services.items()):
            raw_name, blob = name.encode(), sw.to_bytes()
            parts += [_SERVICE.pack(len(raw_name), len(blob)), raw_name, blob]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes, cfg: StateConfig) -> ShardState:
        """Inverse of `to_bytes`; refuses state of another shard count or window specs."""
        if blob[:4] != _SHARD_MAGIC or len(blob) < _SHARD_HEAD.size:
            raise ValueError(
                "the checkpoint holds window state from an older Tidegauge version: "
                "use a new --checkpoint directory"
            )
        _, version, shards, n = _SHARD_HEAD.unpack_from(blob)
        if version != _SHARD_VERSION:
            raise ValueError(
                f"shard state version {version} is not {_SHARD_VERSION}: "
                "use a new --checkpoint directory"
            )
        if shards != cfg.shards:
            raise ValueError(
                f"checkpoint state was written with {shards} state shards, the job has "
                f"{cfg.shards}: keep --state-shards or use a new --checkpoint directory"
            )
        pos = _SHARD_HEAD.size
        services = {}
        try:
            for _ in range(n):
                n_name, n_blob = _SERVICE.unpack_from(blob, pos)
                pos += _SERVICE.size
                name = blob[pos : pos + n_name].decode()
                pos += n_name
                services[name] = ServiceWindows.from_bytes(blob[pos : pos + n_blob], cfg.specs)
                pos += n_blob
        except struct.error as e:
            raise ValueError("window state is truncated: use a new --checkpoint directory") from e
        if pos != len(blob):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        return cls(shards, services)


def arrival_counts(
    bucket_ms: npt.NDArray[np.int64], kinds: npt.NDArray[np.int64]
) -> dict[int, tuple[int, int, int]]:
    """Window start -> (events, late, stragglers) of one batch, from per-event buckets/classes."""
    out: dict[int, tuple[int, int, int]] = {}
    if not len(bucket_ms):
        return out
    uniq, inverse = np.unique(bucket_ms, return_inverse=True)
    n = np.bincount(inverse)
    late = np.bincount(inverse, weights=kinds == LATE).astype(np.int64)
    strag = np.bincount(inverse, weights=kinds == STRAGGLER).astype(np.int64)
    for i, b in enumerate(uniq.tolist()):
        out[b] = (int(n[i]), int(late[i]), int(strag[i]))
    return out


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


def _classes(
    event_ms: npt.NDArray[np.int64], size_ms: int, watermark: int, front: int | None
) -> npt.NDArray[np.int64]:
    """Vectorised `classify` for tumbling windows of `size_ms`."""
    return classify_many(tumbling_starts(event_ms, size_ms) + size_ms, watermark, front)


def _service_batch(
    rows: dict[str, list[Any]],
    service: str,
    sw: ServiceWindows,
    pdf: pd.DataFrame,
    watermark: int,
    front: int | None,
    proc_ms: int | None,
    cfg: StateConfig,
    late_budget: int,
) -> int:
    """Add one service's events of the batch and append every output row they cause.

    At most `late_budget` late events are kept (the cap is per group and batch, shared by the
    group's services); returns how many were kept.
    """
    event_ms = pdf["event_ms"].to_numpy(dtype=np.int64)
    arrival = pdf["kafka_ms"].to_numpy(dtype=np.float64, na_value=np.nan)
    added = sw.add(
        event_ms,
        pdf["latency_ms"].to_numpy(dtype=np.float64, na_value=np.nan),
        pdf["status"].to_numpy(dtype=np.int64, na_value=-1),
        pdf["user_id"].to_numpy(dtype=object),
        watermark,
        arrival_ms=arrival,
        frontier_ms=front,
        extra=_extra_columns(pdf, cfg.fields),
    )
    results = sw.windows(added.touched, watermark)
    for (spec, start), agg in sorted(results.items(), key=lambda kv: (kv[0][0].key, kv[0][1])):
        _append(
            rows,
            kind="window",
            spec=spec.key,
            service=service,
            window_start=start,
            count=agg.count,
            metrics=json.dumps(agg.metrics(spec.size_ms)),
            agg=agg.to_bytes(),
        )
    for (key, start), late in sorted(added.late.items()):
        _append(
            rows,
            kind="late",
            spec=key,
            service=service,
            window_start=start,
            count=late.count,
            agg=late.to_bytes(),
        )
    for (key, start), n in sorted(added.stragglers.items()):
        _append(rows, kind="straggler", spec=key, service=service, window_start=start, count=n)
    if not len(event_ms):
        return 0
    size = cfg.primary_ms
    classes = _classes(event_ms, size, watermark, front)
    buckets = {}
    if proc_ms is not None:
        buckets["processing"] = np.full(
            len(event_ms), tumbling_start(proc_ms, size), dtype=np.int64
        )
    known = ~np.isnan(arrival)
    if known.any():
        buckets["broker"] = tumbling_starts(arrival[known].astype(np.int64), size)
    for domain, starts in buckets.items():
        kinds = classes if domain == "processing" else classes[known]
        for start, (n, n_late, n_strag) in sorted(arrival_counts(starts, kinds).items()):
            _append(
                rows,
                kind="arrivals",
                spec=domain,
                service=service,
                window_start=start,
                count=n,
                metrics=json.dumps(
                    {"late": n_late, "stragglers": n_strag, "proc_ms": proc_ms},
                    sort_keys=True,
                ),
            )
    late_idx = np.flatnonzero(classes == LATE)[: max(late_budget, 0)]
    if len(late_idx):
        part = pdf.iloc[late_idx]
        for i, (p, o, k, e, eid) in enumerate(
            zip(
                part["partition"].tolist(),
                part["offset"].tolist(),
                part["kafka_ms"].tolist(),
                part["event_ms"].tolist(),
                part["event_id"].tolist(),
                strict=True,
            )
        ):
            start = tumbling_start(e, size)
            k = None if k is None or k != k else int(k)
            _append(
                rows,
                kind="late_event",
                service=service,
                window_start=start,
                partition=p,
                offset=o,
                kafka_ms=k,
                metrics=json.dumps(
                    {
                        "event_id": eid,
                        "event_time": int(e),
                        "window_end": start + size,
                        "watermark": watermark,
                        "behind_ms": watermark - start - size,
                        "lateness_ms": None if k is None else k - int(e),
                        "clock_offset_ms": _int_or_none(part["clock_offset_ms"].iloc[i])
                        if "clock_offset_ms" in part
                        else None,
                    },
                    sort_keys=True,
                ),
            )
    return len(late_idx)


def _int_or_none(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _events(pdfs: Iterator[pd.DataFrame], state: Any, cfg: StateConfig) -> Iterator[pd.DataFrame]:
    watermark = int(state.getCurrentWatermarkMs())
    front = frontier(watermark, cfg.allowed_lateness_ms)
    shard = ShardState.from_bytes(state.get[0], cfg) if state.exists else ShardState(cfg.shards)
    # One add per batch, not per Arrow chunk: how Spark chunks a group depends on shuffle fetch
    # order, and the sketches must depend only on the batch's rows so a replay is byte-identical.
    frames = list(pdfs)
    if not frames:
        return
    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    proc_ms = None
    if "proc_ms" in pdf and len(pdf):
        proc_ms = _int_or_none(pdf["proc_ms"].iloc[0])
    events = pdf[pdf["kind"] == KIND_EVENT]
    if len(events):
        # A stable order of rows inside a batch (Kafka position), whatever the shuffle did.
        events = events.sort_values(["partition", "offset"], kind="stable")
    by_service = {str(k): g for k, g in events.groupby("service", sort=True)} if len(events) else {}
    rows: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    empty = (
        events.iloc[0:0] if len(events) else pdf.iloc[0:0].assign(event_ms=pd.Series(dtype="int64"))
    )
    late_budget = cfg.late_events_max
    for service in sorted(set(by_service) | set(shard.services)):
        sw = shard.services.get(service)
        if sw is None:
            sw = shard.services[service] = ServiceWindows(cfg.specs)
        # A service without events in this batch is still called: its sessions may close.
        part = by_service.get(service, empty)
        late_budget -= _service_batch(
            rows, service, sw, part, watermark, front, proc_ms, cfg, late_budget
        )
        sw.evict(watermark)
        if sw.is_empty:
            del shard.services[service]
    if shard.services:
        state.update((shard.to_bytes(),))
    elif state.exists:
        state.remove()
    yield _frame(rows)


def _append(rows: dict[str, list[Any]], **values: Any) -> None:
    for c in _COLUMNS:
        rows[c].append(values.get(c))


def _dead(pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    counts = DeadCounts.from_bytes(state.get[0]) if state.exists else DeadCounts()
    for pdf in pdfs:
        counts.add(pdf["reason"].tolist())
        out = pdf[["partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size"]].copy()
        out.insert(0, "kind", "dead")
        yield _frame({c: out[c].tolist() for c in out.columns})
    state.update((counts.to_bytes(),))
    yield _frame(
        {
            "kind": ["dead_count"] * len(counts.by_reason),
            "reason": list(counts.by_reason),
            "count": list(counts.by_reason.values()),
        }
    )


def make_state_fn(
    cfg: StateConfig | tuple[WindowSpec, ...],
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The `applyInPandasWithState` function, grouped by (group, shard).

    Group "event" holds events and heartbeats (copied into every shard), "dead" dead letters;
    anything else is drained and ignored.
    """
    config = cfg if isinstance(cfg, StateConfig) else StateConfig(cfg)

    def fn(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        ensure_plugins(config.plugins, config.metric_names, [f.name for f in config.fields])
        group = key[0]
        if group == KIND_EVENT:
            yield from _events(pdfs, state, config)
        elif group == KIND_DEAD:
            yield from _dead(pdfs, state)
        else:
            for _ in pdfs:
                pass

    return fn
