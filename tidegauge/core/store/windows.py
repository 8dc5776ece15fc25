"""Windows and ranges: rows of stored windows, and any time range merged from them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import redis

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.durations import to_iso
from tidegauge.core.metrics import BUILT_IN_METRICS, TIMELINE_FIELDS, added_result_fields
from tidegauge.core.retention import Layer, cover_by_spec, format_span, plan_reads
from tidegauge.core.store.corrections import read_corrections, read_late
from tidegauge.core.store.index import _reusable, _starts, _sync
from tidegauge.core.store.keys import (
    ALL_SERVICES,
    Keys,
    _s,
)
from tidegauge.core.store.records import WindowRow
from tidegauge.core.store.tiers import read_retention, resolution_text
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.window_aggs import WindowAggs
from tidegauge.core.windows import WindowSpec, is_sliding_text, match_spec, tumbling_start


def read_window_specs(r: redis.Redis, keys: Keys) -> list[WindowSpec]:
    """Window specs with stored results: tumbling first, then by size and slide."""
    members: Any = r.smembers(keys.window_specs)
    specs = [WindowSpec.from_key(_s(v)) for v in members]
    return sorted(specs, key=lambda s: (s.kind != "tumbling", s.size_ms, s.slide_ms))


def stored_spec(r: redis.Redis, keys: Keys, text: str) -> WindowSpec:
    """The stored spec a reader means by a `--window` text (`match_spec`).

    A text the job does not write is a ValueError naming the specs it does write; a tumbling or
    hopping one that has no windows yet is returned as asked (its reads are empty).
    """
    from tidegauge.core.durations import format_duration

    stored = read_window_specs(r, keys)
    found = match_spec(text, stored)
    if found is not None:
        return found
    if not is_sliding_text(text):
        return WindowSpec.parse(text)
    have = ", ".join(
        f"{format_duration(s.size_ms)}/sliding@{format_duration(s.resolution_ms)}"
        for s in stored
        if s.kind == "sliding"
    )
    raise ValueError(f"no stored sliding window {text!r} (stored: {have or 'none'})")


def read_peaks(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    since_ms: int,
    until_ms: int,
    service: str = ALL_SERVICES,
) -> dict[str, Any]:
    """The busiest interval of a sliding `spec` ending inside [since, until).

    The largest peak of the rows whose step lies inside the range (the earliest of ties), and
    the same for errors. Fields as in a row (`TIMELINE_FIELDS`, None without rows) and
    `peak_rows`, the rows read.
    """
    if spec.kind != "sliding":
        raise ValueError(f"{spec.key} is not a sliding window")
    rows = [
        row
        for row in read_windows(r, keys, spec, service, since_ms=since_ms, until_ms=until_ms)
        if row.window_end - spec.slide_ms >= since_ms
        and row.window_end <= until_ms
        and row.peak_events is not None
    ]
    out: dict[str, Any] = dict.fromkeys(TIMELINE_FIELDS)
    out["peak_rows"] = len(rows)
    for value, start in (("peak_events", "peak_start"), ("peak_errors", "peak_errors_start")):
        best = max(rows, key=lambda row: (row.value(value), -row.value(start)), default=None)
        if best is not None:
            out[value], out[start] = best.value(value), best.value(start)
    return out


def read_services(r: redis.Redis, keys: Keys) -> list[str]:
    """Every service seen, sorted (without `*`)."""
    members: Any = r.smembers(keys.services)
    return sorted(_s(v) for v in members)


def read_windows(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec | None = None,
    service: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    cache: ClosedWindows | None = None,
    *,
    services: Sequence[str] | None = None,
) -> list[WindowRow]:
    """Stored windows of one spec, ordered by start then service.

    `spec` defaults to the first stored spec (the smallest tumbling one); `since_ms`/`until_ms`
    select windows that end after `since_ms` and start before `until_ms`; `service` = `*`
    selects the all-services rows, `services` the rows of these names only (`*` among them
    if wanted): only their aggregates are read, however many services a window holds. With
    `cache`, closed windows read before are not read again (only their late counts, which
    still change).
    """
    if spec is None:
        specs = read_window_specs(r, keys)
        if not specs:
            return []
        spec = specs[0]
    watermark = _sync(r, keys, cache)
    starts = _starts(r, keys, spec, since_ms, until_ms)
    wanted = [service] if service is not None else services
    one = None if wanted is None else sorted(set(wanted))
    if one == []:
        return []
    kind = "rows" if one is None else "rows|" + "\x1f".join(one)  # the memo of these names
    known = {s: cache.get(kind, spec.key, s) for s in starts} if cache else {}
    misses = [s for s in starts if known.get(s) is None]
    pipe = r.pipeline(transaction=False)
    for start in misses:
        if one is None:
            pipe.hgetall(keys.window_aggs(spec.key, start))
        else:
            pipe.hmget(keys.window_aggs(spec.key, start), one)
    fetched = []
    for blobs in pipe.execute() if misses else []:
        pairs = blobs.items() if one is None else zip(one, blobs, strict=True)
        fetched.append({_s(k): v for k, v in pairs if v is not None})
    # late rows still change once a window closed: their hashes are checked on every read
    lates = dict(zip(starts, read_late(r, keys, spec, starts, cache), strict=True))
    corrections = iter(zip(*read_corrections(r, keys, spec, misses, cache), strict=True))
    metrics = _window_metrics(spec, fetched)
    extra = added_result_fields()  # (once: the registry is read per call, not per row)
    rows: list[WindowRow] = []
    for start in starts:
        closed = spec.is_closed(start, watermark)
        shown = known.get(start)
        late = lates[start].counts
        if shown is None:
            docs = next(metrics)
            (strag, revisions), dups = next(corrections)
            shown = {
                svc: _row(
                    spec,
                    start,
                    svc,
                    doc,
                    late.get(svc, 0),
                    stragglers=strag.get(svc, 0),
                    revision=revisions.get(svc, 0),
                    duplicates=dups.get(svc, 0),
                    closed=closed,
                    extra=extra,
                )
                for svc, doc in docs.items()
            }
            if cache is not None and _reusable(spec, start, watermark):
                cache.put(kind, spec.key, start, shown)
        names = (
            sorted(set(shown) | set(late))
            if one is None
            else ([s for s in one if s in shown or s in late])
        )
        for svc in names:
            row = shown.get(svc) or _row(spec, start, svc, {}, 0, closed=closed, extra=extra)
            n = late.get(svc, 0)
            rows.append(row if row.late == n else replace(row, late=n))
    return rows


def _window_metrics(
    spec: WindowSpec, windows: Sequence[dict[str, bytes]]
) -> Iterator[dict[str, dict[str, Any]]]:
    """Each window's metrics by service, read out of its stored aggregates all at once.

    A window's numbers are its aggregate's (`WindowAgg.metrics`): the store keeps one value
    per (window, service), the aggregate, and every reader computes the same figures from it.
    """
    blobs = [blob for aggs in windows for blob in aggs.values()]
    results = iter(WindowAggs.results_of(blobs, spec.size_ms))
    for aggs in windows:
        yield {svc: next(results) for svc in aggs}


@dataclass(frozen=True)
class TieredWindows:
    """Windows of a range read across retention tiers, and which tier answered which part."""

    rows: list[WindowRow]
    #: (spec, from, to) per part, oldest first (tidegauge/core/retention.py `plan_reads`).
    parts: list[tuple[WindowSpec, int, int]]
    #: Rows each part gave (a part of a tier holding nothing there gives none).
    counts: list[int]

    @property
    def resolution(self) -> str:
        """Which windows are shown, e.g. "1h roll-ups to 2026-…Z, then 10s windows".

        Only parts that gave rows are named: a tier holding nothing there is not shown.
        """
        return parts_text([p for p, n in zip(self.parts, self.counts, strict=True) if n])


def read_windows_tiered(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str | None = None,
    min_size_ms: int = 0,
    cache: ClosedWindows | None = None,
    *,
    services: Sequence[str] | None = None,
) -> TieredWindows | None:
    """The windows of [since, until), each part from the finest tier that still holds it.

    Only tiers of at least `min_size_ms` are used where they hold the part (a chart's
    resolution), finer ones for the newest part they have not rolled up yet. None when the
    store has no retention tiers (read the spec's windows with `read_windows`).
    """
    stored = read_retention(r, keys)
    if stored is None or not stored.layers:
        return None
    parts = plan_reads(since_ms, until_ms, stored.layers, min_size_ms)
    rows: list[WindowRow] = []
    counts = []
    for spec, lo, hi in parts:
        got = read_windows(
            r, keys, spec, service, since_ms=lo, until_ms=hi, cache=cache, services=services
        )
        inside = [w for w in got if lo <= w.window_start < hi]
        rows += inside
        counts.append(len(inside))
    return TieredWindows(rows, parts, counts)


def parts_text(parts: Sequence[tuple[WindowSpec, int, int]]) -> str:
    """Say which tiers answered: "1h roll-ups to 2026-…Z, then 10s windows"."""
    out = []
    for i, (spec, _, hi) in enumerate(parts):
        what = f"{format_span(spec.size_ms)} {'roll-ups' if spec.rollup else 'windows'}"
        out.append(what if i == len(parts) - 1 else f"{what} to {to_iso(hi)}")
    return ", then ".join(out) if out else "no windows"


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
    duplicates: int = 0,
    closed: bool = False,
    extra: tuple[str, ...] = (),
) -> WindowRow:
    """A window's row of `doc` (its metrics); `extra`: the plugins' result fields."""
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
        duplicates=duplicates,
        closed=closed,
        spec=spec.key,
        kind=spec.kind,
        extra={f: doc.get(f) for f in extra},
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
    #: Windows merged, by spec key: "10000" raw 10 s windows, "r60000" 1 m roll-ups, ...
    pieces: dict[str, int] = field(default_factory=dict, compare=False)

    @property
    def resolution(self) -> str:
        """Which windows answered, e.g. "6 × 10s + 59 × 1m" (docs/redis.md, "Retention")."""
        return resolution_text(self.pieces)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output (metrics flattened in)."""
        d = {k: v for k, v in vars(self).items() if k not in ("metrics", "agg")}
        d["resolution"] = self.resolution
        d.update(self.metrics)
        return d


def read_range(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str = ALL_SERVICES,
    spec: WindowSpec | None = None,
    min_size_ms: int = 0,
) -> RangeResult:
    """Merge the sketches of every window of `spec` lying inside [since, until) into one answer.

    "p99 over the last 15 minutes" is the p99 of the merged t-digest of those windows, and the
    distinct users the merged HyperLogLog: exact merges, not averages of window figures.
    `spec` defaults to the smallest tumbling spec (non-overlapping, so nothing counts twice)
    and its retention tiers: each part from the finest tier that still holds it, or from
    tiers of at least `min_size_ms` where they hold it (fewer pieces for long ranges).
    """
    if until_ms <= since_ms:
        raise ValueError("the range must end after it starts")
    stored = read_retention(r, keys) if spec is None else None
    if stored is not None and len(stored.layers) > 1:
        return _range_across_tiers(r, keys, since_ms, until_ms, service, stored.layers, min_size_ms)
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
    return RangeResult(
        service, since_ms, until_ms, lo, hi, n, agg.metrics(hi - lo), agg, {spec.key: n}
    )


def _range_across_tiers(
    r: redis.Redis,
    keys: Keys,
    since_ms: int,
    until_ms: int,
    service: str,
    layers: Sequence[Layer],
    min_size_ms: int = 0,
) -> RangeResult:
    """`read_range` over the raw windows and the roll-ups (`cover` picks the pieces).

    A roll-up is the merge of the finer windows it replaces, so counts are the same as from the
    raw windows and the sketches stay within their bounds.
    """
    found: list[tuple[int, int, WindowAgg]] = []  # (start, end, aggregate)
    counts: dict[str, int] = {}
    for spec, starts in cover_by_spec(since_ms, until_ms, layers, min_size_ms):
        aggs = _window_aggs(r, keys, spec, starts, [service], False, None, None)
        for start, a in zip(starts, aggs, strict=True):
            if service in a:
                found.append((start, spec.end(start), a[service]))
                counts[spec.key] = counts.get(spec.key, 0) + 1
    if not found:
        empty = WindowAgg()
        return RangeResult(
            service, since_ms, until_ms, None, None, 0, empty.metrics(until_ms - since_ms), empty
        )
    found.sort(key=lambda f: f[0])
    agg = WindowAgg.merged((a for _, _, a in found), with_lateness=False)
    lo, hi = found[0][0], max(end for _, end, _ in found)
    n = len(found)
    return RangeResult(service, since_ms, until_ms, lo, hi, n, agg.metrics(hi - lo), agg, counts)


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
    # A memo's entries hold every service, or the services asked for (named in their kind).
    subset = "" if services is None else "|" + "\x1f".join(sorted(set(services)))
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
            block = cache.get("blocks" + subset, spec.key, first)
            if block is None:
                block = _merge_block(r, keys, spec, members, services)
                cache.put("blocks" + subset, spec.key, first, block)
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
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    starts: list[int],
    services: Sequence[str] | None = None,
) -> tuple[dict[str, WindowAgg], dict[str, int]]:
    """Closed windows merged per service (lateness included), with each service's window count.

    Of `services` (None: every service). The windows are decoded for this merge only, not kept
    one by one: once merged, the block stands for them (keeping both would hold an hour of
    decoded HyperLogLogs twice).
    """
    names: list[str] = []
    blobs: list[bytes] = []
    for pairs in _fetch_aggs(r, keys, spec, starts, services):
        for svc, blob in pairs:
            names.append(svc)
            blobs.append(blob)
    # every window's aggregates decoded at once and merged per service in window order: what
    # `WindowAgg.merged` of the objects gives (tidegauge/core/window_aggs.py)
    order = sorted(set(names))
    code = {s: i for i, s in enumerate(order)}
    group = np.array([code[s] for s in names], np.int64)
    ranked = np.argsort(group, kind="stable")
    table = WindowAggs.decode([blobs[i] for i in ranked.tolist()]) if blobs else None
    merged = table.combine(group[ranked], len(order)) if table is not None else None
    counts = np.bincount(group, minlength=len(order)).tolist()
    return (
        {s: merged.agg(i) for i, s in enumerate(order)} if merged is not None else {},
        dict(zip(order, counts, strict=True)),
    )


