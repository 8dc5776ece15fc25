"""Retention in the sink: roll-ups of closed periods and expiry of old windows, per batch.

Runs on the driver inside the batch's Redis transaction (jobs/sink/redis_sink.py), with the batch's
watermark in force and its timestamp (from Spark's offset log), so every decision depends on
the batch alone and a replayed batch writes the same bytes (tidegauge/core/retention.py has
the tiers and the rules; docs/redis.md "Retention" the key lifetimes):

* **Roll-up.** Once the watermark has closed a period of a tier, the period's windows of the
  finer tier (the smallest tumbling spec for the first tier) are merged into one window of the
  tier: aggregates per service and `*` (counts exact, sketches merged); stragglers,
  duplicates and late rows of the batches before the build folded into one field per service
  ("service|-1": summed, merged; a roll-up's revision is the sum of its windows'). Closed
  windows no longer change, except for late rows: those of the build's batch and later are
  added to every rolled-up period directly, one field per batch.
* **Expiry.** A window of a tier is deleted (every key of it) once `watermark - end >= TTL`;
  arrival series are kept for the raw TTL, each on its own clock: processing time against the
  batch's timestamp, broker time against the newest broker time seen; a service name goes when
  its newest window has gone from every tier. What a batch writes obeys the same rules as what
  it deletes, so a replayed batch ends where its first attempt did.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis

from jobs.sink.footprint import SIZED_EVERY_MS, measure, window_keys
from tidegauge.core.late_agg import LateAgg, merge_late
from tidegauge.core.retention import Retention, Tier, expired
from tidegauge.core.store import ALL_SERVICES, Keys, batch_field
from tidegauge.core.store.keys import (
    FOLDED,
    _s,
    folded_stragglers,
    split_batch_field,
    straggler_counts,
    straggler_revisions,
)
from tidegauge.core.store.ranking import ranked_counts
from tidegauge.core.window_aggs import MergeEncoded, merge_encoded
from tidegauge.core.windows import ARRIVAL_DOMAINS, WindowSpec, tumbling_start

__all__ = [
    "BatchTime",
    "EarlyRetention",
    "RetentionPlan",
    "RolledWindow",
    "finish_retention",
    "read_retention",
    "roll_period",
    "roll_periods",
]

#: Windows (per spec) one batch deletes at most; the rest go with the next batches, so a store
#: that grew before retention was on is trimmed without one huge transaction.
EXPIRE_PER_BATCH = 20_000

#: Finer windows (per tier) one batch rolls up at most, in whole periods: a store that grew
#: with `--retention forever` is rolled up over the next batches, oldest first, and nothing
#: of it expires before it is rolled up (`RetentionPlan.keeps_window`).
ROLLUP_PER_BATCH = 5_000


@dataclass(frozen=True)
class BatchTime:
    """What fixes a batch's retention work: its id, watermark in force and timestamp (ms)."""

    batch_id: int
    watermark_ms: int
    proc_ms: int


@dataclass
class RolledWindow:
    """One window's stored hashes (field -> value), as read back or as a roll-up builds them."""

    aggs: dict[str, bytes] = field(default_factory=dict)
    late: dict[str, bytes] = field(default_factory=dict)
    stragglers: dict[str, bytes] = field(default_factory=dict)
    duplicates: dict[str, bytes] = field(default_factory=dict)


def roll_period(windows: Sequence[tuple[int, RolledWindow]], batch_id: int) -> RolledWindow:
    """The roll-up of one period from its finer windows (any order; merged by start).

    Late fields of `batch_id` and later are left out: the batch that builds the roll-up adds
    its own late rows directly (`late_rows`), so a replay of it writes the same fields.
    """
    return roll_periods({0: windows}, batch_id)[0]


