"""Redis sink: one micro-batch's results reach Redis in one MULTI/EXEC transaction.

Runs on the driver (inside `foreachBatch`, after the batch's small result is collected).
Idempotent by construction: every value written is absolute (the window's full count from Spark
state, the dead-letter count from state, a dead letter keyed by its Kafka position), never an
increment, so replaying a batch after a crash leaves Redis byte-for-byte the same.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

from jobs.sink.ahead import Ahead, fit
from jobs.sink.footprint import Fitted
from jobs.sink.rollup import (
    BatchTime,
    EarlyRetention,
    finish_retention,
    read_retention,
    services_seen,
)
from jobs.state.rows import (
    ArrivalUpdate,
    BatchRows,
    LateUpdate,
    WindowCount,
    WindowUpdate,
)
from tidegauge.core.late_agg import LateAgg, merge_late
from tidegauge.core.retention import Retention, format_size
from tidegauge.core.store import ALL_SERVICES, DeadLetter, Keys, batch_field
from tidegauge.core.store.arrivals import batch_arrivals
from tidegauge.core.store.keys import _s
from tidegauge.core.store.ranking import ranked_counts, ranks_spec
from tidegauge.core.window_aggs import MergeEncoded, WindowAggs, merge_encoded
from tidegauge.core.windows import WindowSpec

__all__ = ["SinkBatch", "SinkConfig", "write_batch"]


#: The job's own logger: a change of the retention in force is said where the job speaks.
log = logging.getLogger("tidegauge.job")


@dataclass(frozen=True)
class SinkConfig:
    """How the sink writes, fixed for a job (built from `JobConfig` by the pipeline)."""

    #: Dead letters kept (the newest by broker time).
    dead_letter_max: int = 100_000
    #: Late events kept (the newest by broker time, jobs/summary/late_events.py).
    late_events_max: int = 10_000
    #: Size of the arrival series' windows (the primary window); needed when arrivals come.
    arrival_window_ms: int | None = None
    #: Retention tiers and the window spec they roll up; None keeps every window.
    retention: Retention | None = None
    source: WindowSpec | None = None
    #: Bytes the job's stores may take together once their tiers are full
    #: (`--retention-size`; None: no budget): the retention's TTLs are scaled down together to
    #: fit (jobs/sink/footprint.py).
    retention_size: int | None = None
    #: The job's state shards: a window's `*` is the merge of their `*` parts once every shard
    #: has one (else of every service stored for it); None: always the latter.
    shards: int | None = None
    #: Whether windows get a `*` row; a dimension's store has none (its members are slices of
    #: services and of `*`: the main store's `*` is their total).
    totals: bool = True
    #: How roll-ups merge their windows' aggregates (jobs/sink/rollup.py `roll_periods`); the
    #: job's state workers lend it a process (jobs/state/step.py `StatePool.merge_encoded`).
    merge: MergeEncoded = merge_encoded


@dataclass(frozen=True)
class SinkBatch:
    """One micro-batch's results, as the sink writes them in one transaction."""

    batch_id: int
    windows: Sequence[WindowUpdate] = ()
    dead: Iterable[DeadLetter] = ()
    #: Dead letters so far by reason (absolute counts from state).
    dead_counts: Mapping[str, int] | None = None
    late: Sequence[LateUpdate] = ()
    stragglers: Sequence[WindowCount] = ()
    duplicates: Sequence[WindowCount] = ()
    arrivals: Sequence[ArrivalUpdate] = ()
    #: Stored late-event members -> broker time (ms) (`jobs.summary.late_events.batch_members`).
    late_events: Mapping[str, int] | None = None
    #: The batch's watermark and timestamp: retention's clock (needed with `retention`).
    at: BatchTime | None = None

    @classmethod
    def of_rows(
        cls,
        batch_id: int,
        rows: BatchRows,
        late_events: Mapping[str, int] | None = None,
        at: BatchTime | None = None,
    ) -> SinkBatch:
        """The batch the stateful step's decoded rows make, with its late-event members."""
        return cls(
            batch_id,
            rows.windows,
            rows.dead,
            rows.dead_counts,
            late=rows.late,
            stragglers=rows.stragglers,
            duplicates=rows.duplicates,
            arrivals=rows.arrivals,
            late_events=late_events,
            at=at,
        )


