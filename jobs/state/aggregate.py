"""Per-service event-time windows held from batch to batch: the stateful step of the job.

Why a state function of our own and not `groupBy(window(...)).count()`: the built-in aggregation
drops late rows before any code of ours sees them, and one streaming query can only have one sink.
The rule for windowed aggregation (a row is late when its window end <= the watermark in force)
is applied to every record, late ones counted instead of hidden, and dead letters pass through to
the same sink. The watermark itself is Spark's (`withWatermark` upstream, read here through the
`GroupState`-shaped `HeldState.getCurrentWatermarkMs`, jobs/state/held.py). See
docs/architecture.md.

The per-record work happens in the read tasks (jobs/summary/summarise.py): each summarises a chunk
of records per service against the batch's watermark, one `ChunkSummary` per state shard
(jobs/summary/chunk.py). This function places every service's parts in Kafka order
(jobs/state/batch.py), merges them into its windows (and sessions) for all services of the shard
at once, checks that the read tasks used the watermark Spark gives it, and emits what changed.

Runs in the driver's stateful step (jobs/state/step.py) or its state workers. Groups are
(group, shard): event groups ("event", shard) each hold the services that hash to that shard,
and every heartbeat summary is copied into every shard, so a batch of heartbeats alone still
calls every event group: that is how a quiet stream's sessions close and its state is evicted.
Dead letters and the chunks' broker-time histograms form one group ("dead", 0).

Besides window results, each batch emits what it decided about time (docs/time.md): late rows
per window (count and lateness digests), stragglers per window, per-event arrival counts in
processing-time and broker-time windows, the late events themselves (capped), and the broker
timestamps of its records, from which the sink measures freshness (tidegauge/core/freshness.py).

This module is the state function; its parts are modules of their own: the chunk summaries
(jobs/summary/summarise.py, jobs/summary/chunk.py), the batch's parts placed
(jobs/state/batch.py), the panes of a service (jobs/panes/windows.py), the state codec
(jobs/state/codec.py) and the output rows (jobs/state/rows.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from jobs.panes.columnar import Plan, unique_rows, window_aggs
from jobs.panes.windows import Added, ServiceWindows
from jobs.parse.columns import encode_columns
from jobs.state.batch import ShardBatch, check_chunk
from jobs.state.codec import DeadCounts, ShardState
from jobs.state.held import HeldState
from jobs.state.hitters import SliceRouter, forget_gone
from jobs.state.rows import (
    RowKind,
    append_row,
    extend_rows,
    new_rows,
    output_table,
)
from jobs.summary.chunk import ChunkSummary
from jobs.summary.late_events import newest, stored
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import spec_keys
from tidegauge.core.dimensions import SEP, register_dimension_fields
from tidegauge.core.events import ALL_SERVICES, OVERFLOW_SERVICE
from tidegauge.core.late_agg import LateAgg, merge_late
from tidegauge.core.plugins import ensure_plugins, load_plugins
from tidegauge.core.window_aggs import WindowAggs, merge_encoded
from tidegauge.core.windows import ARRIVAL_DOMAINS, WindowSpec, frontier

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["StateGroup", "make_state_fn"]

#: What the state function is handed: the group's summary rows, as Arrow tables (the driver's
#: stateful step) or pandas frames (Spark's `applyInPandasWithState`).
Rows: TypeAlias = "pa.Table | pd.DataFrame"


class StateGroup(StrEnum):
    """The first part of a state group's key: what the group holds."""

    #: ("event", shard): the services hashed to that shard, and every heartbeat.
    EVENT = "event"
    #: ("dead", 0): dead letters and the chunks' broker times.
    DEAD = "dead"


@dataclass
class Overflow:
    """A shard's cardinality guard for one batch: which names went to OVERFLOW_SERVICE.

    `tracked` (the shard state's names) maps each tracked name to the event time of its
    latest events (the newest pane they fell in; the watermark for late ones). A name is
    tracked from its first event while the shard has room, and keeps its slot until it has had
    no events for `idle_ms` of event time and no state is left of it: so a flood of one-off
    names fills the slots once, and does not churn through them window after window.
    """

    budget: int | None
    tracked: dict[str, int]
    watermark: int
    names: set[str] = field(default_factory=set)
    events: int = 0

    def release_idle(self, idle_ms: int, live: Container[str]) -> None:
        """Free the slots of names idle for longer than `idle_ms` (at the batch's watermark)."""
        for name in [n for n, seen in self.tracked.items() if self.watermark - seen > idle_ms]:
            if name not in live:
                del self.tracked[name]

    def route(self, service: str, seen_ms: int) -> str:
        """The service a name's events count under: itself while it is tracked or fits."""
        if service == OVERFLOW_SERVICE or self.budget is None:
            return service
        if service in self.tracked or len(self.tracked) < self.budget:
            self.tracked[service] = max(self.tracked.get(service, seen_ms), seen_ms)
            return service
        self.names.add(service)
        return OVERFLOW_SERVICE