def roll_periods(
    periods: Mapping[int, Sequence[tuple[int, RolledWindow]]],
    batch_id: int,
    merge: MergeEncoded = merge_encoded,
) -> dict[int, RolledWindow]:
    """`roll_period` of each period, all of them at once.

    One decode, merge and encode of every (period, service) aggregate and one of every late
    field (tidegauge/core/window_aggs.py): a batch that closes many periods (catching up)
    pays the fixed costs once, not per period. `merge` does the aggregates' part (the job's
    state workers lend it a process: `StatePool.merge_encoded`).
    """
    out: dict[int, RolledWindow] = {}
    agg_cells: list[tuple[int, str]] = []
    agg_parts: list[tuple[int, bytes]] = []
    late_cells: list[tuple[int, str]] = []
    late_parts: list[tuple[int, bytes]] = []
    for p, windows in sorted(periods.items()):
        ordered = [w for _, w in sorted(windows, key=lambda sw: sw[0])]
        rolled = out[p] = RolledWindow()
        code: dict[str, int] = {}
        for s in sorted({s for w in ordered for s in w.aggs}):
            code[s] = len(agg_cells)
            agg_cells.append((p, s))
        agg_parts += [(code[s], blob) for w in ordered for s, blob in w.aggs.items()]
        # Facts of the batches before this one, folded into one field per service ("svc|-1").
        # A period some of whose batches wrote `*`'s late rows ("*|batch") folds `*` too:
        # a batch that wrote none counts by its services' fields (`late_fields`).
        fields: dict[str, int] = {}
        facts = [
            [(*split_batch_field(f), blob) for f, blob in sorted(w.late.items())] for w in ordered
        ]
        star = any(service == ALL_SERVICES for window in facts for service, _, _ in window)
        for window in facts:
            totals = {batch for service, batch, _ in window if service == ALL_SERVICES}
            for service, batch, blob in window:
                if batch >= batch_id:
                    continue
                into = [service]
                if star and service != ALL_SERVICES and batch not in totals:
                    into.append(ALL_SERVICES)
                for name in into:
                    folded = batch_field(name, FOLDED)
                    if folded not in fields:
                        fields[folded] = len(late_cells)
                        late_cells.append((p, folded))
                    late_parts.append((fields[folded], blob))
        rolled.stragglers = _folded_stragglers(w.stragglers for w in ordered)
        rolled.duplicates = _folded_counts(w.duplicates for w in ordered)
    # stable sorts: each (period, service)'s windows stay in window order
    agg_parts.sort(key=lambda kb: kb[0])
    late_parts.sort(key=lambda kb: kb[0])
    if agg_parts:
        merged = merge(
            [b for _, b in agg_parts],
            np.array([k for k, _ in agg_parts], np.int64),
            len(agg_cells),
        )
        for (p, s), blob in zip(agg_cells, merged, strict=True):
            out[p].aggs[s] = blob
    keys = np.array([k for k, _ in late_parts], np.int64)
    late = merge_late([b for _, b in late_parts], keys, len(late_cells))
    for (p, f), blob in zip(late_cells, late, strict=True):
        out[p].late[f] = blob
    return out


def _folded_stragglers(hashes: Iterable[dict[str, bytes]]) -> dict[str, bytes]:
    """Each service's and `*`'s stragglers and revisions, summed over the windows."""
    counts: dict[str, int] = defaultdict(int)
    revisions: dict[str, int] = defaultdict(int)
    for h in hashes:
        for svc, n in straggler_counts(h).items():
            counts[svc] += n
        for svc, rev in straggler_revisions(h).items():
            revisions[svc] += rev
    return {
        batch_field(svc, FOLDED): folded_stragglers(counts[svc], revisions[svc]).encode()
        for svc in sorted(counts)
    }


def _folded_counts(hashes: Iterable[dict[str, bytes]]) -> dict[str, bytes]:
    total: dict[str, int] = defaultdict(int)
    for h in hashes:
        for f, v in h.items():
            total[split_batch_field(f)[0]] += int(v)
    return {batch_field(svc, FOLDED): str(n).encode() for svc, n in sorted(total.items())}