def write_batch(
    r: redis.Redis,
    keys: Keys,
    batch: SinkBatch,
    config: SinkConfig = SinkConfig(),
    dimensions: Mapping[str, SinkBatch] | None = None,
    ahead: Ahead | None = None,
) -> Fitted | None:
    """Write one batch, and its dimensions' slices to their stores, in one transaction.

    `dimensions`: dimension -> the batch of its store (`Keys.by`, jobs/sink/slices.py), which
    is written like the services' but without `*` rows, arrivals or letters. See `_queue`.
    `ahead`: the batch's retention read and planned before its rows (jobs/sink/ahead.py), used
    if it was read for this batch and these stores; else the retention is planned here.
    Returns the retention in force with a byte budget (`config.retention_size`), else None.
    """
    dims = sorted(dimensions or {})
    if ahead is not None and not ahead.serves(batch.at, dims):
        ahead = None
    fitted = in_force = None
    if batch.at is not None:  # a batch without a time does no retention work
        fitted = ahead.fitted if ahead is not None else fit(r, keys, config, dims)
    if fitted is not None:
        in_force = fitted.retention
        budget = config.retention_size
        assert budget is not None and config.retention is not None
        if in_force.text() != (fitted.before or config.retention.text()):  # shortened, or back
            log.info(
                "retention %s in force: --retention %s fitted to --retention-size %s",
                in_force.text(),
                config.retention.text(),
                format_size(budget),
            )
            if fitted.projected_bytes > budget:
                log.warning(
                    "--retention-size %s cannot hold even the shortest retention of these "
                    "tiers (%s once full): raise it, or keep fewer tiers or windows",
                    format_size(budget),
                    format_size(fitted.projected_bytes),
                )
    early = ahead.early if ahead is not None else {}
    tx = r.pipeline(transaction=True)
    _queue(r, tx, keys, batch, config, in_force, early.get(keys.prefix))
    if dimensions:
        sliced = dataclasses.replace(config, totals=False, shards=None)
        for dim in dims:
            store = keys.by(dim)
            _queue(r, tx, store, dimensions[dim], sliced, in_force, early.get(store.prefix))
        tx.sadd(keys.dimensions, *sorted(dimensions))
    if len(tx):
        tx.execute()
    return fitted


def _all_late(late: Sequence[LateUpdate]) -> list[LateUpdate]:
    """`*`'s late rows: each window's late rows of the batch merged (in service order).

    Stored as "*|batch" beside the services' fields, so a reader of `*`'s lateness merges one
    field per batch, not one per (service, batch) (tidegauge/core/store/lateness.py).
    """
    cells = sorted({(lt.spec, lt.start_ms) for lt in late})
    code = {cell: k for k, cell in enumerate(cells)}
    rows = sorted(late, key=lambda lt: (code[(lt.spec, lt.start_ms)], lt.service))
    blobs = [lt.agg or LateAgg(lt.count).to_bytes() for lt in rows]
    keys = np.array([code[(lt.spec, lt.start_ms)] for lt in rows], np.int64)
    counts = np.zeros(len(cells), np.int64)
    np.add.at(counts, keys, [lt.count for lt in rows])
    merged = merge_late(blobs, keys, len(cells))
    return [
        LateUpdate(spec, start, ALL_SERVICES, int(n), blob)
        for (spec, start), n, blob in zip(cells, counts.tolist(), merged, strict=True)
    ]