@dataclass
class _Keyed:
    """Encoded parts of a shard's batch by key, for one shard-wide merge (panes, late windows)."""

    #: Every key a part was added for, in first-seen order.
    keys: list[tuple[Any, ...]] = field(default_factory=list)
    #: The parts: (index into `keys`, bytes), in the order added (Kafka order per key).
    parts: list[tuple[int, bytes]] = field(default_factory=list)
    index: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def add(self, key: tuple[Any, ...], blob: bytes) -> None:
        k = self.index.get(key)
        if k is None:
            k = self.index[key] = len(self.keys)
            self.keys.append(key)
        self.parts.append((k, blob))

    def merged_late(self) -> dict[tuple[Any, ...], bytes]:
        """Each key's `LateAgg` parts merged in order (a key of one part: that part)."""
        counts = np.bincount([k for k, _ in self.parts], minlength=len(self.keys))
        out = {self.keys[k]: blob for k, blob in self.parts if counts[k] == 1}
        several = [(k, blob) for k, blob in self.parts if counts[k] > 1]
        if several:
            order = sorted(range(len(several)), key=lambda i: several[i][0])  # stable
            ks = sorted({k for k, _ in several})
            renumber = {k: i for i, k in enumerate(ks)}
            keys = np.array([renumber[several[i][0]] for i in order], np.int64)
            merged = merge_late([several[i][1] for i in order], keys, len(ks))
            out.update(zip([self.keys[k] for k in ks], merged, strict=True))
        return out


def _sessions(
    rows: dict[str, list[Any]],
    services: dict[str, ServiceWindows],
    batch: ShardBatch,
    watermark: int,
    front: int | None,
    late: _Keyed,
) -> None:
    """Fold the batch's events into every service's sessions; emit the sessions' window rows.

    Every service of the shard gets here, with events or not: its sessions may close. The late
    events sessions ignored join the late aggregates (after the chunks' own).
    """
    inputs = batch.sessions()
    index = {name: g for g, name in enumerate(batch.names)}
    nothing = (np.empty(0, dtype=object), np.empty(0, np.int64), np.empty(0))
    for service in sorted(services):
        sw = services[service]
        if sw.sessions is None:
            continue
        added = Added()
        g = index.get(service)
        users, event_ms, lateness = nothing if g is None else inputs.get(g, nothing)
        sw.add_sessions(added, users, event_ms, lateness, watermark, front)
        for (spec, start), agg in sorted(sw.session_windows().items(), key=lambda kv: kv[0][1]):
            _window_row(rows, spec, service, start, agg.count, agg.to_bytes())
        for (key, start), session_late in added.late.items():
            late.add((service, key, start), session_late.to_bytes())


def _summed(table: dict[str, Any], keys: tuple[str, ...], values: tuple[str, ...]) -> list[Any]:
    """Rows of `table` summed by `keys`: [(*key values, *sums)], sorted by the keys."""
    if not len(table[keys[0]]):
        return []
    uniq, inverse = unique_rows(*(table[k] for k in keys))
    sums = [np.bincount(inverse, weights=table[v], minlength=len(uniq[0])) for v in values]
    columns = [u.tolist() for u in uniq] + [s.astype(np.int64).tolist() for s in sums]
    return list(zip(*columns, strict=True))


