"""Lateness: late rows and their digests per window, what-if answers, late events, counters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np
import redis

from sketches.tdigest import TDigest
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.metrics import fraction_at_least
from tidegauge.core.retention import Layer, cover_by_spec
from tidegauge.core.store.arrivals import arrival_counts, read_arrival_size
from tidegauge.core.store.corrections import late_of, read_corrections, read_late
from tidegauge.core.store.index import _stamped, _starts
from tidegauge.core.store.keys import (
    ALL_SERVICES,
    Keys,
    _s,
)
from tidegauge.core.store.status import read_batches
from tidegauge.core.store.tiers import read_retention
from tidegauge.core.store.windows import (
    _window_aggs,
    read_range_merged,
    read_window_specs,
)
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec


@dataclass(frozen=True)
class LatenessResult:
    """Lateness of the events whose event time lies in a range of windows (accepted and late).

    `lateness` is arrival (broker time) - event time; `overdue` holds, per event that arrived
    after the event-time frontier had passed its window's end, by how much (ms). An event would
    have been late with allowed lateness L exactly when its overdue is >= L (docs/time.md).
    """

    service: str
    spec: str
    range_from: int
    range_to: int
    windows: int
    events: int
    late: int
    stragglers: int
    lateness: TDigest
    overdue: TDigest
    #: Events dropped as duplicates of events already counted (not in `events`).
    duplicates: int = 0

    def fraction_late(self, allowed_lateness_ms: int) -> float:
        """Share of the events that would have been late with this allowed lateness."""
        return fraction_at_least(self.overdue, allowed_lateness_ms, self.events)

    def fraction_stragglers(self, allowed_lateness_ms: int) -> float:
        """Share that would have been stragglers (accepted after their window was emitted)."""
        return max(
            0.0,
            fraction_at_least(self.overdue, 0, self.events)
            - self.fraction_late(allowed_lateness_ms),
        )

    def to_dict(self, allowed_lateness_ms: Sequence[int] = ()) -> dict[str, Any]:
        """Plain dict for JSON: counts, lateness percentiles, and the what-if table."""
        q = (
            [float(v) for v in self.lateness.quantile(np.array([0.5, 0.9, 0.99]))]
            if self.lateness.count
            else [None, None, None]
        )
        return {
            "service": self.service,
            "spec": self.spec,
            "range_from": self.range_from,
            "range_to": self.range_to,
            "windows": self.windows,
            "events": self.events,
            "late": self.late,
            "stragglers": self.stragglers,
            "duplicates": self.duplicates,
            "lateness_p50": q[0],
            "lateness_p90": q[1],
            "lateness_p99": q[2],
            "lateness_max": float(self.lateness.max) if self.lateness.count else None,
            "what_if": [
                {
                    "allowed_lateness_ms": int(v),
                    "fraction_late": self.fraction_late(v),
                    "fraction_stragglers": self.fraction_stragglers(v),
                }
                for v in allowed_lateness_ms
            ],
        }


def read_lateness(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str = ALL_SERVICES,
    spec: WindowSpec | None = None,
    cache: ClosedWindows | None = None,
    accepted: WindowAgg | None = None,
) -> LatenessResult:
    """Merge the lateness of every window of `spec` inside [since, until): accepted + late.

    With `cache`, closed windows' aggregates are merged once (`read_range_merged`) and the
    late and straggler hashes are re-read only when a batch added to them. `accepted`: the
    service's windows of the range already merged, lateness included (a page that merged
    them for its own charts), so they are not merged twice.
    """
    if until_ms <= since_ms:
        raise ValueError("the range must end after it starts")
    stored = read_retention(r, keys) if spec is None else None
    if stored is not None and len(stored.layers) > 1:
        return _lateness_across_tiers(r, keys, since_ms, until_ms, service, stored.layers)
    if spec is None:
        specs = [s for s in read_window_specs(r, keys) if s.kind != "session"]
        spec = specs[0] if specs else WindowSpec.tumbling(10_000)
    if accepted is None:
        accepted = read_range_merged(
            r, keys, since_ms, until_ms, spec, [service], with_lateness=True, cache=cache
        ).aggs.get(service, WindowAgg())
    starts = [
        s
        for s in _starts(r, keys, spec, since_ms, until_ms)
        if spec.lies_within(s, since_ms, until_ms)
    ]
    return _lateness_of(
        r, keys, since_ms, until_ms, service, spec.key, [(spec, starts)], [accepted], cache
    )


def _lateness_across_tiers(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str,
    layers: Sequence[Layer],
) -> LatenessResult:
    """`read_lateness` over the raw windows and the roll-ups that tile the range (`cover`)."""
    parts = cover_by_spec(since_ms, until_ms, layers)
    accepted = [
        a[service]
        for piece, starts in parts
        for a in _window_aggs(r, keys, piece, starts, [service], True, None, None)
        if service in a
    ]
    label = "+".join(piece.key for piece, _ in parts) or layers[0].spec.key
    return _lateness_of(r, keys, since_ms, until_ms, service, label, parts, accepted, None)


def _lateness_of(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str,
    label: str,
    parts: Sequence[tuple[WindowSpec, list[int]]],
    accepted_aggs: Sequence[WindowAgg],
    cache: ClosedWindows | None,
) -> LatenessResult:
    """Late rows, stragglers and duplicates of the windows in `parts`, with the accepted ones."""
    accepted = WindowAgg.merged(accepted_aggs) if len(accepted_aggs) != 1 else accepted_aggs[0]
    lates: list[bytes | None] = []
    strags: list[dict[str, int]] = []
    dups: list[dict[str, int]] = []
    for spec, starts in parts:
        if service == ALL_SERVICES and keys.owner is None:  # as the window rows read them
            lates += [x.every_merged for x in read_late(r, keys, spec, starts, cache)]
        else:
            lates += _stamped(
                r,
                cache,
                f"late|{service}",
                spec.key,
                starts,
                partial(keys.window_late, spec.key),
                lambda _, fields: late_of(fields, service),
            )
        counts, duplicates = read_corrections(r, keys, spec, starts, cache)
        strags += [per for per, _ in counts]
        dups += duplicates
    picked = [LateAgg.from_bytes(blob) for blob in lates if blob is not None]
    late = sum(x.count for x in picked)
    return LatenessResult(
        service=service,
        spec=label,
        range_from=since_ms,
        range_to=until_ms,
        windows=sum(len(starts) for _, starts in parts),
        events=accepted.count + late,
        late=late,
        stragglers=sum(per.get(service, 0) for per in strags),
        lateness=TDigest.merged([accepted.lateness] + [x.lateness for x in picked]),
        overdue=TDigest.merged([accepted.overdue] + [x.overdue for x in picked]),
        duplicates=sum(per.get(service, 0) for per in dups),
    )


@dataclass(frozen=True)
class LateCounters:
    """Late rows of the batches in the job's history, counted two ways (docs/time.md).

    `tidegauge` is this job's count of raw late rows; `spark` is the sum of Spark's
    `numRowsDroppedByWatermark` over the same batches. Spark counts rows its stateful operators
    drop, after partial aggregation, and this job lets Spark drop none, so it is 0 here.
    """

    first_batch: int | None
    last_batch: int | None
    tidegauge: int
    spark: int

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


def read_late_counters(r: redis.Redis, keys: Keys) -> LateCounters:
    """Sum both late counters over the batches the history keeps (`read_batches`)."""
    batches = read_batches(r, keys)
    if not batches:
        return LateCounters(None, None, 0, 0)
    ids = {int(b["batch_id"]) for b in batches}
    spark = sum(int(b.get("spark_rows_dropped_by_watermark", 0)) for b in batches)
    size = read_arrival_size(r, keys)
    ours = 0
    if size is not None:
        since = min(int(b["batch_time"]) for b in batches) - size
        members: Any = r.zrangebyscore(keys.arrivals_index("processing", size), since, "+inf")
        pipe = r.pipeline(transaction=False)
        for start in members:
            pipe.hgetall(keys.arrivals("processing", size, int(_s(start))))
        for fields in pipe.execute() if members else []:
            for k, v in fields.items():
                batch, _, total = arrival_counts(k, v)
                if batch in ids:
                    ours += total[1]
    return LateCounters(min(ids), max(ids), ours, spark)


def read_late_events(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[dict[str, Any]]:
    """Kept late events, newest broker time first (`limit` of them, or all)."""
    end = -1 if limit is None else limit - 1
    members: Any = r.zrevrange(keys.late_events, 0, end)
    return [json.loads(v) for v in members]