def _queue(
    r: redis.Redis,
    tx: Any,
    keys: Keys,
    batch: SinkBatch,
    config: SinkConfig,
    in_force: Retention | None = None,
    early: EarlyRetention | None = None,
) -> None:
    """Queue one store's batch: windows (and the `*` rows they imply), corrections, arrivals.

    With `config.retention` (and the batch's time `at`), the same transaction rolls windows
    of closed periods up into the tiers and deletes what has aged out (jobs/sink/rollup.py); late
    rows of a window whose raw copy has gone go to the roll-ups only.

    The `*` row of a window merges the aggregates (counts and sketches) of all its services. Each
    state shard sends its own `*` (the merge of every event of its services in the window) as a
    part: once every shard's part is stored, `*` is their merge; until then (a shard without
    events in the window, a state from before the shards kept a `*`, windows written without
    one) it is the merge of every service stored for that window, read back from Redis before
    the transaction. Either way it stays right when only some services changed.

    Late rows, stragglers and arrivals are per-batch facts: they are stored under a field
    named "service|batch" (arrivals: "batch", every service's counts in one), so a replay
    overwrites instead of adding, and a window's revision is the number of batches that
    brought it stragglers.
    """
    batch_id, windows, late, arrivals = batch.batch_id, batch.windows, batch.late, batch.arrivals
    stragglers, duplicates, at = batch.stragglers, batch.duplicates, batch.at
    arrival_window_ms, retention = config.arrival_window_ms, config.retention
    named: list[str] = [x.service for x in windows if x.shard is None]
    named += [x.service for x in late] + [x.service for x in stragglers]
    named += [x.service for x in duplicates]
    named += [x.service for x in arrivals]
    if ALL_SERVICES in named:
        raise ValueError("'*' is computed by the sink (of the state shards' parts), not sent whole")
    if arrivals and not arrival_window_ms:
        raise ValueError("arrivals need arrival_window_ms")
    if late and config.totals:
        late = [*late, *_all_late(late)]
    plan = None
    if retention is not None and at is not None:
        if early is None:
            early = read_retention(
                r,
                keys,
                retention,
                config.source,
                at,
                config.retention_size,
                in_force,
                config.merge,
            )
        plan = finish_retention(r, keys, early, late, arrivals)
        if arrival_window_ms:
            size = arrival_window_ms
            arrivals = [a for a in arrivals if plan.keeps_arrival(a.domain, a.start_ms, size)]
        late = [lt for lt in late if plan.keeps_window(WindowSpec.from_key(lt.spec), lt.start_ms)]
    closing = at.watermark_ms if at is not None and config.shards else None  # (sharded only)
    windows, parts, closed_parts = _merge_parts(r, keys, windows, config.shards, closing)
    by_window: dict[tuple[str, int], dict[str, WindowUpdate]] = defaultdict(dict)
    for w in windows:  # a window without its shards' `*` gets it from the services, below
        by_window[(w.spec, w.start_ms)][w.service] = w

    wins = sorted(by_window)
    merge = [cell for cell in wins if ALL_SERVICES not in by_window[cell]] if config.totals else []
    read = r.pipeline(transaction=False)
    for spec, start in merge:
        read.hgetall(keys.window_aggs(spec, start))
    stored = read.execute() if merge else []
    totals = _totals(merge, stored, by_window)
    for (spec, start), total in zip(merge, totals, strict=True):
        by_window[(spec, start)][ALL_SERVICES] = WindowUpdate(spec, start, ALL_SERVICES, total)
    queued = len(tx)
    if closed_parts:  # deleted before this batch's parts are written: those are of open windows
        tx.delete(*closed_parts)
        tx.zrem(keys.open_parts, *closed_parts)
    for spec, start, field_name, blob in parts:
        tx.hset(keys.window_parts(spec, start), field_name, blob)
    if parts:
        tx.zadd(keys.open_parts, _part_ends(keys, parts))
    services: set[str] = set()
    ranked: list[tuple[str, int, dict[str, bytes]]] = []
    for spec, start in wins:
        fresh = by_window[(spec, start)]
        blobs: dict[Any, Any] = {s: w.agg for s, w in fresh.items()}
        tx.hset(keys.window_aggs(spec, start), mapping=blobs)
        tx.zadd(keys.window_index(spec), {str(start): start})
        tx.sadd(keys.window_specs, spec)
        services.update(fresh)
        if ranks_spec(spec):
            ranked.append((spec, start, blobs))
    for key, scores in ranked_counts(keys, ranked).items():
        tx.zadd(key, scores)
    services.discard(ALL_SERVICES)
    if services:
        tx.sadd(keys.services, *sorted(services))
        tx.zadd(keys.services_seen, services_seen(windows), gt=True)
    # One command per key, however many services a batch brings to it.
    fields: dict[str, dict[Any, Any]] = defaultdict(dict)
    indexed: dict[str, dict[str, int]] = defaultdict(dict)
    for lt in late:
        blob = lt.agg or LateAgg(lt.count).to_bytes()
        fields[keys.window_late(lt.spec, lt.start_ms)][batch_field(lt.service, batch_id)] = blob
        indexed[keys.late_index(lt.spec)][str(lt.start_ms)] = lt.start_ms
    if late:
        tx.sadd(keys.window_specs, *sorted({lt.spec for lt in late}))
    for st in stragglers:
        key = keys.window_stragglers(st.spec, st.start_ms)
        fields[key][batch_field(st.service, batch_id)] = str(st.count)
    for dup in duplicates:
        key = keys.window_duplicates(dup.spec, dup.start_ms)
        fields[key][batch_field(dup.service, batch_id)] = str(dup.count)
    if arrivals:
        assert arrival_window_ms is not None
        size = arrival_window_ms
        tx.sadd(keys.arrival_sizes, str(size))
        # (domain, start) -> service -> counts: keys are spelled once per window, not per row
        counted: dict[tuple[str, int], dict[str, tuple[int, int, int]]] = defaultdict(dict)
        for a in arrivals:
            window = counted[(a.domain, a.start_ms)]
            have = window.get(a.service, (0, 0, 0))
            n_late, n_strag = int(a.metrics["late"]), int(a.metrics["stragglers"])
            window[a.service] = (have[0] + a.count, have[1] + n_late, have[2] + n_strag)
        for (domain, start), counts in counted.items():
            key = keys.arrivals(domain, size, start)
            indexed[keys.arrivals_index(domain, size)][str(start)] = start
            fields[key][str(batch_id)] = batch_arrivals(counts)
    for key, mapping in fields.items():
        tx.hset(key, mapping=mapping)
    for key, members in indexed.items():
        tx.zadd(key, members)
    if batch.late_events:
        tx.zadd(keys.late_events, batch.late_events)
        tx.zremrangebyrank(keys.late_events, 0, -(config.late_events_max + 1))
    letters = {d.to_json(): d.kafka_timestamp for d in batch.dead}
    if letters:
        tx.zadd(keys.dead_letters, letters)
        tx.zremrangebyrank(keys.dead_letters, 0, -(config.dead_letter_max + 1))
    if batch.dead_counts:
        tx.hset(keys.dead_counts, mapping={k: str(v) for k, v in batch.dead_counts.items()})
    if plan is not None:
        # a name back after its windows expired is not gone
        plan.services_gone = [s for s in plan.services_gone if s not in services]
        plan.apply(tx, keys)
    if len(tx) > queued:
        # A new token only when the store has none (empty, or flushed): see Keys.epoch.
        tx.set(keys.epoch, uuid.uuid4().hex, nx=True)