@dataclass
class RetentionPlan:
    """The writes and deletes of one batch's retention work, applied inside its transaction."""

    #: (spec key, start) -> the roll-up to write.
    rolled: dict[tuple[str, int], RolledWindow] = field(default_factory=dict)
    #: (spec key, start) -> late fields to add to an already rolled-up period.
    late: dict[tuple[str, int], dict[str, bytes]] = field(default_factory=dict)
    #: spec key -> window starts to delete, and the index bound (inclusive) they fall under.
    expire: dict[str, tuple[list[int], int]] = field(default_factory=dict)
    #: (domain, size) -> arrival window starts to delete.
    expire_arrivals: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    services_gone: list[str] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    #: The clock each arrival domain ages against (ms): the batch's timestamp for processing
    #: time, the newest broker-time window seen for broker time.
    arrival_clocks: dict[str, int] = field(default_factory=dict)
    #: The raw TTL arrivals are kept for (None: for ever).
    arrival_ttl_ms: int | None = None
    #: Fields of `Keys.retention_sizes`: the windows' sizes measured by this batch.
    sizes: dict[str, str] = field(default_factory=dict)
    #: The watermark the batch's expiry runs with, and each spec's TTL (raw specs: the raw TTL).
    watermark_ms: int = 0
    raw_ttl_ms: int | None = None
    tier_ttls: dict[str, int] = field(default_factory=dict)
    #: Spec key -> its windows ending at or before this are rolled up into the next tier (the
    #: source into the first tier, each tier into the next); later ones are kept past their
    #: TTL until they are.
    rolled_until: dict[str, int] = field(default_factory=dict)

    def keeps_window(self, spec: WindowSpec, start_ms: int) -> bool:
        """Whether a window is still stored: younger than its TTL, or not rolled up yet.

        A batch writes a late row into a window only if this holds, by the same rule its
        expiry deletes by, so a replayed batch ends where its first attempt did.
        """
        end = spec.end(start_ms)
        if not expired(end, self.watermark_ms, self.tier_ttls.get(spec.key, self.raw_ttl_ms)):
            return True
        until = self.rolled_until.get(spec.key)
        return until is not None and end > until

    def keeps_arrival(self, domain: str, start_ms: int, size_ms: int) -> bool:
        """Whether a batch's own arrival window is still young enough to be written.

        The batch's writes obey the same rule as its deletes, so a replayed batch (which sees
        its first attempt's keys) ends in the same state.
        """
        clock = self.arrival_clocks.get(domain)
        return clock is None or not expired(start_ms + size_ms, clock, self.arrival_ttl_ms)

    def apply(self, tx: Any, keys: Keys) -> None:
        """Queue every write on `tx` (a MULTI pipeline), roll-ups before deletes."""
        rolled = sorted(self.rolled.items())
        ranked = [(spec, start, w.aggs) for (spec, start), w in rolled if w.aggs]
        for key, scores in ranked_counts(keys, ranked).items():
            tx.zadd(key, scores)
        for (spec, start), w in rolled:
            if w.aggs:
                tx.hset(keys.window_aggs(spec, start), mapping=w.aggs)
                tx.zadd(keys.window_index(spec), {str(start): start})
            if w.late:
                tx.hset(keys.window_late(spec, start), mapping=w.late)
                tx.zadd(keys.late_index(spec), {str(start): start})
            if w.stragglers:
                tx.hset(keys.window_stragglers(spec, start), mapping=w.stragglers)
            if w.duplicates:
                tx.hset(keys.window_duplicates(spec, start), mapping=w.duplicates)
        for (spec, start), fields in sorted(self.late.items()):
            tx.hset(keys.window_late(spec, start), mapping=fields)
            tx.zadd(keys.late_index(spec), {str(start): start})
        for spec, (starts, _) in sorted(self.expire.items()):
            for start in starts:
                tx.delete(*window_keys(keys, spec, start))
            if starts:
                members = [str(s) for s in starts]
                tx.zrem(keys.window_index(spec), *members)
                tx.zrem(keys.late_index(spec), *members)
        for (domain, size), starts in sorted(self.expire_arrivals.items()):
            for start in starts:
                tx.delete(keys.arrivals(domain, size, start))
            if starts:
                tx.zrem(keys.arrivals_index(domain, size), *[str(s) for s in starts])
        if self.services_gone:
            tx.srem(keys.services, *self.services_gone)
            tx.zrem(keys.services_seen, *self.services_gone)
        if self.meta:
            tx.hset(keys.retention, mapping=self.meta)
        if self.sizes:
            tx.hset(keys.retention_sizes, mapping=self.sizes)


