"""The Redis key layout and the read API. docs/redis.md is the human-readable twin.

The job's sink writes these keys (jobs/redis_sink.py); `tidegauge query`, the dashboard and the
tests read them only through the functions here, so there is one definition of what is stored.

All times are epoch milliseconds (UTC). Window metrics are stored as small JSON documents in a
hash per window, one field per service plus `*` (all services).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import redis

from sketches.tdigest import TDigest
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.config import RedisSettings
from tidegauge.core.metrics import (
    BUILT_IN_METRICS,
    LateAgg,
    WindowAgg,
    added_result_fields,
    fraction_at_least,
)
from tidegauge.core.windows import WindowSpec, tumbling_start

__all__ = [
    "ALL_SERVICES",
    "TIME_DOMAINS",
    "ArrivalRow",
    "ClosedWindows",
    "LateCounters",
    "LatenessResult",
    "event_arrivals",
    "event_spec",
    "read_arrival_size",
    "read_arrivals",
    "read_late_counters",
    "read_late_events",
    "read_lateness",
    "read_watermarks",
    "DeadLetter",
    "METRIC_FIELDS",
    "JobStatus",
    "Keys",
    "MERGE_BLOCK",
    "RangeAggs",
    "RangeResult",
    "WindowRow",
    "connect",
    "read_batches",
    "read_dead_counts",
    "read_dead_letters",
    "read_services",
    "read_status",
    "read_range",
    "read_range_merged",
    "read_window_specs",
    "read_windows",
]

T = TypeVar("T")

#: The pseudo-service that aggregates every service.
ALL_SERVICES = "*"


@dataclass(frozen=True)
class Keys:
    """Every Redis key Tidegauge uses, under one prefix (default `tg`)."""

    prefix: str = "tg"

    def window(self, spec: str, start_ms: int) -> str:
        """Hash: service -> JSON metrics of the window of `spec` (a WindowSpec key) at start."""
        return f"{self.prefix}:win:{spec}:{start_ms}"

    def window_aggs(self, spec: str, start_ms: int) -> str:
        """Hash: service -> serialised WindowAgg (counts, t-digest, HyperLogLog) of the window."""
        return f"{self.prefix}:agg:{spec}:{start_ms}"

    def window_index(self, spec: str) -> str:
        """Sorted set of window starts (member and score = start ms) of one window spec."""
        return f"{self.prefix}:win:{spec}:idx"

    def window_late(self, spec: str, start_ms: int) -> str:
        """Hash: "service|batch_id" -> LateAgg bytes of the window's late rows in that batch."""
        return f"{self.prefix}:late:{spec}:{start_ms}"

    def window_stragglers(self, spec: str, start_ms: int) -> str:
        """Hash: "service|batch_id" -> stragglers of that window in that batch (one revision)."""
        return f"{self.prefix}:strag:{spec}:{start_ms}"

    def arrivals(self, domain: str, size_ms: int, start_ms: int) -> str:
        """Hash: "service|batch_id" -> JSON {events, late, stragglers, proc_ms}.

        The batch's events of one service in this processing-time or broker-time window.
        """
        return f"{self.prefix}:arr:{domain}:{size_ms}:{start_ms}"

    def arrivals_index(self, domain: str, size_ms: int) -> str:
        """Sorted set of window starts with arrivals in `domain`."""
        return f"{self.prefix}:arr:{domain}:{size_ms}:idx"

    @property
    def arrival_sizes(self) -> str:
        """Set of window sizes (ms) the arrival series are stored in."""
        return f"{self.prefix}:arr:sizes"

    @property
    def late_events(self) -> str:
        """Sorted set of late events (JSON members), score = broker timestamp (ms); capped."""
        return f"{self.prefix}:late:events"

    def late_index(self, spec: str) -> str:
        """Sorted set of window starts that have late rows."""
        return f"{self.prefix}:late:{spec}:idx"

    @property
    def window_specs(self) -> str:
        """Set of window spec keys ("10000" tumbling, "60000-10000" hopping) with data."""
        return f"{self.prefix}:win:specs"

    @property
    def services(self) -> str:
        """Set of every service seen."""
        return f"{self.prefix}:services"

    @property
    def epoch(self) -> str:
        """String: a random token the sink sets when it first writes to an empty store.

        A flushed Redis gets a new one with the next batch, so readers that remember closed
        windows (`tidegauge.core.closed_windows`) know their memory is stale.
        """
        return f"{self.prefix}:epoch"

    @property
    def status(self) -> str:
        """Hash: the job's status after its latest batch."""
        return f"{self.prefix}:status"

    @property
    def batches(self) -> str:
        """Sorted set: one JSON summary per batch, score = batch id (recent ones kept)."""
        return f"{self.prefix}:batches"

    @property
    def dead_letters(self) -> str:
        """Sorted set of dead letters (JSON members), score = Kafka timestamp (ms); capped."""
        return f"{self.prefix}:dead:letters"

    @property
    def control(self) -> str:
        """Hash of demo/scenario commands (`tidegauge.core.control` writes and parses it).

        `pause_until` (epoch ms): while the wall clock is before it, the job's Kafka source
        reports no new data, so the topic builds a backlog the job then catches up on
        (`--scenario backlog`, the dashboard's backlog button). `incident_until`,
        `incident_factor`, `incident_service` and `late_burst` are read by a generator
        running with `--live-commands`.
        """
        return f"{self.prefix}:control"

    @property
    def dead_counts(self) -> str:
        """Hash: reason -> number of dead letters ever seen (exact, not capped)."""
        return f"{self.prefix}:dead:count"