def _totals(
    wins: Sequence[tuple[str, int]],
    stored: Sequence[Mapping[bytes, bytes]],
    by_window: Mapping[tuple[str, int], Mapping[str, WindowUpdate]],
) -> list[bytes]:
    """Each window's `*` aggregate: the merge of every service stored for it.

    A service's new aggregate replaces its stored one; services merge in name order. Every
    window of the batch at once (tidegauge/core/window_aggs.py): decoded, merged and encoded
    in a fixed number of passes, however many services and windows.
    """
    blobs: list[bytes] = []
    keys: list[int] = []
    for k, ((spec, start), existing) in enumerate(zip(wins, stored, strict=True)):
        aggs = {f.decode(): v for f, v in existing.items()}
        aggs.pop(ALL_SERVICES, None)
        aggs.update({s: w.agg for s, w in by_window[(spec, start)].items()})
        for _, blob in sorted(aggs.items()):
            blobs.append(blob)
            keys.append(k)
    return WindowAggs.decode(blobs).combine(np.array(keys, np.int64), len(wins)).encode()


def _part_ends(keys: Keys, parts: Sequence[tuple[str, int, str, bytes]]) -> dict[str, int]:
    """Part key -> its window's end, for the windows that close (not sessions: never closed)."""
    ends: dict[str, int] = {}
    for spec, start, _, _ in parts:
        window = WindowSpec.from_key(spec)
        if window.kind != "session":
            ends[keys.window_parts(spec, start)] = window.end(start)
    return ends