@dataclass
class EarlyRetention:
    """The part of a batch's retention plan that does not depend on its rows.

    Roll-ups read only windows the watermark in force has closed, which the batch's rows do
    not change (its rows for such windows are late rows, added by `finish_retention`), so they
    are planned from the store as the batch before left it, with the batch's clock. Nothing
    here is written: a plan read and not used changes nothing.
    """

    plan: RetentionPlan
    at: BatchTime
    retention: Retention
    #: What the store held: its retention fields, window specs and arrival window sizes.
    meta: dict[str, str]
    specs: list[WindowSpec]
    sizes: list[int]
    #: The spec rolled up into the tiers (None: no roll-ups, and no tiers).
    source: WindowSpec | None
    tiers: tuple[Tier, ...]


def read_retention(
    r: redis.Redis,
    keys: Keys,
    retention: Retention,
    source: WindowSpec | None,
    at: BatchTime,
    size_budget: int | None = None,
    in_force: Retention | None = None,
    merge: MergeEncoded = merge_encoded,
) -> EarlyRetention:
    """Read what the batch's retention work needs, measure, and plan the roll-ups (no writes).

    The part of the plan that needs no rows: `finish_retention` completes it with them. It
    needs only the store and the batch's clock, so the job runs it during the batch's stateful
    step (jobs/sink/ahead.py).

    `source`: the smallest tumbling spec, rolled up into the tiers (None: no roll-ups).
    `size_budget`: bytes the job's stores may take once their tiers are full
    (`--retention-size`), recorded with `retention` as set; the retention in force is then
    `in_force` (`retention` fitted to it over every store the batch writes, by the caller:
    jobs/sink/footprint.py `fit_stores`), and this store's windows are measured again when due.
    `merge`: how the roll-ups' aggregates are merged (`roll_periods`).
    """
    plan = RetentionPlan()
    wm = at.watermark_ms
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(keys.retention)
    pipe.smembers(keys.window_specs)
    pipe.smembers(keys.arrival_sizes)
    pipe.hget(keys.retention_sizes, "sized_at")
    meta_raw, specs_raw, sizes_raw, sized_at = pipe.execute()
    meta = {_s(k): _s(v) for k, v in meta_raw.items()}
    specs = sorted((WindowSpec.from_key(_s(k)) for k in specs_raw), key=lambda x: x.key)
    sizes = sorted(int(_s(v)) for v in sizes_raw)
    plan.meta = {"watermark": str(wm)}
    if size_budget is not None and retention.raw_ttl_ms is not None:
        plan.meta |= {"retention_set": retention.text(), "retention_size": str(size_budget)}
        since = at.proc_ms - int(_s(sized_at or b"0"))
        if at.watermark_ms > 0 and since >= SIZED_EVERY_MS:
            _measure(r, keys, retention, source, specs, sizes, at, plan)
        retention = in_force or retention
    plan.meta["retention"] = retention.text()
    tiers = retention.tiers if source is not None else ()
    if source is not None:
        plan.meta["source"] = source.key
    plan.arrival_ttl_ms = retention.raw_ttl_ms
    plan.watermark_ms, plan.raw_ttl_ms = wm, retention.raw_ttl_ms
    plan.tier_ttls = {t.spec.key: t.ttl_ms for t in tiers}
    if wm > 0 and source is not None and tiers:
        _plan_rollups(r, keys, tiers, source, at, meta, plan, merge)
    return EarlyRetention(plan, at, retention, meta, specs, sizes, source, tuple(tiers))