def connect(settings: RedisSettings) -> redis.Redis:
    """A client for `settings.url`; connection errors surface on first use."""
    return redis.Redis.from_url(settings.url, socket_connect_timeout=3, socket_timeout=10)


@dataclass(frozen=True)
class WindowRow:
    """Metrics of one event-time window for one service (`*` = all services)."""

    window_start: int
    window_end: int
    service: str
    count: int
    events_per_s: float
    late: int = 0
    errors: int = 0
    error_rate: float = 0.0
    latency_count: int = 0
    latency_mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    distinct_users: int = 0
    spec: str = ""
    kind: str = "tumbling"
    #: Accepted after the window was emitted (its end <= the frontier), and the number of
    #: batches that brought such corrections (revision 0 = never corrected).
    stragglers: int = 0
    revision: int = 0
    #: Arrival (broker time) - event time of the accepted events, ms.
    lateness_p50: float | None = None
    lateness_p99: float | None = None
    lateness_max: float | None = None
    #: The job's watermark has passed the window's end: no event can change it any more.
    closed: bool = False
    #: Result fields of metrics registered by plugins (None where a window predates them).
    extra: Mapping[str, Any] = field(default_factory=dict)

    def value(self, name: str) -> Any:
        """Result field `name`, built in or added by a plugin (None when absent)."""
        if name in _ROW_FIELDS:
            return getattr(self, name)
        return self.extra.get(name)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output: every result field at the top level."""
        d = dict(vars(self))
        d.update(d.pop("extra"))
        return d


_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(WindowRow))


@dataclass(frozen=True)
class JobStatus:
    """What the job reported after its latest batch."""

    batch_id: int
    batch_time: int
    watermark: int
    input_rows: int
    offsets: dict[str, int]
    latest_offsets: dict[str, int]
    batch_duration_ms: int
    query_id: str
    #: When the job last reported (also while idle); batch_time is when its last batch ran.
    status_time: int = 0
    #: How often the job promises to report (trigger interval, at least 1 s); None if unknown.
    report_interval_ms: int | None = None
    #: The job's --allowed-lateness; None if unknown (status written by an older job).
    allowed_lateness_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


@dataclass(frozen=True)
class DeadLetter:
    """A record that broke the event contract, kept with its reason and (capped) raw bytes."""

    partition: int
    offset: int
    kafka_timestamp: int
    reason: str
    detail: str
    raw: bytes
    raw_size: int
    batch_id: int

    @property
    def ref(self) -> str:
        """Its identity in the store: where it sits in Kafka."""
        return f"{self.partition}:{self.offset}"

    def to_json(self) -> str:
        """Stored form; raw bytes as latin-1 text so every byte survives JSON."""
        d = asdict(self)
        d["raw"] = self.raw.decode("latin-1")
        return json.dumps(d, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> DeadLetter:
        """Inverse of `to_json`."""
        d = json.loads(text)
        d["raw"] = d["raw"].encode("latin-1")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output; raw shown as text with undecodable bytes escaped."""
        d = asdict(self)
        d["raw"] = self.raw.decode("utf-8", errors="backslashreplace")
        return d


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def read_window_specs(r: redis.Redis, keys: Keys) -> list[WindowSpec]:
    """Window specs with stored results: tumbling first, then by size and slide."""
    members: Any = r.smembers(keys.window_specs)
    specs = [WindowSpec.from_key(_s(v)) for v in members]
    return sorted(specs, key=lambda s: (s.kind != "tumbling", s.size_ms, s.slide_ms))


