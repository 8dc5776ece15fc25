"""Redis sink: one micro-batch's results reach Redis in one MULTI/EXEC transaction.

Runs on the driver (inside `foreachBatch`, after the batch's small result is collected).
Idempotent by construction: every value written is absolute (the window's full count from Spark
state, the dead-letter count from state, a dead letter keyed by its Kafka position), never an
increment, so replaying a batch after a crash leaves Redis byte-for-byte the same.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from jobs.rollup import BatchTime, plan_retention, services_seen
from tidegauge.core.metrics import LateAgg, WindowAgg
from tidegauge.core.retention import Retention
from tidegauge.core.store import ALL_SERVICES, DeadLetter, Keys, batch_field
from tidegauge.core.windows import WindowSpec

__all__ = [
    "ArrivalUpdate",
    "LateUpdate",
    "WindowCount",
    "WindowUpdate",
    "touch_status",
    "write_batch",
    "write_progress",
]

#: How many per-batch summaries the `batches` sorted set keeps.
BATCH_HISTORY = 2000


@dataclass(frozen=True)
class WindowUpdate:
    """The new absolute state of one (window, service) after a batch.

    `spec` is the window spec's key (tidegauge.core.windows.WindowSpec.key), `agg` the serialised
    WindowAgg (sketches included), `metrics` the numbers computed from it on the executor.
    """

    spec: str
    start_ms: int
    service: str
    metrics: Mapping[str, Any]
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


def _doc(metrics: Mapping[str, Any], batch_id: int) -> str:
    return json.dumps({**metrics, "batch": batch_id}, separators=(",", ":"), sort_keys=True)


def write_batch(
    r: redis.Redis,
    keys: Keys,
    batch_id: int,
    windows: Sequence[WindowUpdate],
    dead: Iterable[DeadLetter] = (),
    dead_counts: Mapping[str, int] | None = None,
    dead_letter_max: int = 100_000,
    late: Sequence[LateUpdate] = (),
    stragglers: Sequence[WindowCount] = (),
    duplicates: Sequence[WindowCount] = (),
    arrivals: Sequence[ArrivalUpdate] = (),
    arrival_window_ms: int | None = None,
    late_events: Mapping[str, int] | None = None,
    late_events_max: int = 10_000,
    retention: Retention | None = None,
    source: WindowSpec | None = None,
    at: BatchTime | None = None,
) -> None:
    """Write one batch: windows (and the `*` rows they imply), corrections, arrivals, letters.

    With `retention` (and the batch's time `at`), the same transaction rolls `source` windows
    of closed periods up into the tiers and deletes what has aged out (jobs/rollup.py); late
    rows of a window whose raw copy has gone go to the roll-ups only.

    The `*` row of a window merges the aggregates (counts and sketches) of every service stored
    for that window, read back from Redis before the transaction, so it stays right when only
    some services changed. Late rows, stragglers and arrivals are per-batch facts: they are
    stored under a field named "service|batch", so a replay overwrites instead of adding, and
    a window's revision is the number of batches that brought it stragglers.
    """
    named: list[str] = [x.service for x in windows]
    named += [x.service for x in late] + [x.service for x in stragglers]
    named += [x.service for x in duplicates]
    named += [x.service for x in arrivals]
    if ALL_SERVICES in named:
        raise ValueError("'*' is computed by the sink, not sent to it")
    if arrivals and not arrival_window_ms:
        raise ValueError("arrivals need arrival_window_ms")
    plan = None
    if retention is not None and at is not None:
        plan = plan_retention(r, keys, retention, source, at, late, arrivals)
        if arrival_window_ms:
            size = arrival_window_ms
            arrivals = [a for a in arrivals if plan.keeps_arrival(a.domain, a.start_ms, size)]
        late = [lt for lt in late if plan.keeps_window(WindowSpec.from_key(lt.spec), lt.start_ms)]
    windows, parts = _merge_parts(r, keys, windows)
    by_window: dict[tuple[str, int], dict[str, WindowUpdate]] = defaultdict(dict)
    for w in windows:
        by_window[(w.spec, w.start_ms)][w.service] = w

    wins = sorted(by_window)
    read = r.pipeline(transaction=False)
    for spec, start in wins:
        read.hgetall(keys.window_aggs(spec, start))
    stored = read.execute() if wins else []

    tx = r.pipeline(transaction=True)
    for key, field_name, blob in parts:
        tx.hset(key, field_name, blob)
    services: set[str] = set()
    for (spec, start), existing in zip(wins, stored, strict=True):
        fresh = by_window[(spec, start)]
        aggs = {k.decode(): v for k, v in existing.items()}
        aggs.pop(ALL_SERVICES, None)
        aggs.update({s: w.agg for s, w in fresh.items()})
        total = WindowAgg.merged(WindowAgg.from_bytes(b) for _, b in sorted(aggs.items()))
        docs: dict[Any, Any] = {s: _doc(w.metrics, batch_id) for s, w in fresh.items()}
        docs[ALL_SERVICES] = _doc(total.metrics(WindowSpec.from_key(spec).size_ms), batch_id)
        blobs: dict[Any, Any] = {s: w.agg for s, w in fresh.items()}
        blobs[ALL_SERVICES] = total.to_bytes()
        tx.hset(keys.window(spec, start), mapping=docs)
        tx.hset(keys.window_aggs(spec, start), mapping=blobs)
        tx.zadd(keys.window_index(spec), {str(start): start})
        tx.sadd(keys.window_specs, spec)
        services.update(fresh)
    if services:
        tx.sadd(keys.services, *sorted(services))
        tx.zadd(keys.services_seen, services_seen(windows), gt=True)
    for lt in late:
        blob = lt.agg or LateAgg(lt.count).to_bytes()
        tx.hset(keys.window_late(lt.spec, lt.start_ms), batch_field(lt.service, batch_id), blob)
        tx.zadd(keys.late_index(lt.spec), {str(lt.start_ms): lt.start_ms})
        tx.sadd(keys.window_specs, lt.spec)
    for st in stragglers:
        field = batch_field(st.service, batch_id)
        tx.hset(keys.window_stragglers(st.spec, st.start_ms), field, str(st.count))
    for dup in duplicates:
        field = batch_field(dup.service, batch_id)
        tx.hset(keys.window_duplicates(dup.spec, dup.start_ms), field, str(dup.count))
    if arrivals:
        assert arrival_window_ms is not None
        size = arrival_window_ms
        tx.sadd(keys.arrival_sizes, str(size))
        for a in arrivals:
            doc = json.dumps(
                {**a.metrics, "events": a.count}, separators=(",", ":"), sort_keys=True
            )
            tx.hset(
                keys.arrivals(a.domain, size, a.start_ms), batch_field(a.service, batch_id), doc
            )
            tx.zadd(keys.arrivals_index(a.domain, size), {str(a.start_ms): a.start_ms})
    if late_events:
        tx.zadd(keys.late_events, late_events)
        tx.zremrangebyrank(keys.late_events, 0, -(late_events_max + 1))
    letters = {d.to_json(): d.kafka_timestamp for d in dead}
    if letters:
        tx.zadd(keys.dead_letters, letters)
        tx.zremrangebyrank(keys.dead_letters, 0, -(dead_letter_max + 1))
    if dead_counts:
        tx.hset(keys.dead_counts, mapping={k: str(v) for k, v in dead_counts.items()})
    if plan is not None:
        # a name back after its windows expired is not gone
        plan.services_gone = [s for s in plan.services_gone if s not in services]
        plan.apply(tx, keys)
    if len(tx):
        # A new token only when the store has none (empty, or flushed): see Keys.epoch.
        tx.set(keys.epoch, uuid.uuid4().hex, nx=True)
        tx.execute()


def _merge_parts(
    r: redis.Redis, keys: Keys, windows: Sequence[WindowUpdate]
) -> tuple[list[WindowUpdate], list[tuple[str, str, bytes]]]:
    """Windows with each service's shard parts replaced by one update: the merge of its parts.

    Returns the updates and the parts to store ((key, field, WindowAgg bytes)): a part is the
    absolute state of one shard, so the merge takes the other shards' stored parts too.
    """
    whole = [w for w in windows if w.shard is None]
    split = [w for w in windows if w.shard is not None]
    if not split:
        return whole, []
    cells = sorted({(w.spec, w.start_ms) for w in split})
    read = r.pipeline(transaction=False)
    for spec, start in cells:
        read.hgetall(keys.window_parts(spec, start))
    stored = dict(zip(cells, read.execute(), strict=True))
    writes: list[tuple[str, str, bytes]] = []
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
        writes.append((keys.window_parts(w.spec, w.start_ms), name, w.agg))
    for (spec, start, service), blobs in sorted(by_service.items()):
        merged = WindowAgg.merged(WindowAgg.from_bytes(b) for _, b in sorted(blobs.items()))
        size = WindowSpec.from_key(spec).size_ms
        whole.append(WindowUpdate(spec, start, service, merged.metrics(size), merged.to_bytes()))
    return whole, writes


def write_progress(r: redis.Redis, keys: Keys, summary: Mapping[str, Any]) -> None:
    """Record one batch's progress as the job status and in the batch history (idempotent).

    `summary` holds batch_id, batch_time, watermark, input_rows, offsets (end), start_offsets,
    latest_offsets, batch_duration_ms, query_id, plus anything else worth keeping.
    """
    batch_id = int(summary["batch_id"])
    status = {
        "batch_id": batch_id,
        "batch_time": int(summary["batch_time"]),
        "status_time": int(summary.get("status_time") or summary["batch_time"]),
        "watermark": int(summary["watermark"]),
        "input_rows": int(summary["input_rows"]),
        "offsets": json.dumps(summary["offsets"], sort_keys=True),
        "latest_offsets": json.dumps(summary["latest_offsets"], sort_keys=True),
        "batch_duration_ms": int(summary["batch_duration_ms"]),
        "query_id": str(summary["query_id"]),
    }
    for name in ("report_interval_ms", "allowed_lateness_ms"):
        if summary.get(name) is not None:
            status[name] = int(summary[name])
    if summary.get("freshness"):  # kept from the last batch with records while the stream is quiet
        status["freshness"] = json.dumps(summary["freshness"], sort_keys=True)
    if summary.get("spark"):
        status["spark"] = json.dumps(summary["spark"], sort_keys=True)
    with r.pipeline(transaction=True) as tx:
        # Status only moves forward: a late progress event for an older batch must not win.
        # A query of another id (a job started with a new checkpoint) takes over: its batch ids
        # start again at 0, and the history of the query it replaces is dropped with it.
        tx.watch(keys.status)
        current, owner = tx.hmget(keys.status, ["batch_id", "query_id"])
        takeover = owner is not None and _text(owner) != status["query_id"]
        tx.multi()
        if takeover:
            tx.delete(keys.status, keys.batches)
        if takeover or current is None or int(current) <= batch_id:
            tx.hset(keys.status, mapping=status)  # type: ignore[arg-type]
        _add_history(tx, keys, batch_id, summary)
        try:
            tx.execute()
        except redis.WatchError:  # another writer moved the status meanwhile; keep history
            tx2 = r.pipeline(transaction=True)
            _add_history(tx2, keys, batch_id, summary)
            tx2.execute()


def _add_history(tx: Any, keys: Keys, batch_id: int, summary: Mapping[str, Any]) -> None:
    tx.zremrangebyscore(keys.batches, batch_id, batch_id)
    tx.zadd(keys.batches, {json.dumps(dict(summary), sort_keys=True): batch_id})
    tx.zremrangebyrank(keys.batches, 0, -(BATCH_HISTORY + 1))


def touch_status(r: redis.Redis, keys: Keys, now_ms: int) -> None:
    """Record that the job is alive while idle (only once a status exists)."""
    if r.hexists(keys.status, "batch_id"):
        r.hset(keys.status, "status_time", str(now_ms))


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