def _count_rows(
    rows: dict[str, list[Any]],
    batch: ShardBatch,
    late: dict[tuple[Any, ...], bytes],
    specs: tuple[str, ...],
) -> None:
    """The batch's late, straggler, duplicate and arrival rows, for every service at once.

    `late`: the merged late aggregates by (service, spec key, window start).
    """
    names = batch.names
    kind: list[str] = []
    spec: list[str | None] = []
    service: list[str] = []
    window: list[int | None] = []
    count: list[int] = []
    aggs: list[bytes | None] = []
    for (name, key, start), merged in sorted(late.items()):
        kind.append(RowKind.LATE)
        spec.append(key)
        service.append(name)
        window.append(start)
        count.append(LateAgg.count_of(merged))
        aggs.append(merged)
    for row_kind, table in ((RowKind.STRAGGLER, "stragglers"), (RowKind.DUPLICATE, "duplicates")):
        for g, s, start, n in _summed(
            batch.gather(table), ("service", "spec", "start"), ("count",)
        ):
            if names[g] == _DROPPED:
                continue
            kind.append(row_kind)
            spec.append(specs[s])
            service.append(names[g])
            window.append(start)
            count.append(n)
    services = batch.gather("services")
    for g, n in _summed(services, ("service",), ("duplicate_events",)):
        if n and SEP not in names[g]:  # events repeated, counted once (not per slice)
            kind.append(RowKind.DUPLICATE_EVENTS)
            spec.append(None)
            service.append(names[g])
            window.append(None)
            count.append(n)
    aggs += [None] * (len(kind) - len(aggs))
    proc_ms = batch.chunks[0].proc_ms if batch.chunks else None
    arrivals = _summed(
        batch.gather("arrivals"),
        ("service", "domain", "start"),
        ("events", "late", "stragglers"),
    )
    before = len(kind)  # the arrivals' own columns are null in the rows above
    late_of: list[int | None] = [None] * before
    stragglers_of: list[int | None] = [None] * before
    for g, d, start, n, n_late, n_strag in arrivals:
        kind.append(RowKind.ARRIVALS)
        spec.append(ARRIVAL_DOMAINS[d])
        service.append(names[g])
        window.append(start)
        count.append(n)
        aggs.append(None)
        late_of.append(n_late)
        stragglers_of.append(n_strag)
    extend_rows(
        rows,
        kind=kind,
        spec=spec,
        service=service,
        window_start=window,
        count=count,
        agg=aggs,
        late=late_of,
        stragglers=stragglers_of,
        proc_ms=[None] * before + [proc_ms] * (len(kind) - before),
    )


def _window_row(
    rows: dict[str, list[Any]], spec: WindowSpec, service: str, start: int, count: int, agg: bytes
) -> None:
    append_row(
        rows,
        kind=RowKind.WINDOW,
        spec=spec.key,
        service=service,
        window_start=start,
        count=count,
        agg=agg,
    )