def read_services(r: redis.Redis, keys: Keys) -> list[str]:
    """Every service seen, sorted (without `*`)."""
    members: Any = r.smembers(keys.services)
    return sorted(_s(v) for v in members)


def _starts(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    since_ms: int | None,
    until_ms: int | None,
    with_late: bool = True,
) -> list[int]:
    lo = "-inf" if since_ms is None else spec.first_start_overlapping(since_ms)
    hi = "+inf" if until_ms is None else until_ms - 1
    found: set[int] = set()
    indexes = [keys.window_index(spec.key)] + ([keys.late_index(spec.key)] if with_late else [])
    for idx in indexes:
        members: Any = r.zrangebyscore(idx, lo, hi)
        found.update(int(_s(v)) for v in members)
    return sorted(found)


def _sync(r: redis.Redis, keys: Keys, cache: ClosedWindows | None) -> int | None:
    """Read the store's identity and watermark (before the data), check `cache` against them.

    Returns the watermark closed windows are judged by, or None when nothing may be reused.
    """
    pipe = r.pipeline(transaction=False)
    pipe.get(keys.epoch)
    pipe.hmget(keys.status, ["query_id", "watermark"])
    epoch, (query_id, watermark) = pipe.execute()
    if cache is None:
        return int(watermark) if watermark is not None else None
    identity = None if epoch is None else (_s(epoch), _s(query_id or b""))
    return cache.sync(identity, None if watermark is None else int(watermark))


def _reusable(spec: WindowSpec, start: int, watermark: int | None) -> bool:
    """A window no event can change any more (sessions grow their end: never reused)."""
    return spec.is_closed(start, watermark)


def read_windows(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec | None = None,
    service: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    cache: ClosedWindows | None = None,
) -> list[WindowRow]:
    """Stored windows of one spec, ordered by start then service.

    `spec` defaults to the first stored spec (the smallest tumbling one); `since_ms`/`until_ms`
    select windows that end after `since_ms` and start before `until_ms`; `service` = `*`
    selects the all-services rows. With `cache`, closed windows read before are not read
    again (only their late counts, which still change).
    """
    if spec is None:
        specs = read_window_specs(r, keys)
        if not specs:
            return []
        spec = specs[0]
    watermark = _sync(r, keys, cache)
    starts = _starts(r, keys, spec, since_ms, until_ms)
    known = {s: cache.get("rows", spec.key, s) for s in starts} if cache else {}
    pipe = r.pipeline(transaction=False)
    for start in starts:
        if known.get(start) is None:
            pipe.hgetall(keys.window(spec.key, start))
        pipe.hgetall(keys.window_late(spec.key, start))
        if known.get(start) is None:
            pipe.hgetall(keys.window_stragglers(spec.key, start))
    got = iter(pipe.execute() if starts else [])
    rows: list[WindowRow] = []
    for start in starts:
        closed = spec.is_closed(start, watermark)
        shown = known.get(start)
        if shown is None:
            docs = {_s(k): json.loads(v) for k, v in next(got).items()}
            late_fields, strag_fields = next(got), next(got)
            strag = _per_service(strag_fields, lambda v: int(v))
            revisions = _revisions(strag_fields)
            shown = {
                svc: _row(
                    spec,
                    start,
                    svc,
                    doc,
                    0,
                    stragglers=strag.get(svc, 0),
                    revision=revisions.get(svc, 0),
                    closed=closed,
                )
                for svc, doc in docs.items()
            }
            if cache is not None and _reusable(spec, start, watermark):
                cache.put("rows", spec.key, start, shown)
        else:
            late_fields = next(got)
        late = _per_service(late_fields, LateAgg.count_of)
        for svc in sorted(set(shown) | set(late)):
            if service is not None and svc != service:
                continue
            row = shown.get(svc) or _row(spec, start, svc, {}, 0, closed=closed)
            n = late.get(svc, 0)
            rows.append(row if row.late == n else replace(row, late=n))
    return rows