def finish_retention(
    r: redis.Redis,
    keys: Keys,
    early: EarlyRetention,
    late: Sequence[Any] = (),
    arrivals: Sequence[Any] = (),
) -> RetentionPlan:
    """`read_retention`'s plan completed with the batch's rows: late rows, clocks, expiry.

    `late`: the batch's LateUpdates (jobs/sink/redis_sink.py), added to rolled-up periods;
    `arrivals`: its ArrivalUpdates, whose broker times move the broker-time clock.
    """
    plan, at, retention, meta = early.plan, early.at, early.retention, early.meta
    broker = max(
        [int(meta.get("broker_clock", 0))] + [a.start_ms for a in arrivals if a.domain == "broker"]
    )
    plan.meta["broker_clock"] = str(broker)
    plan.arrival_clocks = {"processing": at.proc_ms, "broker": broker}
    if at.watermark_ms <= 0:  # nothing seen yet: no period has closed, nothing has aged
        return plan
    tiers = early.tiers
    if early.source is not None and tiers:
        _plan_late(tiers, early.source, at, late, plan)
    ttls = [(s, retention.raw_ttl_ms) for s in early.specs] + [(t.spec, t.ttl_ms) for t in tiers]
    _plan_expiry(r, keys, ttls, set(early.sizes), retention, at, plan)
    for spec_key, (starts, _) in plan.expire.items():
        # what has gone, for readers: a TTL that grows again (a larger budget, a longer
        # --retention) must not make them look for windows already deleted
        end = WindowSpec.from_key(spec_key).end(max(starts))
        gone = max(int(meta.get(f"dropped:{spec_key}", 0)), end)
        plan.meta[f"dropped:{spec_key}"] = str(gone)
    return plan


def _measure(
    r: redis.Redis,
    keys: Keys,
    retention: Retention,
    source: WindowSpec | None,
    specs: Sequence[WindowSpec],
    sizes: Sequence[int],
    at: BatchTime,
    plan: RetentionPlan,
) -> None:
    """The windows' sizes measured again, into the plan's writes (once `SIZED_EVERY_MS`)."""
    tiers = [t.spec for t in retention.tiers] if source is not None else []
    got = measure(r, keys, [*specs, *tiers], sizes, at.watermark_ms)
    if got:  # nothing closed yet: again with the next batch
        fields = {name: f"{n:.0f}" for name, n in got.items()}
        plan.sizes = fields | {"sized_at": str(at.proc_ms)}


def _plan_rollups(
    r: redis.Redis,
    keys: Keys,
    tiers: Sequence[Tier],
    source: WindowSpec,
    at: BatchTime,
    meta: dict[str, str],
    plan: RetentionPlan,
    merge: MergeEncoded,
) -> None:
    wm = at.watermark_ms
    below: dict[int, RolledWindow] = {}  # the finer tier's periods built in this batch
    finer = source
    finer_until: int | None = None  # how far the finer tier is built (None: raw, all of it)
    for tier in tiers:
        limit = tumbling_start(wm, tier.size_ms)  # periods ending at or before it are closed
        if finer_until is not None:  # a tier is built only from what the finer one holds
            limit = min(limit, tumbling_start(finer_until, tier.size_ms))
        done = meta.get(f"rolled:{tier.size_ms}")
        cursor = int(done) if done is not None else None
        built: dict[int, RolledWindow] = {}
        until = limit if cursor is None else max(cursor, limit)
        if cursor is None or limit > cursor:
            lo = "-inf" if cursor is None else cursor
            starts, until = _starts_to_roll(r, keys, finer, lo, limit, tier.size_ms)
            starts |= {s for s in below if (cursor is None or s >= cursor) and s < until}
            windows = _read_windows(r, keys, finer, sorted(starts - set(below)))
            windows.update({s: w for s, w in below.items() if s in starts})
            periods: dict[int, list[tuple[int, RolledWindow]]] = defaultdict(list)
            for s, w in windows.items():
                periods[tumbling_start(s, tier.size_ms)].append((s, w))
            built = roll_periods(periods, at.batch_id, merge)
        plan.meta[f"rolled:{tier.size_ms}"] = str(until)
        plan.rolled_until[finer.key] = until
        for p, w in built.items():
            plan.rolled[(tier.spec.key, p)] = w
        below, finer, finer_until = built, tier.spec, until
    # a roll-up already past its TTL is written only if the next tier has not taken it in yet
    plan.rolled = {
        (key, p): w
        for (key, p), w in plan.rolled.items()
        if plan.keeps_window(WindowSpec.from_key(key), p)
    }