def _window_rows(
    rows: dict[str, list[Any]],
    services: dict[str, ServiceWindows],
    touched: _Keyed,
    watermark: int,
    plan: Plan,
) -> None:
    """Merge every touched pane of the shard at once, then emit the open windows they reach.

    A pane's new aggregate is the merge of what the state held and the batch's parts in Kafka
    order; the windows depending on a touched pane are merged from their panes (the touched
    ones just merged, others decoded from the state), all services in one `window_aggs`.
    """
    if not touched.keys:
        return
    inputs: list[bytes] = []
    keys: list[int] = []
    for k, (service, start) in enumerate(touched.keys):
        stored = services[service].panes.get(start)
        if stored is not None:
            inputs.append(stored)
            keys.append(k)
    for k, blob in touched.parts:
        inputs.append(blob)
        keys.append(k)
    key_of = np.array(keys, np.int64)
    order = np.argsort(key_of, kind="stable")
    ordered = [inputs[i] for i in order]
    merged = _decode_once(ordered).combine(key_of[order], len(touched.keys))
    # A pane of one input is that input, byte for byte: only merged ones are encoded again.
    counts = np.bincount(key_of, minlength=len(touched.keys))
    first = np.cumsum(counts) - counts  # each pane's first input in `ordered`
    several = np.flatnonzero(counts > 1)
    again = dict(zip(several.tolist(), merged.take(several).encode(), strict=True))
    for k, (service, start) in enumerate(touched.keys):
        services[service].panes[start] = again[k] if k in again else ordered[int(first[k])]
    by_service: dict[str, set[int]] = {}
    for service, start in touched.keys:
        by_service.setdefault(service, set()).add(start)
    row_of = dict(touched.index)
    extra: list[tuple[str, int]] = []
    windows: list[tuple[str, int, int, list[tuple[str, int]]]] = []
    for service in sorted(by_service):
        sw = services[service]
        for s, w, members in sw.wanted(by_service[service], watermark):
            mine = [(service, p) for p in members]
            for key in mine:
                if key not in row_of:
                    row_of[key] = len(touched.keys) + len(extra)
                    extra.append(key)
            windows.append((service, s, w, mine))
    if not windows:
        return
    table = merged
    if extra:
        table = WindowAggs.concat(
            [merged, WindowAggs.decode([services[sv].panes[p] for sv, p in extra])]
        )
    starts = np.array([p for _, p in touched.keys] + [p for _, p in extra], np.int64)
    # A window that is exactly one pane (every window of a tumbling-only job) is that pane:
    # its bytes are the pane's, its metrics the pane's read out; the others are merged.
    one_pane = [not plan.timeline_ms and spec.size_ms == plan.pane_ms for spec in plan.specs]
    whole = [
        i
        for i, (_, s, w, mine) in enumerate(windows)
        if one_pane[s] and len(mine) == 1 and mine[0][1] == w
    ]
    single = set(whole)
    parts = [i for i in range(len(windows)) if i not in single]
    # (count, the window's bytes): readers compute its figures from the bytes (one value per
    # (window, service) in the store)
    results: dict[int, tuple[int, bytes]] = {}
    if whole:
        rows_of = [row_of[windows[i][3][0]] for i in whole]
        counts = table.ints["count"][rows_of].tolist()
        for i, count in zip(whole, counts, strict=True):
            service, _, w, _ = windows[i]
            results[i] = (count, services[service].panes[w])
    if parts:
        out = window_aggs(
            plan,
            table,
            starts,
            [(windows[i][1], windows[i][2], [row_of[k] for k in windows[i][3]]) for i in parts],
        )
        for i, count, agg in zip(parts, out.ints["count"].tolist(), out.encode(), strict=True):
            results[i] = (count, agg)
    done = [results[i] for i in range(len(windows))]
    extend_rows(
        rows,
        kind=[RowKind.WINDOW] * len(windows),
        spec=[plan.specs[s].key for _, s, _, _ in windows],
        service=[service for service, _, _, _ in windows],
        window_start=[w for _, _, w, _ in windows],
        count=[count for count, _ in done],
        agg=[agg for _, agg in done],
    )