def _per_service(fields: dict[Any, Any], value: Any) -> dict[str, int]:
    """Sum "service|batch" fields per service, and over all services as `*`."""
    out: dict[str, int] = {}
    for k, v in fields.items():
        svc = _s(k).rsplit("|", 1)[0]
        out[svc] = out.get(svc, 0) + value(v)
    if out:
        out[ALL_SERVICES] = sum(out.values())
    return out


def _revisions(fields: dict[Any, Any]) -> dict[str, int]:
    """Batches that corrected each service's window; `*` counts distinct batches."""
    pairs = [_s(k).rsplit("|", 1) for k in fields]
    out: dict[str, int] = {}
    for svc, _ in pairs:
        out[svc] = out.get(svc, 0) + 1
    if pairs:
        out[ALL_SERVICES] = len({b for _, b in pairs})
    return out


#: Built-in window metrics beyond count and events/s, as stored and shown: the result fields of
#: the built-in metrics (tidegauge/core/metrics.py), which `WindowRow` has as attributes.
METRIC_FIELDS = tuple(
    f for m in BUILT_IN_METRICS for f in m.fields if f not in ("count", "events_per_s")
)


def _row(
    spec: WindowSpec,
    start: int,
    service: str,
    doc: dict[str, Any],
    late: int,
    stragglers: int = 0,
    revision: int = 0,
    closed: bool = False,
) -> WindowRow:
    n = int(doc.get("count", 0))
    return WindowRow(
        window_start=start,
        window_end=spec.end(start),
        service=service,
        count=n,
        events_per_s=spec.rate_per_s(n),
        late=late,
        stragglers=stragglers,
        revision=revision,
        closed=closed,
        spec=spec.key,
        kind=spec.kind,
        extra={f: doc.get(f) for f in added_result_fields()},
        **{f: doc[f] for f in METRIC_FIELDS if f in doc},
    )