def _starts_to_roll(
    r: redis.Redis, keys: Keys, spec: WindowSpec, lo: Any, hi: int, size_ms: int
) -> tuple[set[int], int]:
    """Window starts of `spec` in [lo, hi) to roll up now, and where they end (a period bound).

    At most ROLLUP_PER_BATCH windows in whole periods, oldest first (one period whole if it
    alone has more); the rest go with the next batches.
    """
    cap = ROLLUP_PER_BATCH
    pipe = r.pipeline(transaction=False)
    for index in (keys.window_index(spec.key), keys.late_index(spec.key)):
        pipe.zrangebyscore(index, lo, hi - 1, start=0, num=cap + 1)
    got = [[int(_s(v)) for v in vs] for vs in pipe.execute()]
    starts = sorted(set(got[0]) | set(got[1]))
    if len(starts) <= cap and all(len(vs) <= cap for vs in got):
        return set(starts), hi
    known = min([vs[-1] for vs in got if len(vs) > cap] + [starts[min(cap, len(starts) - 1)]])
    until = tumbling_start(known, size_ms)  # whole periods below the first one not all seen
    if until <= starts[0]:  # one period holds more than the cap: take it whole
        until = tumbling_start(starts[0], size_ms) + size_ms
        return _index_range(r, keys, spec, lo, until - 1), until
    return {s for s in starts if s < until}, until


def _plan_late(
    tiers: Sequence[Tier],
    source: WindowSpec,
    at: BatchTime,
    late: Sequence[Any],
    plan: RetentionPlan,
) -> None:
    """The batch's late rows of the source spec, merged into each rolled-up period they hit.

    A period not rolled up yet gets them when it is (its build folds the finer windows' late
    rows in); one past its TTL and rolled into the next tier has gone.
    """
    for tier in tiers:
        built_until = plan.rolled_until.get(_finer_key(tiers, tier, source), 0)
        grouped: dict[tuple[int, str], list[tuple[int, bytes]]] = defaultdict(list)
        for u in late:
            if u.spec != source.key:
                continue
            p = tumbling_start(u.start_ms, tier.size_ms)
            if p + tier.size_ms > built_until or not plan.keeps_window(tier.spec, p):
                continue
            grouped[(p, u.service)].append((u.start_ms, u.agg or LateAgg(u.count).to_bytes()))
        cells = sorted(grouped)
        blobs = [
            (k, blob)
            for k, cell in enumerate(cells)
            for _, blob in sorted(grouped[cell], key=lambda x: x[0])
        ]
        merged = merge_late(
            [b for _, b in blobs], np.array([k for k, _ in blobs], np.int64), len(cells)
        )
        for (p, service), total in zip(cells, merged, strict=True):
            fields = plan.late.setdefault((tier.spec.key, p), {})
            fields[batch_field(service, at.batch_id)] = total


def _finer_key(tiers: Sequence[Tier], tier: Tier, source: WindowSpec) -> str:
    """The spec a tier is rolled up from."""
    i = tiers.index(tier)
    return source.key if i == 0 else tiers[i - 1].spec.key