def _events(
    frames: Iterator[Rows], state: Any, cfg: ExecutorConfig, shard_id: int
) -> Iterator[pa.Table]:
    watermark = int(state.getCurrentWatermarkMs())
    front = frontier(watermark, cfg.allowed_lateness_ms)
    held = state if isinstance(state, HeldState) else None
    if held is not None and held.decoded is not None:  # as this process's run before left it
        shard: ShardState = held.decoded
    else:
        shard = ShardState.from_bytes(state.get[0], cfg) if state.exists else ShardState(cfg.shards)
    table = _one_table(frames)
    if table is None:
        return
    chunks = [ChunkSummary.from_bytes(blob) for blob in _of_kind(table, SummaryKind.SHARD)["blob"]]
    for chunk in chunks:
        check_chunk(chunk, watermark, shard_id, cfg.shards)
    budget = _slots(chunks, cfg, shard_id)
    if budget is None:
        shard.names.clear()  # no limit: nothing to track
    elif not shard.names:  # a state from before the guard: its services hold the slots
        shard.names = {s: watermark for s in shard.services if _is_service(s)}
    if ALL_SERVICES not in shard.services:  # a new state, or one from before the shard's `*`
        shard.services[ALL_SERVICES] = _all_of(shard.services, cfg)
    guard = Overflow(budget, shard.names, watermark)
    guard.release_idle(cfg.service_idle_ms, shard.services)

    slices = SliceRouter(shard, chunks, cfg, watermark) if cfg.dimensions else None

    def route(name: str, seen_ms: int, events: int) -> str:
        if slices is not None and SEP in name:
            service = name.split(SEP, 1)[0]
            if service != ALL_SERVICES and guard.route(service, seen_ms) != service:
                return _DROPPED  # a service beyond --max-services has no slices
            return slices.route(name)
        routed = guard.route(name, seen_ms)
        if routed != name:
            guard.events += events
        return routed

    batch = ShardBatch.place(chunks, route, watermark)
    batch.dedup(shard.ids, watermark, cfg)
    for name in batch.names:
        if name not in shard.services and name != _DROPPED:
            shard.services[name] = ServiceWindows(cfg.specs)
    rows: dict[str, list[Any]] = new_rows()  # the window rows, then the others
    others: dict[str, list[Any]] = new_rows()
    specs = spec_keys(cfg)
    touched, late = _Keyed(), _Keyed()
    # Each key's parts in Kafka order: rows sorted by (service, key, rank of their part).
    panes = batch.gather("panes")
    order = np.lexsort((panes["row"], panes["rank"], panes["start"], panes["service"]))
    for g, start, blob in zip(
        panes["service"][order].tolist(),
        panes["start"][order].tolist(),
        _take_list(batch.blobs("panes", panes), order),
        strict=True,
    ):
        name = batch.names[g]
        if name == _DROPPED:
            continue
        touched.add((name, start), blob)
        if SEP not in name:  # the shard's `*` takes every part of its services too
            touched.add((ALL_SERVICES, start), blob)
    parts = batch.gather("late")
    order = np.lexsort(
        (parts["row"], parts["rank"], parts["start"], parts["spec"], parts["service"])
    )
    for g, s, start, blob in zip(
        parts["service"][order].tolist(),
        parts["spec"][order].tolist(),
        parts["start"][order].tolist(),
        _take_list(batch.blobs("late", parts), order),
        strict=True,
    ):
        if batch.names[g] != _DROPPED:
            late.add((batch.names[g], specs[s], start), blob)
    _sessions(others, shard.services, batch, watermark, front, late)
    _count_rows(others, batch, late.merged_late(), specs)
    _window_rows(rows, shard.services, touched, watermark, Plan(cfg.specs))
    for name, values in others.items():
        rows[name] += values
    shard.evict(watermark)
    if shard.hitters:
        forget_gone(shard)
    # Every shard has its own overflow service and its own `*` (all its services): their
    # window rows say which shard they are of (in `partition`), and the sink merges the
    # shards' parts (jobs/sink/redis_sink.py).
    for i, (kind, service) in enumerate(zip(rows["kind"], rows["service"], strict=True)):
        if kind == RowKind.WINDOW and service in _RESERVED:
            rows["partition"][i] = shard_id
    late_events = batch.late_events()
    if late_events and cfg.late_events_max:
        kept = newest(late_events, cfg.late_events_max)
        kept = stored(kept, watermark, cfg.primary_ms)
        append_row(
            rows, kind=RowKind.LATE_EVENTS, count=len(kept["offset"]), agg=encode_columns(kept)
        )
    if budget is not None:  # what the shard tracks, for the next batch's quotas
        report = {"names": len(guard.names), "shard": shard_id, "tracked": len(guard.tracked)}
        append_row(
            rows,
            kind=RowKind.OVERFLOW,
            service=OVERFLOW_SERVICE,
            count=guard.events,
            metrics=json.dumps(report),
        )
    if shard.services or shard.names or shard.ids.groups:
        state.update((shard.to_bytes(),))
        if held is not None:
            held.decoded = shard
    elif state.exists:
        state.remove()
    yield output_table(rows)


#: The names a shard keeps beside its services, under the names readers know them by.
_RESERVED = (OVERFLOW_SERVICE, ALL_SERVICES)
#: Where the slices of a service beyond `--max-services` go: nowhere (the service's events
#: count under `(other)`, which has no slices).
_DROPPED = SEP + "dropped"


def _is_service(name: str) -> bool:
    """A service's own name: not `*`, `(other)` or a dimension slice."""
    return name not in _RESERVED and SEP not in name


def _decode_once(blobs: list[bytes]) -> WindowAggs:
    """`WindowAggs.decode(blobs)`, each distinct blob object decoded once.

    Every part of a batch is merged into its service's pane and into the shard's `*` pane: the
    same bytes twice, decoded once and taken twice.
    """
    first: dict[int, int] = {}
    distinct: list[bytes] = []
    rows = []
    for blob in blobs:
        j = first.setdefault(id(blob), len(distinct))
        if j == len(distinct):
            distinct.append(blob)
        rows.append(j)
    table = WindowAggs.decode(distinct)
    return table if len(distinct) == len(blobs) else table.take(rows)


