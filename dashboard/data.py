"""What one refresh of the dashboard reads from Redis. No Streamlit and no shaping here.

`read_snapshot` gathers everything the page shows through `tidegauge.core.store`'s read functions
(each one round trip or one pipeline, never one per window), so a refresh costs a fixed number
of round trips whatever the range; `shared_snapshot` reads it at most once per view and refresh
interval for every viewer of this server (dashboard/shared.py). The modules named for what they
show (`dashboard.windows`, `dashboard.lateness`, `dashboard.headline`, ...) turn a `Snapshot`
into tables and numbers; `dashboard.figures` draws them. Times are epoch ms (UTC).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis

from dashboard import metrics
from dashboard.breakdown import Breakdown, BreakdownView, read_breakdown
from dashboard.shared import Derived, SharedReads
from tidegauge.alerts.rules import Firing
from tidegauge.alerts.store import read_firings
from tidegauge.catalog import SLO_COUNTS_PLUGIN
from tidegauge.catalog.report import ServiceSlos, service_reports
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.config import RedisSettings
from tidegauge.core.dimensions import member, split_member
from tidegauge.core.plugins import load_plugins
from tidegauge.core.store import (
    ALL_SERVICES,
    TIME_DOMAINS,
    ArrivalRow,
    DeadLetter,
    JobStatus,
    Keys,
    LatenessResult,
    WindowRow,
    connect,
    event_arrivals,
    event_spec,
    read_arrival_size,
    read_arrivals,
    read_batches,
    read_dead_counts,
    read_dead_letters,
    read_dimensions,
    read_late_events,
    read_lateness,
    read_newest_arrival_start,
    read_newest_window_start,
    read_range_merged,
    read_services,
    read_status,
    read_window_specs,
    read_windows,
    read_windows_tiered,
)
from tidegauge.core.store.annotations import Annotation, read_annotations
from tidegauge.core.store.ranking import (
    RANK_BY,
    ServiceTotals,
    rank_services,
    rank_size,
    ranked_parts,
    read_service_totals,
)
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

__all__ = [
    "DEFAULT_TOP",
    "LATENCY_RANGES_MS",
    "RANGES_MS",
    "WINDOW_KINDS",
    "Filters",
    "Snapshot",
    "pick_spec",
    "client",
    "read_snapshot",
    "shared_snapshot",
]

T = TypeVar("T")

#: Time range choices of the page's sidebar and of wall page links: label -> ms of event time
#: ending at the newest window. Beyond 6 h the charts draw the retention tiers' roll-ups.
RANGES_MS = {
    "5 min": 5 * 60_000,
    "15 min": 15 * 60_000,
    "1 h": 3_600_000,
    "6 h": 6 * 3_600_000,
    "24 h": 24 * 3_600_000,
    "7 d": 7 * 86_400_000,
    "30 d": 30 * 86_400_000,
}

#: The latency range picker's choices: label -> ms of event time ending at the newest window.
LATENCY_RANGES_MS = {"5 min": 5 * 60_000, "15 min": 15 * 60_000, "60 min": 60 * 60_000}

#: Window kinds the filter offers, in this order.
WINDOW_KINDS = ("tumbling", "hopping", "sliding", "session")

#: Batch summaries read per refresh at most (the job keeps the last 2,000).
MAX_BATCHES = 2_000

#: Windows per service a chart draws at most (6 h of 10 s windows): longer ranges are drawn
#: from the retention tiers' roll-ups (a day in minutes, a week or a month in hours).
MAX_CHART_WINDOWS = 2_160

#: How often a dashboard process ranks the services of one view again (ms).
RANK_EVERY_MS = 10_000

#: Services drawn when none are chosen: the busiest this many (by `Filters.rank_by`), the rest
#: as one line. With fewer stored services every one is drawn.
DEFAULT_TOP = 10


@dataclass(frozen=True)
class Filters:
    """What the user picked: services, window kind, ranges (ms of event time).

    With no services chosen the page draws the `top` ones by `rank_by` (`RANK_BY`; `top` 0:
    every service).
    """

    services: tuple[str, ...] = ()
    kind: str = "tumbling"
    range_ms: int = 15 * 60_000
    latency_range_ms: int = 15 * 60_000
    dead_letter_limit: int = 5
    late_event_limit: int = 5
    top: int = DEFAULT_TOP
    rank_by: str = "events"
    #: (dimension, value): the per-window charts show only the events with that value, each
    #: service's and all services' (from the dimension's store, docs/dimensions.md).
    only: tuple[str, str] | None = None
    #: The latency chart's service: the one whose sliding-window p99 is read (dashed line).
    latency_service: str = ALL_SERVICES

    def __post_init__(self) -> None:
        if self.kind not in WINDOW_KINDS:
            raise ValueError(f"window kind must be one of {', '.join(WINDOW_KINDS)}")
        if self.range_ms <= 0 or self.latency_range_ms <= 0:
            raise ValueError("ranges must be positive")
        if self.top < 0:
            raise ValueError("top must be 0 (every service) or more")
        if self.rank_by not in RANK_BY:
            raise ValueError(f"rank services by one of {', '.join(RANK_BY)}")

    def selected(self, known: list[str]) -> list[str]:
        """The services to draw: the chosen ones that exist, else every known service."""
        chosen = [s for s in self.services if s in known]
        return chosen or list(known)


def pick_spec(specs: list[WindowSpec], kind: str) -> WindowSpec | None:
    """The smallest stored spec of `kind` (specs come sorted), else the first stored spec."""
    return next((s for s in specs if s.kind == kind), specs[0] if specs else None)


@dataclass(frozen=True)
class Snapshot:
    """Everything one refresh of the page shows, read at `read_at_ms` (wall clock, UTC)."""

    read_at_ms: int
    status: JobStatus | None
    window_size_ms: int | None
    windows: list[WindowRow] = field(default_factory=list)
    dead_counts: dict[str, int] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: The window spec `windows` are of, and the start (ms) of its newest stored window.
    spec: WindowSpec | None = None
    newest_start_ms: int | None = None
    #: Every stored spec, and every service the job has seen (without `*`).
    specs: list[WindowSpec] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    #: Events per window by "event", "processing" and "broker" time (`*` and each service).
    arrivals: dict[str, list[ArrivalRow]] = field(default_factory=dict)
    #: Per-batch summaries of the job (oldest first), for the watermark line and health.
    batches: list[dict[str, Any]] = field(default_factory=list)
    #: The latency range: service -> merged aggregate of the windows inside it, and its bounds.
    range_aggs: dict[str, WindowAgg] = field(default_factory=dict)
    range_from_ms: int | None = None
    range_to_ms: int | None = None
    #: Lateness of the latency range (all services), with the what-if digests.
    lateness: LatenessResult | None = None
    late_events: list[dict[str, Any]] = field(default_factory=list)
    #: Which windows the charts show, when the store has retention tiers: e.g. "1h roll-ups
    #: to 2026-…Z, then 10s windows" (tidegauge/core/retention.py).
    resolution: str | None = None
    #: Alert firings (`tidegauge alerts`) overlapping the shown range, newest first.
    firings: list[Firing] = field(default_factory=list)
    #: Demo commands and scenario pauses (tidegauge/core/store/annotations.py) of the range.
    annotations: list[Annotation] = field(default_factory=list)
    #: The smallest stored sliding spec and its rows ending inside the shown range (every
    #: service and `*`): the busiest-interval figure and the rolling percentile line.
    sliding_spec: WindowSpec | None = None
    sliding: list[WindowRow] = field(default_factory=list)
    #: The services the page draws and read (the chosen ones, else the top ones), and when
    #: they are the top of more: every service's events and errors over the range.
    drawn: list[str] = field(default_factory=list)
    totals: dict[str, ServiceTotals] = field(default_factory=dict)

    @property
    def others(self) -> list[str]:
        """Services stored but not drawn (their sum is `*` minus the drawn ones)."""
        shown = set(self.drawn)
        return [s for s in self.services if s not in shown]

    @property
    def is_empty(self) -> bool:
        """True before the job's first batch: no status and no windows."""
        return self.status is None and not self.windows