def _fetch_aggs(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    starts: Sequence[int],
    services: Sequence[str] | None,
) -> list[list[tuple[str, bytes]]]:
    """Each window's stored (service, aggregate bytes) of `services` (None: all), one pipeline."""
    pipe = r.pipeline(transaction=False)
    for start in starts:
        if services is None:
            pipe.hgetall(keys.window_aggs(spec.key, start))
        else:
            pipe.hmget(keys.window_aggs(spec.key, start), list(services))
    out = []
    for fetched in pipe.execute() if starts else []:
        pairs = fetched.items() if services is None else zip(services, fetched, strict=True)
        out.append([(_s(svc), blob) for svc, blob in pairs if blob is not None])
    return out


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
    kind = "aggs" if services is None else "aggs|" + "\x1f".join(sorted(set(services)))
    known = {s: cache.get(kind, spec.key, s) for s in starts} if cache else {}
    misses = [s for s in starts if known.get(s) is None]
    got = iter(_fetch_aggs(r, keys, spec, misses, services))
    out = []
    for start in starts:
        aggs = known.get(start)
        if aggs is None:
            reuse = cache is not None and _reusable(spec, start, watermark)
            aggs = {
                svc: WindowAgg.from_bytes(blob, with_lateness or reuse) for svc, blob in next(got)
            }
            if cache is not None and reuse:
                cache.put(kind, spec.key, start, aggs)
        out.append(aggs if services is None else {s: aggs[s] for s in services if s in aggs})
    return out


def read_newest_window_start(r: redis.Redis, keys: Keys, spec: WindowSpec) -> int | None:
    """Start (ms) of the newest stored window of `spec`, or None when there is none.

    One ZREVRANGE on the window index: `read_windows` selects by time range, and a chart's
    range ends at the newest window, so this is read first.
    """
    got: Any = r.zrevrange(keys.window_index(spec.key), 0, 0)
    if not got:
        return None
    member = got[0]
    if not isinstance(member, (bytes, str)):  # only with withscores=True, not asked for here
        raise TypeError(f"unexpected ZREVRANGE member {member!r}")
    return int(member)