@dataclass(frozen=True)
class RangeResult:
    """Metrics of a time range, merged from the stored windows that lie inside it."""

    service: str
    range_from: int
    range_to: int
    covered_from: int | None
    covered_to: int | None
    windows: int
    metrics: dict[str, Any]
    #: The merged aggregate itself (latency t-digest, users HLL), for CDFs and further merges.
    agg: WindowAgg | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output (metrics flattened in)."""
        d = {k: v for k, v in vars(self).items() if k not in ("metrics", "agg")}
        d.update(self.metrics)
        return d


def read_range(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str = ALL_SERVICES,
    spec: WindowSpec | None = None,
) -> RangeResult:
    """Merge the sketches of every window of `spec` lying inside [since, until) into one answer.

    "p99 over the last 15 minutes" is the p99 of the merged t-digest of those windows, and the
    distinct users the merged HyperLogLog: exact merges, not averages of window figures.
    `spec` defaults to the smallest tumbling spec (non-overlapping, so nothing counts twice).
    """
    if until_ms <= since_ms:
        raise ValueError("the range must end after it starts")
    if spec is None:
        tumbling = [s for s in read_window_specs(r, keys) if s.kind == "tumbling"]
        if not tumbling:
            return RangeResult(
                service,
                since_ms,
                until_ms,
                None,
                None,
                0,
                WindowAgg().metrics(until_ms - since_ms),
                WindowAgg(),
            )
        spec = tumbling[0]
    merged = read_range_merged(r, keys, since_ms, until_ms, spec, [service])
    starts = merged.starts
    agg = merged.aggs.get(service, WindowAgg())
    n = merged.windows.get(service, 0)
    if not starts:
        return RangeResult(
            service, since_ms, until_ms, None, None, 0, agg.metrics(until_ms - since_ms), agg
        )
    lo, hi = starts[0], spec.end(starts[-1])
    return RangeResult(service, since_ms, until_ms, lo, hi, n, agg.metrics(hi - lo), agg)


#: A range merges closed windows in aligned blocks of this many, each merged once and kept in
#: the memo: an hour of 10 s windows is then ~60 merges per refresh instead of 360.
MERGE_BLOCK = 6


@dataclass(frozen=True)
class RangeAggs:
    """The windows of a spec inside a range, merged.

    Their starts, and per service the merged aggregate and how many windows had the service.
    """

    starts: list[int]
    aggs: dict[str, WindowAgg]
    windows: dict[str, int]


def read_range_merged(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    spec: WindowSpec,
    services: Sequence[str] | None = None,
    with_lateness: bool = False,
    cache: ClosedWindows | None = None,
) -> RangeAggs:
    """Merge the stored `WindowAgg`s of the windows of `spec` inside [since, until), per service.

    For `services` (None: every service and `*`). One ZRANGEBYSCORE and one pipeline, so a
    dashboard can merge any range for many services in two round trips. The lateness digests
    are left empty unless `with_lateness` (`read_lateness` asks for them). With `cache`,
    closed windows are decoded once, and whole blocks of `MERGE_BLOCK` closed windows are
    merged once; later calls reuse both.
    """
    watermark = _sync(r, keys, cache) if cache is not None else None
    starts = [
        s
        for s in _starts(r, keys, spec, since_ms, until_ms, with_late=False)
        if spec.lies_within(s, since_ms, until_ms)
    ]
    # (aggregate by service, windows merged into it by service): blocks, then single windows
    parts: list[tuple[dict[str, WindowAgg], dict[str, int]]] = []
    loose = starts
    if cache is not None and spec.kind == "tumbling":
        loose = []
        span = MERGE_BLOCK * spec.size_ms
        blocks: dict[int, list[int]] = {}
        for start in starts:
            blocks.setdefault(tumbling_start(start, span), []).append(start)
        block_spec = WindowSpec.tumbling(span)
        for first, members in blocks.items():
            whole = block_spec.lies_within(first, since_ms, until_ms)
            if not (whole and _reusable(block_spec, first, watermark)):
                loose += members
                continue
            block = cache.get("blocks", spec.key, first)
            if block is None:
                block = _merge_block(r, keys, spec, members)
                cache.put("blocks", spec.key, first, block)
            parts.append(block)
    aggs = _window_aggs(r, keys, spec, loose, services, with_lateness, cache, watermark)
    parts += [(a, dict.fromkeys(a, 1)) for a in aggs]
    names = services if services is not None else sorted({s for a, _ in parts for s in a})
    out: dict[str, WindowAgg] = {}
    counts: dict[str, int] = {}
    for svc in names:
        items = [(a[svc], n[svc]) for a, n in parts if svc in a]
        if items:
            out[svc] = WindowAgg.merged((a for a, _ in items), with_lateness=with_lateness)
            counts[svc] = sum(n for _, n in items)
    return RangeAggs(starts, out, counts)


def _merge_block(
    r: redis.Redis, keys: Keys, spec: WindowSpec, starts: list[int]
) -> tuple[dict[str, WindowAgg], dict[str, int]]:
    """Closed windows merged per service (lateness included), with each service's window count.

    The windows are decoded for this merge only, not kept one by one: once merged, the block
    stands for them (keeping both would hold an hour of decoded HyperLogLogs twice).
    """
    aggs = _window_aggs(r, keys, spec, starts, None, True, None, None)
    services = sorted({s for a in aggs for s in a})
    merged = {s: WindowAgg.merged(a[s] for a in aggs if s in a) for s in services}
    return merged, {s: sum(s in a for a in aggs) for s in services}


def _window_aggs(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    starts: Sequence[int],
    services: Sequence[str] | None,
    with_lateness: bool,
    cache: ClosedWindows | None,
    watermark: int | None,
) -> list[dict[str, WindowAgg]]:
    """Each window's aggregates by service; closed ones decoded once when there is a memo."""
    known = {s: cache.get("aggs", spec.key, s) for s in starts} if cache else {}
    misses = [s for s in starts if known.get(s) is None]
    whole = services is None or cache is not None  # a memo keeps every service of a window
    pipe = r.pipeline(transaction=False)
    for start in misses:
        if whole:
            pipe.hgetall(keys.window_aggs(spec.key, start))
        else:
            pipe.hmget(keys.window_aggs(spec.key, start), list(services or ()))
    got = iter(pipe.execute() if misses else [])
    out = []
    for start in starts:
        aggs = known.get(start)
        if aggs is None:
            fetched = next(got)
            reuse = cache is not None and _reusable(spec, start, watermark)
            pairs = fetched.items() if whole else zip(services or (), fetched, strict=True)
            aggs = {
                _s(svc): WindowAgg.from_bytes(blob, with_lateness or reuse)
                for svc, blob in pairs
                if blob is not None
            }
            if cache is not None and reuse:
                cache.put("aggs", spec.key, start, aggs)
        out.append(aggs if services is None else {s: aggs[s] for s in services if s in aggs})
    return out