def _merge_parts(
    r: redis.Redis,
    keys: Keys,
    windows: Sequence[WindowUpdate],
    shards: int | None,
    watermark_ms: int | None = None,
) -> tuple[list[WindowUpdate], list[tuple[str, int, str, bytes]], list[str]]:
    """Windows with each service's shard parts replaced by one update: the merge of its parts.

    Returns the updates, the parts to store ((spec, start, field, WindowAgg bytes)) and, with
    `watermark_ms`, the part keys of the windows it has closed (no part of theirs can come any
    more), read in the same round trip. A part is the absolute state of one shard, so the merge
    takes the other shards' stored parts too. A window's `*` gets an update only once each of
    the `shards` has a part.
    """
    whole = [w for w in windows if w.shard is None]
    split = [w for w in windows if w.shard is not None]
    cells = sorted({(w.spec, w.start_ms) for w in split})
    read = r.pipeline(transaction=False)
    for spec, start in cells:
        read.hgetall(keys.window_parts(spec, start))
    if watermark_ms is not None:
        read.zrangebyscore(keys.open_parts, "-inf", watermark_ms)
    if not len(read):
        return whole, [], []
    answers: list[Any] = read.execute()
    closed = [_s(k) for k in answers.pop()] if watermark_ms is not None else []
    if not split:
        return whole, [], closed
    stored = dict(zip(cells, answers, strict=True))
    writes: list[tuple[str, int, str, bytes]] = []
    by_service: dict[tuple[str, int, str], dict[str, bytes]] = {}
    for w in split:
        cell = stored[(w.spec, w.start_ms)]
        have = by_service.setdefault((w.spec, w.start_ms, w.service), {})
        if not have:
            for f, blob in cell.items():
                name = f.decode()
                if name.rsplit("|", 1)[0] == w.service:
                    have[name] = blob
        name = f"{w.service}|{w.shard}"
        have[name] = w.agg
        writes.append((w.spec, w.start_ms, name, w.agg))
    cells_out: list[tuple[str, int, str]] = []
    inputs: list[bytes] = []
    key_of: list[int] = []
    for (spec, start, service), blobs in sorted(by_service.items()):
        if service == ALL_SERVICES and (shards is None or len(blobs) < shards):
            continue  # not every shard's `*` yet: the sink merges the services instead
        for _, blob in sorted(blobs.items()):  # parts in shard-name order
            inputs.append(blob)
            key_of.append(len(cells_out))
        cells_out.append((spec, start, service))
    if cells_out:  # every (window, service) at once: one decode, merge and encode
        merged = WindowAggs.decode(inputs).combine(np.array(key_of, np.int64), len(cells_out))
        for (spec, start, service), agg in zip(cells_out, merged.encode(), strict=True):
            whole.append(WindowUpdate(spec, start, service, agg))
    return whole, writes, closed