def _all_of(services: dict[str, ServiceWindows], cfg: ExecutorConfig) -> ServiceWindows:
    """The shard's `*`: every pane the merge of its services' panes of that start (name order).

    Kept from then on like a service, with every part of every batch merged into it too, so
    the sink merges one `*` per shard rather than every service stored for a window.
    """
    out = ServiceWindows(cfg.specs)
    keys: list[int] = []
    blobs: list[bytes] = []
    index: dict[int, int] = {}
    for name in sorted(services):
        if SEP in name:  # a dimension slice: its events are its service's already
            continue
        for start, blob in sorted(services[name].panes.items()):
            keys.append(index.setdefault(start, len(index)))
            blobs.append(blob)
    if blobs:
        key_of = np.array(keys, np.int64)
        order = np.argsort(key_of, kind="stable")
        merged = merge_encoded([blobs[i] for i in order], key_of[order], len(index))
        out.panes = dict(zip(index, merged, strict=True))
    return out


def _slots(chunks: list[ChunkSummary], cfg: ExecutorConfig, shard_id: int) -> int | None:
    """The shard's quota of names in this batch: the one its chunks carry (jobs/summary/slots.py).

    None without `--max-services`. Chunks without a quota (built without the planner) get an
    even share; chunks of one batch that disagree are a bug, and raise.
    """
    if not cfg.max_services:
        return None
    given = {c.slots for c in chunks if c.slots is not None}
    if len(given) > 1:
        raise ValueError(f"state shard {shard_id}: chunks of one batch with slots {sorted(given)}")
    return given.pop() if given else cfg.shard_slots(shard_id)


def _take_list(values: list[Any], order: npt.NDArray[np.int64]) -> list[Any]:
    return [values[i] for i in order.tolist()]


def _one_table(frames: Iterator[Rows]) -> pa.Table | None:
    """The group's rows as one Arrow table; None if it was handed none."""
    tables = [
        f if isinstance(f, pa.Table) else pa.Table.from_pandas(f, preserve_index=False)
        for f in frames
    ]
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")


def _of_kind(table: pa.Table, kind: SummaryKind) -> dict[str, list[Any]]:
    """The columns of the rows of one kind, as lists."""
    return table.filter(pc.equal(table.column("kind"), pa.scalar(kind.value))).to_pydict()


_DEAD_COLUMNS = ("partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size")


def _dead(frames: Iterator[Rows], state: Any) -> Iterator[pa.Table]:
    counts = DeadCounts.from_bytes(state.get[0]) if state.exists else DeadCounts()
    rows = new_rows()
    table = _one_table(frames)
    if table is not None:
        dead = _of_kind(table, SummaryKind.DEAD)
        if dead["reason"]:
            counts.add(dead["reason"])
            kinds = [RowKind.DEAD.value] * len(dead["reason"])
            yield output_table({"kind": kinds, **{c: dead[c] for c in _DEAD_COLUMNS}})
        times = _of_kind(table, SummaryKind.TIMES)
        for blob, n in zip(times["blob"], times["count"], strict=True):
            append_row(rows, kind=RowKind.BROKER_TIMES, agg=blob, count=int(n))
    state.update((counts.to_bytes(),))
    for reason, n in counts.by_reason.items():
        append_row(rows, kind=RowKind.DEAD_COUNT, reason=reason, count=n)
    yield output_table(rows)


def make_state_fn(
    cfg: ExecutorConfig | tuple[WindowSpec, ...],
) -> Callable[[tuple[Any, ...], Iterator[Rows], Any], Iterator[pa.Table]]:
    """The state function, called per (group, shard): summaries in, output rows out.

    In the shape of `applyInPandasWithState`'s function (frames in, a `GroupState`-shaped
    state): the frames may be Arrow tables, as the driver's stateful step hands them, or pandas
    frames, as Spark does. What it yields are Arrow tables of `OUTPUT_ARROW`, as the sink
    collects them.

    Its input rows are chunk summaries (jobs/summary/summarise.py): group "event" holds service
    summaries and heartbeat summaries (copied into every shard), "dead" dead letters and the chunks'
    broker-time histograms; anything else is drained and ignored.
    """
    config = cfg if isinstance(cfg, ExecutorConfig) else ExecutorConfig(cfg)

    def fn(key: tuple[Any, ...], frames: Iterator[Rows], state: Any) -> Iterator[pa.Table]:
        if config.dimensions:  # their fields come after the plugins' (as on the driver)
            load_plugins(config.plugins)
            register_dimension_fields(config.dimensions)
        ensure_plugins(config.plugins, config.metric_names, [f.name for f in config.fields])
        group = key[0]
        if group == StateGroup.EVENT:
            yield from _events(frames, state, config, int(key[1]))
        elif group == StateGroup.DEAD:
            yield from _dead(frames, state)
        else:
            for _ in frames:
                pass

    return fn