def read_status(r: redis.Redis, keys: Keys) -> JobStatus | None:
    """The job's latest status, or None before its first batch."""
    raw = r.hgetall(keys.status)
    if not raw:
        return None
    d = {_s(k): _s(v) for k, v in raw.items()}
    return JobStatus(
        batch_id=int(d["batch_id"]),
        batch_time=int(d["batch_time"]),
        watermark=int(d["watermark"]),
        input_rows=int(d["input_rows"]),
        offsets={k: int(v) for k, v in json.loads(d["offsets"]).items()},
        latest_offsets={k: int(v) for k, v in json.loads(d["latest_offsets"]).items()},
        batch_duration_ms=int(d["batch_duration_ms"]),
        query_id=d["query_id"],
        status_time=int(d.get("status_time", d["batch_time"])),
        report_interval_ms=int(d["report_interval_ms"]) if "report_interval_ms" in d else None,
        allowed_lateness_ms=int(d["allowed_lateness_ms"]) if "allowed_lateness_ms" in d else None,
    )


def read_batches(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[dict[str, Any]]:
    """Per-batch summaries (oldest first): offsets before/after, rows, watermark, durations."""
    start = 0 if limit is None else -limit
    members: Any = r.zrange(keys.batches, start, -1)
    return [json.loads(v) for v in members]


def read_dead_counts(r: redis.Redis, keys: Keys) -> dict[str, int]:
    """Dead letters ever seen, by reason (exact even when old records were trimmed)."""
    return {_s(k): int(v) for k, v in r.hgetall(keys.dead_counts).items()}


def read_dead_letters(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[DeadLetter]:
    """Kept dead letters, newest first (`limit` of them, or all)."""
    end = -1 if limit is None else limit - 1
    members: Any = r.zrevrange(keys.dead_letters, 0, end)
    return [DeadLetter.from_json(v) for v in members]


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
) -> LatenessResult:
    """Merge the lateness of every window of `spec` inside [since, until): accepted + late.

    With `cache`, closed windows' aggregates are merged once (`read_range_merged`) and the
    late and straggler hashes are re-read only when a batch added to them.
    """
    if until_ms <= since_ms:
        raise ValueError("the range must end after it starts")
    if spec is None:
        specs = [s for s in read_window_specs(r, keys) if s.kind != "session"]
        spec = specs[0] if specs else WindowSpec.tumbling(10_000)
    accepted = read_range_merged(
        r, keys, since_ms, until_ms, spec, [service], with_lateness=True, cache=cache
    ).aggs.get(service, WindowAgg())
    starts = [
        s
        for s in _starts(r, keys, spec, since_ms, until_ms)
        if spec.lies_within(s, since_ms, until_ms)
    ]
    lates = _stamped(
        r,
        cache,
        "late",
        spec.key,
        starts,
        lambda s: keys.window_late(spec.key, s),
        lambda _, fields: _late_aggs(fields),
    )
    strags = _stamped(
        r,
        cache,
        "stragglers",
        spec.key,
        starts,
        lambda s: keys.window_stragglers(spec.key, s),
        lambda _, fields: _per_service(fields, lambda v: int(v)),
    )
    picked = [a for per in lates for svc, a in per if service in (ALL_SERVICES, svc)]
    late = sum(x.count for x in picked)
    return LatenessResult(
        service=service,
        spec=spec.key,
        range_from=since_ms,
        range_to=until_ms,
        windows=len(starts),
        events=accepted.count + late,
        late=late,
        stragglers=sum(per.get(service, 0) for per in strags),
        lateness=TDigest.merged([accepted.lateness] + [x.lateness for x in picked]),
        overdue=TDigest.merged([accepted.overdue] + [x.overdue for x in picked]),
    )


def _late_aggs(fields: dict[Any, Any]) -> list[tuple[str, LateAgg]]:
    """A late hash's "service|batch" fields as (service, decoded LateAgg)."""
    return [(_s(k).rsplit("|", 1)[0], LateAgg.from_bytes(v)) for k, v in fields.items()]


def _stamped(
    r: redis.Redis,
    cache: ClosedWindows | None,
    kind: str,
    tag: str,
    starts: Sequence[int],
    key_of: Callable[[int], str],
    parse: Callable[[int, dict[Any, Any]], T],
) -> list[T]:
    """`parse(start, fields)` of one "service|batch" hash per window start, memoised by HLEN.

    Each batch adds its own field and a replayed batch rewrites its field unchanged, so within
    one store epoch the number of fields is a version stamp: with `cache` (synced by the
    caller's first read), a hash is fetched again only when its HLEN changed.
    """
    known: dict[int, tuple[int, T]] = {}
    if cache is not None and cache.synced and starts:
        pipe = r.pipeline(transaction=False)
        for start in starts:
            pipe.hlen(key_of(start))
        for start, n in zip(starts, pipe.execute(), strict=True):
            memo = cache.get(kind, tag, start)
            if memo is not None and memo[0] == n:
                known[start] = memo
    misses = [s for s in starts if s not in known]
    pipe = r.pipeline(transaction=False)
    for start in misses:
        pipe.hgetall(key_of(start))
    for start, fields in zip(misses, pipe.execute() if misses else [], strict=True):
        known[start] = (len(fields), parse(start, fields))
        if cache is not None and cache.synced:
            cache.put(kind, tag, start, known[start])
    return [known[s][1] for s in starts]


@dataclass(frozen=True)
class ArrivalRow:
    """Events of one service (`*` = all) in one window of a time domain, classified."""

    domain: str
    window_start: int
    window_end: int
    service: str
    events: int
    late: int
    stragglers: int

    @property
    def events_per_s(self) -> float:
        """Events per second of the window."""
        return self.events * 1000.0 / (self.window_end - self.window_start)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {**asdict(self), "events_per_s": self.events_per_s}


def event_arrivals(windows: Sequence[WindowRow]) -> list[ArrivalRow]:
    """The event-time series of tumbling windows: every event once, late ones included."""
    return [
        ArrivalRow(
            "event",
            w.window_start,
            w.window_end,
            w.service,
            w.count + w.late,
            w.late,
            w.stragglers,
        )
        for w in windows
    ]


#: The three clocks an event can be counted by (docs/time.md).
TIME_DOMAINS = ("event", "processing", "broker")


def read_arrival_size(r: redis.Redis, keys: Keys) -> int | None:
    """Window size (ms) of the processing- and broker-time series, or None before any.

    The smallest stored size: every size holds every event once, the smallest is the finest.
    """
    sizes: Any = r.smembers(keys.arrival_sizes)
    return min((int(_s(v)) for v in sizes), default=None)


def event_spec(specs: Sequence[WindowSpec], arrival_size: int | None) -> WindowSpec | None:
    """The tumbling spec whose windows make the event-time series (same size as the others)."""
    tumbling = [s for s in specs if s.kind == "tumbling"]
    return next(
        (s for s in tumbling if s.size_ms == arrival_size), tumbling[0] if tumbling else None
    )


def read_arrivals(
    r: redis.Redis,
    keys: Keys,
    domain: str,
    since_ms: int | None = None,
    until_ms: int | None = None,
    service: str | None = None,
    cache: ClosedWindows | None = None,
) -> list[ArrivalRow]:
    """Events per window by event time, processing time or broker time, ordered by start.

    All three count every event once (late ones included) in tumbling windows of the job's
    primary size, so the series can be drawn on one axis. "event" is read from the windows
    (count + late of the primary tumbling spec); the other two from the arrival series.
    With `cache`, a window is re-read only when its number of fields changed: each batch adds
    its own "service|batch" field and a replayed batch rewrites its field unchanged, so the
    count is a version stamp (broker-time windows can still grow long after their end).
    """
    if domain not in TIME_DOMAINS:
        raise ValueError(f"domain must be one of {', '.join(TIME_DOMAINS)}, got {domain!r}")
    size = read_arrival_size(r, keys)
    if domain == "event":
        spec = event_spec(read_window_specs(r, keys), size)
        if spec is None:
            return []
        return event_arrivals(read_windows(r, keys, spec, service, since_ms, until_ms, cache))
    if size is None:
        return []
    if cache is not None:
        _sync(r, keys, cache)
    lo = "-inf" if since_ms is None else since_ms - size + 1
    hi = "+inf" if until_ms is None else until_ms - 1
    members: Any = r.zrangebyscore(keys.arrivals_index(domain, size), lo, hi)
    starts = sorted(int(_s(v)) for v in members)
    per_window = _stamped(
        r,
        cache,
        f"arrivals:{domain}",
        str(size),
        starts,
        lambda s: keys.arrivals(domain, size, s),
        lambda s, fields: _arrival_rows(domain, s, size, fields),
    )
    return [row for rows in per_window for row in rows if service in (None, row.service)]


def _arrival_rows(domain: str, start: int, size: int, fields: dict[Any, Any]) -> list[ArrivalRow]:
    """One window's "service|batch" fields summed per service and over all (`*`), by service."""
    sums: dict[str, list[int]] = {}
    for k, v in fields.items():
        svc = _s(k).rsplit("|", 1)[0]
        doc = json.loads(v)
        for name in (svc, ALL_SERVICES):
            acc = sums.setdefault(name, [0, 0, 0])
            acc[0] += int(doc["events"])
            acc[1] += int(doc["late"])
            acc[2] += int(doc["stragglers"])
    return [ArrivalRow(domain, start, start + size, svc, *sums[svc]) for svc in sorted(sums)]


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
                if int(_s(k).rsplit("|", 1)[1]) in ids:
                    ours += int(json.loads(v)["late"])
    return LateCounters(min(ids), max(ids), ours, spark)


def read_late_events(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[dict[str, Any]]:
    """Kept late events, newest broker time first (`limit` of them, or all)."""
    end = -1 if limit is None else limit - 1
    members: Any = r.zrevrange(keys.late_events, 0, end)
    return [json.loads(v) for v in members]


def read_watermarks(
    r: redis.Redis, keys: Keys, limit: int | None = None
) -> list[dict[str, int | None]]:
    """The watermark after each recent batch with the batch's processing time (oldest first).

    Each entry: batch_id, batch_time (ms, when the batch ran), watermark (ms, after the batch)
    and max_event_time (ms: the largest event time in that batch, None for a batch without
    rows): what the dashboard draws as lines.
    """
    return [
        {
            "batch_id": int(b["batch_id"]),
            "batch_time": int(b["batch_time"]),
            "watermark": int(b["watermark"]),
            "max_event_time": b.get("max_event_time"),
        }
        for b in read_batches(r, keys, limit)
    ]