def _plan_expiry(
    r: redis.Redis,
    keys: Keys,
    ttls: Sequence[tuple[WindowSpec, int | None]],
    arrival_sizes: set[int],
    retention: Retention,
    at: BatchTime,
    plan: RetentionPlan,
) -> None:
    wm = at.watermark_ms
    pipe = r.pipeline(transaction=False)
    asked: list[tuple[str, Any]] = []
    for spec, ttl in ttls:
        if ttl is None:
            continue
        bound = wm - ttl - spec.size_ms  # start <= bound  <=>  watermark - end >= ttl
        until = plan.rolled_until.get(spec.key)
        if until is not None:  # and only once it is rolled up into the next tier
            bound = min(bound, until - spec.size_ms)
        for index in (keys.window_index(spec.key), keys.late_index(spec.key)):
            pipe.zrangebyscore(index, "-inf", bound, start=0, num=EXPIRE_PER_BATCH)
            asked.append(("spec", (spec.key, bound)))
    if retention.raw_ttl_ms is not None:
        for size in sorted(arrival_sizes):
            for domain in ARRIVAL_DOMAINS:
                bound = plan.arrival_clocks[domain] - retention.raw_ttl_ms - size
                pipe.zrangebyscore(
                    keys.arrivals_index(domain, size), "-inf", bound, start=0, num=EXPIRE_PER_BATCH
                )
                asked.append(("arr", (domain, size)))
    longest = retention.longest_ms
    if longest is not None:
        widest = max([s.size_ms for s, _ in ttls], default=0)
        pipe.zrangebyscore(keys.services_seen, "-inf", wm - longest - widest)
        asked.append(("svc", None))
    for (what, key), got in zip(asked, pipe.execute() if asked else [], strict=True):
        starts = sorted({int(_s(v)) for v in got}) if what != "svc" else []
        if what == "spec":
            spec_key, bound = key
            have, _ = plan.expire.get(spec_key, ([], bound))
            plan.expire[spec_key] = (sorted(set(have) | set(starts)), bound)
        elif what == "arr":
            if starts:
                plan.expire_arrivals[key] = starts
        else:
            plan.services_gone = sorted(_s(v) for v in got)
    plan.expire = {k: v for k, v in plan.expire.items() if v[0]}


def _index_range(r: redis.Redis, keys: Keys, spec: WindowSpec, lo: Any, hi: int) -> set[int]:
    """Window starts in [lo, hi] with results or late rows."""
    pipe = r.pipeline(transaction=False)
    pipe.zrangebyscore(keys.window_index(spec.key), lo, hi)
    pipe.zrangebyscore(keys.late_index(spec.key), lo, hi)
    a, b = pipe.execute()
    return {int(_s(v)) for v in [*a, *b]}


def _read_windows(
    r: redis.Redis, keys: Keys, spec: WindowSpec, starts: Sequence[int]
) -> dict[int, RolledWindow]:
    if not starts:
        return {}
    pipe = r.pipeline(transaction=False)
    for s in starts:
        pipe.hgetall(keys.window_aggs(spec.key, s))
        pipe.hgetall(keys.window_late(spec.key, s))
        pipe.hgetall(keys.window_stragglers(spec.key, s))
        pipe.hgetall(keys.window_duplicates(spec.key, s))
    got = iter(pipe.execute())
    out = {}
    for s in starts:
        aggs, late, strag, dup = ({_s(k): v for k, v in next(got).items()} for _ in range(4))
        out[s] = RolledWindow(aggs=aggs, late=late, stragglers=strag, duplicates=dup)
    return out


def services_seen(windows: Iterable[Any]) -> dict[str, int]:
    """Service -> newest window start among a batch's window updates (`*` left out)."""
    out: dict[str, int] = {}
    for w in windows:
        if w.service != ALL_SERVICES and w.start_ms > out.get(w.service, w.start_ms - 1):
            out[w.service] = w.start_ms
    return out