def _series_end(
    r: redis.Redis, keys: Keys, domain: str, specs: list[WindowSpec], size: int | None
) -> int | None:
    """End (ms) of the newest window of one time domain's series, or None when it is empty."""
    if domain == "event":
        spec = event_spec(specs, size)
        newest = None if spec is None else read_newest_window_start(r, keys, spec)
        return None if spec is None or newest is None else spec.end(newest)
    if size is None:
        return None
    newest = read_newest_arrival_start(r, keys, domain, size)
    return None if newest is None else newest + size


def read_snapshot(
    r: redis.Redis,
    keys: Keys,
    window_range_ms: int,
    now_ms: int,
    dead_letter_limit: int = 5,
    filters: Filters | None = None,
    cache: ClosedWindows | None = None,
) -> Snapshot:
    """Read one refresh's worth for `filters` (default: all services, smallest tumbling spec).

    Windows are those of the chosen spec that end after `newest start + size -
    window_range_ms`: event-time ranges end at the newest window, not at the wall clock (event
    time may lag or lead it). Processing- and broker-time series end at their own newest
    window, so a replay of old data and a live stream both fill the chart. The latency range
    and the lateness figures merge the sketches of the smallest tumbling spec (tumbling windows
    do not overlap, so no event counts twice). With `cache` (one per store, kept across
    refreshes), windows the watermark has passed are read and decoded only once.
    """
    f = filters or Filters(range_ms=window_range_ms, dead_letter_limit=dead_letter_limit)
    status = read_status(r, keys)
    specs = read_window_specs(r, keys)
    spec = pick_spec(specs, f.kind)
    services = read_services(r, keys)
    # The per-window reads: of the services' store, or of a dimension's for one value
    # (its members named as services again); arrivals, status and letters are the events'.
    sliced = _Slice(None) if f.only is None else _Slice(f.only[1])
    wkeys = keys if f.only is None else keys.by(f.only[0])
    if f.only is not None:
        cache = None  # (the closed-window memo is the services' store's)
        services = sliced.services(r, wkeys)
    windows: list[WindowRow] = []
    newest = None
    resolution = None
    drawn = f.selected(services)
    totals: dict[str, ServiceTotals] = {}
    read_only: list[str] | None = None  # None: every service
    if spec is not None:
        newest = read_newest_window_start(r, wkeys, spec)
        if newest is not None:
            since, until = spec.end(newest) - f.range_ms, spec.end(newest)
            min_size = f.range_ms // MAX_CHART_WINDOWS
            if f.services and drawn != services:
                read_only = [ALL_SERVICES, *drawn]
            elif f.top and len(services) > f.top:
                drawn, totals = _ranking(r, wkeys, f, spec, since, until, min_size, cache, now_ms)
                drawn, totals = sliced.own(drawn), sliced.own_keys(totals)
                read_only = [ALL_SERVICES, *drawn]
            elif f.only is not None:
                read_only = [ALL_SERVICES, *services]
            tiered = None
            names = sliced.members(read_only)
            if spec.kind == "tumbling":  # the smallest tumbling spec is the one rolled up
                tiered = read_windows_tiered(
                    r, wkeys, since, until, None, min_size, cache, services=names
                )
            if tiered is not None:
                windows, resolution = sliced.rows(tiered.rows), tiered.resolution
            else:
                windows = sliced.rows(
                    read_windows(r, wkeys, spec, since_ms=since, cache=cache, services=names)
                )
    arrivals = {}
    size = read_arrival_size(r, keys)
    for domain in TIME_DOMAINS:
        if (
            domain == "event"
            and f.only is None
            and spec is not None
            and spec == event_spec(specs, size)
        ):
            # the windows just read, no second read (roll-ups left out: the other domains'
            # series are in windows of this size)
            arrivals[domain] = event_arrivals([w for w in windows if w.spec == spec.key])
            continue
        end = _series_end(r, keys, domain, specs, size)
        arrivals[domain] = (
            []
            if end is None
            else read_arrivals(
                r,
                keys,
                domain,
                end - f.range_ms,
                end,
                cache=cache,
                # the chart sums the chosen services, or draws the `*` rows
                services=[ALL_SERVICES, *f.services],
            )
        )
    snap_range: dict[str, Any] = {}
    tumbling = next((s for s in specs if s.kind == "tumbling"), None)
    if tumbling is not None:
        t_newest = newest if tumbling == spec else read_newest_window_start(r, wkeys, tumbling)
        if t_newest is not None:
            until = tumbling.end(t_newest)
            since = until - f.latency_range_ms
            merged = read_range_merged(
                r,
                wkeys,
                since,
                until,
                tumbling,
                sliced.members(read_only),
                with_lateness=True,  # `*`'s is the lateness figures' accepted part
                cache=cache,
            )
            every = sliced.member(ALL_SERVICES)
            snap_range = {
                "range_aggs": sliced.own_keys(merged.aggs),
                "range_from_ms": since,
                "range_to_ms": until,
                "lateness": read_lateness(
                    r,
                    wkeys,
                    since,
                    until,
                    every,
                    tumbling,
                    cache=cache,
                    accepted=merged.aggs.get(every, WindowAgg()),
                ),
            }
    sliding_spec = next((s for s in specs if s.kind == "sliding"), None)
    sliding: list[WindowRow] = []
    # the sliding rows of `*` (the busiest interval) and of the latency chart's service (its
    # p99 line; a service that left: `*`, as the page falls back to)
    rolling = sorted({ALL_SERVICES, f.latency_service} & {ALL_SERVICES, *services})
    if sliding_spec is not None:
        sliding = (
            windows
            if sliding_spec == spec
            else sliced.rows(
                _sliding_rows(r, wkeys, sliding_spec, f, cache, sliced.members(rolling))
            )
        )
    limit = MAX_BATCHES
    if status is not None and status.report_interval_ms:
        limit = min(MAX_BATCHES, f.range_ms // status.report_interval_ms + 10)
    return Snapshot(
        read_at_ms=now_ms,
        status=status,
        window_size_ms=spec.size_ms if spec else None,
        windows=windows,
        dead_counts=read_dead_counts(r, keys),
        dead_letters=read_dead_letters(r, keys, limit=f.dead_letter_limit),
        spec=spec,
        newest_start_ms=newest,
        specs=specs,
        services=services,
        drawn=drawn,
        totals=totals,
        arrivals=arrivals,
        batches=read_batches(r, keys, limit),
        late_events=read_late_events(r, keys, limit=f.late_event_limit),
        resolution=resolution,
        sliding_spec=sliding_spec,
        sliding=sliding,
        annotations=read_annotations(
            r,
            keys,
            min(now_ms, spec.end(newest) if spec is not None and newest is not None else now_ms)
            - f.range_ms,
            now_ms,
        ),
        firings=[
            x
            for x in read_firings(r, keys)
            if newest is None or x.end > spec.end(newest) - f.range_ms
        ]
        if spec is not None
        else [],
        **snap_range,
    )


@dataclass(frozen=True)
class _Slice:
    """Names between the page (services, `*`) and a dimension's store (`service SEP value`).

    `value` None: the services' own store, names as they are.
    """

    value: str | None

    def member(self, name: str) -> str:
        return name if self.value is None else member(name, self.value)

    def members(self, names: list[str] | None) -> list[str] | None:
        return None if names is None else [self.member(n) for n in names]

    def own(self, names: list[str]) -> list[str]:
        return names if self.value is None else [split_member(n)[0] for n in names]

    def own_keys(self, by_name: dict[str, T]) -> dict[str, T]:
        if self.value is None:
            return by_name
        return {split_member(n)[0]: v for n, v in by_name.items()}

    def rows(self, rows: list[WindowRow]) -> list[WindowRow]:
        if self.value is None:
            return rows
        return [dataclasses.replace(w, service=split_member(w.service)[0]) for w in rows]

    def services(self, r: redis.Redis, wkeys: Keys) -> list[str]:
        """The services with events of this value in the dimension's store."""
        assert self.value is not None
        stored: Any = r.smembers(wkeys.services)
        names = (m.decode() if isinstance(m, bytes) else m for m in stored)
        return sorted(
            s for s, v in (split_member(m) for m in names) if v == self.value and s != ALL_SERVICES
        )


#: A process's rankings (with a closed-window memo): (store, view) -> (when, drawn, totals).
_RANKINGS: dict[tuple[Any, ...], tuple[int, list[str], dict[str, ServiceTotals]]] = {}


def _ranking(
    r: redis.Redis,
    keys: Keys,
    f: Filters,
    spec: WindowSpec,
    since: int,
    until: int,
    min_size: int,
    cache: ClosedWindows | None,
    now_ms: int,
) -> tuple[list[str], dict[str, ServiceTotals]]:
    """The top services of the range, and every service's totals.

    A dashboard process (with a closed-window memo) ranks each view at most every
    `RANK_EVERY_MS`: lines do not change places every second, and the windows still open are
    not read for the ranking on every refresh.
    """
    key = (keys.prefix, id(cache), spec.key, f.range_ms, f.rank_by, f.top)
    known = _RANKINGS.get(key) if cache is not None else None
    if known is not None and 0 <= now_ms - known[0] < RANK_EVERY_MS:
        return known[1], known[2]
    parts = ranked_parts(r, keys, spec, since, until, rank_size(f.range_ms, min_size))
    totals = read_service_totals(r, keys, parts, cache, with_p99=f.rank_by == "p99")
    drawn = rank_services(totals, f.rank_by, f.top)
    if cache is not None:
        if len(_RANKINGS) > 256:
            _RANKINGS.clear()
        _RANKINGS[key] = (now_ms, drawn, totals)
    return drawn, totals


def _sliding_rows(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    f: Filters,
    cache: ClosedWindows | None = None,
    services: list[str] | None = None,
) -> list[WindowRow]:
    """The sliding spec's rows ending inside the last `range_ms` before its newest one."""
    newest = read_newest_window_start(r, keys, spec)
    if newest is None:
        return []
    until = spec.end(newest)
    rows = read_windows(r, keys, spec, since_ms=until - f.range_ms, cache=cache, services=services)
    return [w for w in rows if w.window_end > until - f.range_ms]


@functools.cache
def client(url: str) -> redis.Redis:
    """One Redis client (and connection pool) per URL for the whole server process."""
    return connect(RedisSettings(url=url))


#: Every view cache of this process (the metrics count the views they hold).
_CACHES: list[SharedReads[Any]] = []
metrics.VIEWS.set_function(lambda: sum(len(c) for c in _CACHES))


@functools.cache
def _shared_reads(url: str, prefix: str, refresh_ms: int) -> SharedReads[tuple[Snapshot, Derived]]:
    # A bit under the interval, so each viewer's next tick reads anew (dashboard/shared.py).
    cache: SharedReads[tuple[Snapshot, Derived]] = SharedReads(ttl_s=0.9 * refresh_ms / 1000)
    _CACHES.append(cache)
    return cache


@functools.cache
def _closed_windows(url: str, prefix: str) -> ClosedWindows:
    # Closed windows never change: one memo per store (thread-safe).
    return ClosedWindows()


def shared_snapshot(url: str, prefix: str, refresh_ms: int, f: Filters) -> tuple[Snapshot, Derived]:
    """View `f`'s snapshot and its memo, read at most once per refresh for this whole process.

    Every session of the Streamlit page and every screen of the wall page showing the same
    view share it (dashboard/shared.py). Raises what `read_snapshot` raises.
    """
    keys = Keys(prefix)

    def read() -> tuple[Snapshot, Derived]:
        now_ms = time.time_ns() // 1_000_000
        snap = read_snapshot(
            client(url), keys, f.range_ms, now_ms, filters=f, cache=_closed_windows(url, prefix)
        )
        return snap, Derived()

    return _shared_reads(url, prefix, refresh_ms).get(f, lambda: metrics.timed_read("page", read))


@functools.cache
def _shared_breakdowns(url: str, prefix: str, refresh_ms: int) -> SharedReads[Breakdown]:
    cache: SharedReads[Breakdown] = SharedReads(ttl_s=0.9 * refresh_ms / 1000)
    _CACHES.append(cache)
    return cache


def shared_breakdown(url: str, prefix: str, refresh_ms: int, view: BreakdownView) -> Breakdown:
    """A breakdown (dashboard/breakdown.py), read at most once per refresh for this process."""
    keys = Keys(prefix)
    cache = _closed_windows(url, keys.by(view.dimension).prefix)
    return _shared_breakdowns(url, prefix, refresh_ms).get(
        view,
        lambda: metrics.timed_read(
            "breakdown", lambda: read_breakdown(client(url), keys, view, cache)
        ),
    )


@functools.cache
def _shared_slos(url: str, prefix: str, refresh_ms: int) -> SharedReads[list[ServiceSlos]]:
    cache: SharedReads[list[ServiceSlos]] = SharedReads(
        ttl_s=max(0.9 * refresh_ms / 1000, SLO_REFRESH_S)
    )
    _CACHES.append(cache)
    return cache


#: The SLO panel reads ranges of up to 30 days: at most this often, whatever the page's refresh.
SLO_REFRESH_S = 10.0


def shared_slos(url: str, prefix: str, refresh_ms: int) -> list[ServiceSlos]:
    """Every catalogued service's SLO reports (tidegauge/catalog/report.py).

    [] when the job publishes no catalog; read at most every `SLO_REFRESH_S` for this process.
    """

    def read() -> list[ServiceSlos]:
        r, keys = client(url), Keys(prefix)
        if not r.exists(keys.catalog):
            return []
        load_plugins([SLO_COUNTS_PLUGIN])  # the exact counts the reports sum
        return service_reports(r, keys, round(time.time() * 1000))

    return _shared_slos(url, prefix, refresh_ms).get("slos", read)


def stored_dimensions(url: str, prefix: str) -> list[str]:
    """The dimensions the job has written (none: the page shows no breakdown)."""
    return read_dimensions(client(url), Keys(prefix))
