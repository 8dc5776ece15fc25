"""`tidegauge query`: stored results, read through tidegauge/core/store/, as tables or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import redis

from tidegauge.alerts.rules import STATES, Firing, describe_firing
from tidegauge.alerts.store import read_alert_heartbeat, read_alert_log, read_firings
from tidegauge.catalog import SLO_COUNTS_PLUGIN
from tidegauge.catalog.cli import ENV_CATALOG_TOPIC
from tidegauge.catalog.history import CatalogHistory
from tidegauge.catalog.report import lasting_text, read_catalog_entries, slo_report
from tidegauge.catalog.topic import DEFAULT_CATALOG_TOPIC, CatalogError, read_catalog
from tidegauge.core import store
from tidegauge.core.config import KafkaSettings, RedisSettings, add_kafka_options, redact_url
from tidegauge.core.dimensions import split_member
from tidegauge.core.durations import format_duration, parse_duration, parse_instant, to_iso
from tidegauge.core.events import OVERFLOW_SERVICE
from tidegauge.core.metrics import added_result_fields, field_label
from tidegauge.core.plugins import load_plugins
from tidegauge.core.store import ALL_SERVICES
from tidegauge.core.store.ranking import (
    RANK_BY,
    ServiceTotals,
    rank_services,
    rank_size,
    ranked_parts,
    read_service_totals,
)
from tidegauge.core.windows import WindowSpec

__all__ = ["add_arguments", "format_freshness", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge query` and its views."""
    sub = p.add_subparsers(dest="view", metavar="VIEW", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--redis", help="Redis URL (env TIDEGAUGE_REDIS_URL)")
        q.add_argument("--redis-prefix", default="tg")
        q.add_argument("--json", action="store_true", help="machine-readable output")

    w = sub.add_parser("windows", help="per-window metrics per service (and * for all)")
    common(w)
    w.add_argument("--service", help="one service, or * for the all-services totals")
    w.add_argument(
        "--since", help="windows ending after: epoch ms, ISO-8601, or a duration ago (15m)"
    )
    w.add_argument("--until", help="windows starting before (same forms)")
    w.add_argument(
        "--window",
        help="window spec: 10s or 60s/10s (default: the smallest tumbling one, and where its "
        "windows have expired, the finest retention tier that still holds that part)",
    )
    w.add_argument(
        "--resolution",
        metavar="SIZE",
        help="without --window: use retention tiers of at least this size where they hold the "
        "range (e.g. 1h for a month); finer windows only for the newest part",
    )
    w.add_argument(
        "--top",
        type=int,
        metavar="N",
        help="only the N services (or values, with --by) with the most events (or --metric "
        "errors, the highest --metric p99) over the range, and *",
    )
    w.add_argument("--metric", choices=RANK_BY, help="what --top ranks by (default events)")
    w.add_argument(
        "--by",
        metavar="DIMENSION",
        help="the values of a dimension (the job's --dimension) instead of services: of "
        "--service, or of all services (*)",
    )

    t = sub.add_parser(
        "top", help="the values of a dimension (or the services) ranked over a time range"
    )
    common(t)
    t.add_argument("--by", metavar="DIMENSION", help="a dimension (default: the services)")
    t.add_argument("--service", help="with --by: the values of this service (default: *)")
    t.add_argument("--metric", choices=RANK_BY, default="events", help="rank by (default events)")
    t.add_argument("--from", dest="range_from", default="15m", help="start (default 15m ago)")
    t.add_argument("--to", dest="range_to", help="end (default: now)")
    t.add_argument("--limit", type=int, default=10, help="rows shown (default 10)")

    g = sub.add_parser("range", help="metrics of a time range, merged from its windows' sketches")
    common(g)
    g.add_argument("--from", dest="range_from", required=True, help="start: epoch ms, ISO, or 15m")
    g.add_argument("--to", dest="range_to", help="end (default: now)")
    g.add_argument("--service", default=ALL_SERVICES, help="one service (default: * = all)")
    g.add_argument(
        "--window",
        help="tumbling window spec to merge (default: the smallest stored, and where its windows "
        "have expired, the finest retention tier that still holds that part)",
    )
    g.add_argument(
        "--resolution",
        metavar="SIZE",
        help="without --window: merge retention tiers of at least this size where they hold the "
        "range (e.g. 1h: a month in ~720 pieces); the same answer, fewer pieces to read",
    )

    o = sub.add_parser(
        "slo",
        help="a service's SLO: budget used and left over its period, burn rates, the "
        "burn-rate rules (docs/slo.md)",
    )
    common(o)
    o.add_argument("--service", required=True)
    o.add_argument("--period", help="the SLO period to measure (default: the SLO's own)")
    o.add_argument(
        "--at", help="when the period ends: epoch ms, ISO-8601, or a duration ago (default: now)"
    )
    o.add_argument(
        "--bootstrap",
        help="read the catalog from Kafka at HOST:PORT (env TIDEGAUGE_KAFKA_BOOTSTRAP) instead "
        "of the copy the job publishes to Redis (`tidegauge job --catalog`)",
    )
    o.add_argument("--catalog-topic", help="the catalog topic (env TIDEGAUGE_CATALOG_TOPIC)")
    add_kafka_options(o)

    s = sub.add_parser(
        "status", help="the job's latest batch: id, age, watermark, freshness, offsets"
    )
    common(s)
    s.add_argument(
        "--max-age", help="exit 1 unless the job reported within this long (health checks)"
    )

    lt = sub.add_parser(
        "lateness",
        help="lateness of a time range, and what fraction would be late with other allowed "
        "lateness values (what-if)",
    )
    common(lt)
    lt.add_argument("--from", dest="range_from", required=True, help="start: epoch ms, ISO, 15m")
    lt.add_argument("--to", dest="range_to", help="end (default: now)")
    lt.add_argument("--service", default=ALL_SERVICES, help="one service (default: * = all)")
    lt.add_argument("--window", help="window spec (default: the smallest stored)")
    lt.add_argument(
        "--allowed-lateness",
        action="append",
        metavar="DURATION",
        help="what-if values (repeat; default 0s 1s 5s 10s 30s 1m 5m 15m 1h)",
    )

    a = sub.add_parser(
        "arrivals", help="events per window by event, processing or broker time (late/stragglers)"
    )
    common(a)
    a.add_argument("--domain", choices=store.TIME_DOMAINS, default="processing")
    a.add_argument("--service", help="one service, or * for the totals")
    a.add_argument("--since", help="windows ending after (epoch ms, ISO, or 15m)")
    a.add_argument("--until", help="windows starting before")

    le = sub.add_parser("late-events", help="events the watermark had passed, newest first")
    common(le)
    le.add_argument("--limit", type=int, default=20)

    d = sub.add_parser("dead-letters", help="malformed records by reason, newest first")
    common(d)
    d.add_argument("--limit", type=int, default=20)

    al = sub.add_parser(
        "alerts", help="alert firings (provisional, confirmed, retracted) and the latest notices"
    )
    common(al)
    al.add_argument("--limit", type=int, default=20, help="notices to show (default 20)")
    al.add_argument(
        "--state", choices=STATES, help="only firings in this state (exit 1 if there are any)"
    )


def _fail(msg: str) -> int:
    print(f"tidegauge query: {msg}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    """Print the requested view."""
    settings = RedisSettings.from_env(url=args.redis, prefix=args.redis_prefix)
    r = store.connect(settings)
    keys = store.Keys(settings.prefix)
    now = round(time.time() * 1000)
    try:
        if args.view == "windows":
            return _windows(r, keys, args, now)
        if args.view == "top":
            return _top(r, keys, args, now)
        if args.view == "status":
            return _status(r, keys, args, now)
        if args.view == "range":
            return _range(r, keys, args, now)
        if args.view == "lateness":
            return _lateness(r, keys, args, now)
        if args.view == "arrivals":
            return _arrivals(r, keys, args, now)
        if args.view == "late-events":
            return _late_events(r, keys, args)
        if args.view == "alerts":
            return _alerts(r, keys, args, now)
        if args.view == "slo":
            return _slo(r, keys, args, now)
        return _dead(r, keys, args)
    except redis.RedisError as e:
        return _fail(f"cannot read Redis at {redact_url(settings.url)}: {e}")
    except (ValueError, CatalogError) as e:
        return _fail(str(e))


def _dimension(r: redis.Redis, keys: store.Keys, args: argparse.Namespace) -> str | None:
    """`--by`: a stored dimension (ValueError naming the stored ones), or None.

    (`--by events|errors|p99` once said what `--top` ranks by: without a dimension of that
    name it still does, with a note to say `--metric`.)
    """
    if not args.by:
        return None
    stored = sorted(store.read_dimensions(r, keys))
    if args.by in stored:
        return str(args.by)
    if args.by in RANK_BY and getattr(args, "metric", "") is None:
        print(f"note: --by {args.by} ranks --top: say --metric {args.by}", file=sys.stderr)
        args.metric = args.by
        return None
    raise ValueError(
        f"no dimension {args.by!r} is stored; "
        + (f"stored: {', '.join(stored)}" if stored else "the job has no --dimension")
    )


def _windows(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    since = parse_instant(args.since, now) if args.since else None
    until = parse_instant(args.until, now) if args.until else None
    if args.resolution and args.window:
        raise ValueError("--resolution picks among the retention tiers: leave out --window")
    dim = _dimension(r, keys, args)
    args.metric = args.metric or "events"
    if dim is not None:
        return _windows_by(r, keys, dim, args, since, until)
    spec = store.stored_spec(r, keys, args.window) if args.window else None
    only, ranked = _top_services(r, keys, args, spec, since, until)
    tiered = None
    if not args.window:
        tiered = store.read_windows_tiered(
            r,
            keys,
            0 if since is None else since,
            2**62 if until is None else until,
            args.service,
            parse_duration(args.resolution) if args.resolution else 0,
            services=only,
        )
    if tiered is not None:
        rows = tiered.rows
    else:
        rows = store.read_windows(
            r,
            keys,
            spec=spec,
            service=args.service,
            since_ms=since,
            until_ms=until,
            services=only,
        )
    if args.json:
        json.dump([row.to_dict() for row in rows], sys.stdout)
        print()
        return 0
    added = added_result_fields()  # plugin metrics get a column each, after the built-in ones
    sliding = any(row.kind == "sliding" for row in rows)  # + its busiest interval
    print(
        f"{'window_start (UTC)':<26}{'service':<12}{'count':>8}{'ev/s':>9}{'err%':>7}"
        f"{'p50':>9}{'p99':>9}{'users':>8}{'late':>7}{'dups':>7}"
        + (f"{'peak':>8}  {'busiest from (UTC)':<26}" if sliding else "")
        + "".join(f"{field_label(f):>14}" for f in added)
    )
    for row in rows:
        p50 = "-" if row.p50 is None else f"{row.p50:.1f}"
        p99 = "-" if row.p99 is None else f"{row.p99:.1f}"
        peak = ""
        if sliding:
            at = "-" if row.peak_start is None else to_iso(row.peak_start)
            peak = f"{_cell(row.peak_events):>8}  {at:<26}"
        print(
            f"{to_iso(row.window_start):<26}{row.service:<12}{row.count:>8}"
            f"{row.events_per_s:>9.1f}{100 * row.error_rate:>7.2f}{p50:>9}{p99:>9}"
            f"{row.distinct_users:>8}{row.late:>7}{row.duplicates:>7}"
            + peak
            + "".join(f"{_cell(row.value(f)):>14}" for f in added)
        )
    if not rows:
        print("(no windows stored yet)")
    elif tiered is not None:  # after the table: its first line stays the header
        print(f"resolution: {tiered.resolution}")
    if ranked is not None:
        print(ranked)
    return 0


def _top_services(
    r: redis.Redis,
    keys: store.Keys,
    args: argparse.Namespace,
    spec: WindowSpec | None,
    since: int | None,
    until: int | None,
) -> tuple[list[str] | None, str | None]:
    """With --top N: `*` and the N services ranked first over the range, and a line saying so."""
    if args.top is None:
        return None, None
    if args.top < 1:
        raise ValueError("--top takes a number of services, 1 or more")
    if args.service:
        raise ValueError("--top ranks the services: leave out --service")
    if spec is None:
        specs = store.read_window_specs(r, keys)
        if not specs:
            return None, None
        spec = specs[0]
    lo, hi = 0 if since is None else since, 2**62 if until is None else until
    size = parse_duration(args.resolution) if args.resolution else 0
    parts = ranked_parts(r, keys, spec, lo, hi, rank_size(hi - lo, size))
    totals = read_service_totals(r, keys, parts, with_p99=args.metric == "p99")
    top = rank_services(totals, args.metric, args.top)
    rest = len(totals) - len(top)
    line = f"top {len(top)} of {len(totals)} services by {args.metric}" + (
        f"; {rest} others in * only" if rest else ""
    )
    return [ALL_SERVICES, *top], line


def _windows_by(
    r: redis.Redis,
    keys: store.Keys,
    dim: str,
    args: argparse.Namespace,
    since: int | None,
    until: int | None,
) -> int:
    """`windows --by DIMENSION`: the windows of each value of one service (or of `*`)."""
    of = args.service or ALL_SERVICES
    by = keys.by(dim)
    spec = store.stored_spec(r, by, args.window) if args.window else None
    values = store.dimension_values(r, by, of)
    ranked = None
    if args.top is not None:
        if args.top < 1:
            raise ValueError("--top takes a number of values, 1 or more")
        totals = _value_totals(r, by, of, spec, since, until, args.resolution, args.metric)
        top = rank_services(totals, args.metric, args.top)
        values = [m for m in values if m in top]
        rest = len(totals) - len(top)
        ranked = f"top {len(top)} of {len(totals)} {dim} values of {of} by {args.metric}" + (
            f"; {rest} others not shown" if rest else ""
        )
    rows = store.read_windows(r, by, spec=spec, since_ms=since, until_ms=until, services=values)
    if args.json:
        out = []
        for row in rows:
            d = row.to_dict()
            d["service"], d[dim] = split_member(row.service)
            out.append(d)
        json.dump(out, sys.stdout)
        print()
        return 0
    print(f"{dim} of {'all services' if of == ALL_SERVICES else of}")
    print(
        f"{'window_start (UTC)':<26}{dim:<24}{'count':>8}{'ev/s':>9}{'err%':>7}"
        f"{'p50':>9}{'p99':>9}{'users':>8}{'late':>7}{'dups':>7}"
    )
    for row in rows:
        p50 = "-" if row.p50 is None else f"{row.p50:.1f}"
        p99 = "-" if row.p99 is None else f"{row.p99:.1f}"
        print(
            f"{to_iso(row.window_start):<26}{split_member(row.service)[1]:<24}{row.count:>8}"
            f"{row.events_per_s:>9.1f}{100 * row.error_rate:>7.2f}{p50:>9}{p99:>9}"
            f"{row.distinct_users:>8}{row.late:>7}{row.duplicates:>7}"
        )
    if not rows:
        print(f"(no windows of {dim} values of {of} stored)")
    if ranked is not None:
        print(ranked)
    return 0


def _value_totals(
    r: redis.Redis,
    by: store.Keys,
    of: str,
    spec: WindowSpec | None,
    since: int | None,
    until: int | None,
    resolution: str | None,
    metric: str,
) -> dict[str, ServiceTotals]:
    """The totals over the range of every value of `of` in a dimension's store."""
    if spec is None:
        specs = store.read_window_specs(r, by)
        if not specs:
            return {}
        spec = specs[0]
    lo, hi = 0 if since is None else since, 2**62 if until is None else until
    size = parse_duration(resolution) if resolution else 0
    parts = ranked_parts(r, by, spec, lo, hi, rank_size(hi - lo, size))
    totals = read_service_totals(r, by, parts, with_p99=True)
    return {m: t for m, t in totals.items() if split_member(m)[0] == of}


def _top(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    """`top`: the values of a dimension (or the services) over a range, ranked."""
    since = parse_instant(args.range_from, now)
    until = parse_instant(args.range_to, now) if args.range_to else now
    if args.limit < 1:
        raise ValueError("--limit takes a number of rows, 1 or more")
    args.metric = args.metric or "events"
    dim = _dimension(r, keys, args)
    if dim is None:
        if args.service:
            raise ValueError("--service picks whose values --by ranks: give --by DIMENSION")
        specs = store.read_window_specs(r, keys)
        parts = ranked_parts(r, keys, specs[0], since, until, 0) if specs else []
        totals = read_service_totals(r, keys, parts, with_p99=True)
        what, of = "services", None
    else:
        of = args.service or ALL_SERVICES
        totals = _value_totals(r, keys.by(dim), of, None, since, until, None, args.metric)
        what = f"{dim} values of {'all services' if of == ALL_SERVICES else of}"
    ranked = [totals[n] for n in rank_services(totals, args.metric, args.limit)]
    label = dim or "service"
    names = [split_member(t.service)[1] if dim else t.service for t in ranked]
    if args.json:
        out = [
            {
                label: name,
                **({"service": of} if dim else {}),
                "events": t.events,
                "errors": t.errors,
                "error_rate": t.errors / t.events if t.events else 0.0,
                "p99": t.p99,
            }
            for name, t in zip(names, ranked, strict=True)
        ]
        print(json.dumps(out))
        return 0
    print(
        f"top {len(ranked)} of {len(totals)} {what} by {args.metric}, "
        f"{to_iso(since)} .. {to_iso(until)}"
    )
    print(f"{label:<32}{'events':>10}{'errors':>9}{'err%':>7}{'p99':>10}")
    for name, t in zip(names, ranked, strict=True):
        rate = 100 * t.errors / t.events if t.events else 0.0
        p99 = "-" if t.p99 is None else f"{t.p99:.1f}"
        print(f"{name:<32}{t.events:>10}{t.errors:>9}{rate:>7.2f}{p99:>10}")
    if not ranked:
        print("(nothing stored in that range)")
    return 0


def _range(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    since = parse_instant(args.range_from, now)
    until = parse_instant(args.range_to, now) if args.range_to else now
    spec = store.stored_spec(r, keys, args.window) if args.window else None
    peaks = None
    if spec is not None and spec.kind == "sliding":
        # the range's figures from the tumbling windows, its busiest interval from the sliding
        peaks = store.read_peaks(r, keys, spec, since, until, args.service)
        spec = None
    if spec is not None and spec.kind != "tumbling":
        raise ValueError("range queries merge tumbling windows (hopping ones overlap)")
    if args.resolution and spec is not None:
        raise ValueError("--resolution picks among the retention tiers: leave out --window")
    min_size = parse_duration(args.resolution) if args.resolution else 0
    result = store.read_range(r, keys, since, until, args.service, spec, min_size)
    if peaks is not None:
        result.metrics.update(peaks)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    m = result.metrics
    if not result.windows:
        print(f"no windows of {args.service} inside {to_iso(since)} .. {to_iso(until)}")
        return 0
    assert result.covered_from is not None and result.covered_to is not None
    print(
        f"{args.service}: {result.windows} windows, {to_iso(result.covered_from)} .. "
        f"{to_iso(result.covered_to)}; resolution {result.resolution}"
    )
    for name in ("count", "events_per_s", *store.METRIC_FIELDS, *added_result_fields()):
        if name.startswith("peak") and peaks is None:
            continue  # a sliding window's figures: only with --window SIZE/sliding
        value = m.get(name)
        if name in ("peak_start", "peak_errors_start") and value is not None:
            print(f"  {name:<16}{to_iso(value)}")
            continue
        shown = "-" if value is None else (f"{value:.4g}" if isinstance(value, float) else value)
        print(f"  {name:<16}{shown}")
    return 0


def _cell(value: Any) -> str:
    """A table cell: '-' for None, 4 significant digits for floats."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


#: Allowed lateness values of the what-if table when none are given.
WHAT_IF_DEFAULTS = ("0s", "1s", "5s", "10s", "30s", "1m", "5m", "15m", "1h")


def _lateness(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    since = parse_instant(args.range_from, now)
    until = parse_instant(args.range_to, now) if args.range_to else now
    spec = store.stored_spec(r, keys, args.window) if args.window else None
    values = [parse_duration(v) for v in (args.allowed_lateness or WHAT_IF_DEFAULTS)]
    result = store.read_lateness(r, keys, since, until, args.service, spec)
    doc = result.to_dict(values)
    counters = store.read_late_counters(r, keys)
    doc["job_late_counters"] = counters.to_dict()
    if args.json:
        print(json.dumps(doc))
        return 0
    if not result.events:
        print(f"no events of {args.service} in windows inside {to_iso(since)} .. {to_iso(until)}")
        return 0
    print(
        f"{args.service}: {result.events:,} events in {result.windows} windows; "
        f"{result.late:,} late, {result.stragglers:,} stragglers; "
        f"{result.duplicates:,} duplicates dropped"
    )
    for name in ("lateness_p50", "lateness_p90", "lateness_p99", "lateness_max"):
        v = doc[name]
        print(f"  {name:<14}{'-' if v is None else format_duration(max(round(v), 0))}")
    print(f"  {'allowed lateness':<18}{'late':>9}{'stragglers':>12}")
    for row in doc["what_if"]:
        print(
            f"  {format_duration(row['allowed_lateness_ms']):<18}"
            f"{100 * row['fraction_late']:>8.2f}%{100 * row['fraction_stragglers']:>11.2f}%"
        )
    if counters.first_batch is not None:
        print(
            f"batches {counters.first_batch}..{counters.last_batch}: {counters.tidegauge:,} late "
            f"rows counted by Tidegauge, {counters.spark:,} by Spark's numRowsDroppedByWatermark "
            "(docs/time.md explains the difference)"
        )
    return 0


def _arrivals(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    rows = store.read_arrivals(
        r,
        keys,
        args.domain,
        since_ms=parse_instant(args.since, now) if args.since else None,
        until_ms=parse_instant(args.until, now) if args.until else None,
        service=args.service,
    )
    if args.json:
        json.dump([row.to_dict() for row in rows], sys.stdout)
        print()
        return 0
    print(
        f"{'window_start (UTC)':<26}{'service':<12}{'events':>8}{'ev/s':>9}{'late':>7}{'strag':>7}"
    )
    for row in rows:
        print(
            f"{to_iso(row.window_start):<26}{row.service:<12}{row.events:>8}"
            f"{row.events_per_s:>9.1f}{row.late:>7}{row.stragglers:>7}"
        )
    return 0


def _late_events(r: redis.Redis, keys: store.Keys, args: argparse.Namespace) -> int:
    events = store.read_late_events(r, keys, limit=args.limit)
    if args.json:
        print(json.dumps(events))
        return 0
    for e in events:
        print(
            f"{e['service']:<12} event {to_iso(e['event_time'])}  window ends "
            f"{to_iso(e['window_end'])}, {format_duration(max(e['behind_ms'], 0))} behind the "
            f"watermark  ({e['partition']}:{e['offset']}, {e['event_id']})"
        )
    return 0


def _status(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    status = store.read_status(r, keys)
    if status is None:
        if args.json:
            print("null")
        return _fail("no status yet: the job has not finished a batch")
    age = now - status.status_time
    recent = store.read_batches(r, keys, limit=_RECENT_BATCHES)
    kept = store.read_retention(r, keys)
    doc: dict[str, Any] = status.to_dict() | {
        "age_ms": age,
        "overflow": store.overflow_summary(recent),
        "retention": None
        if kept is None
        else {
            "in_force": kept.retention.text(),
            "set": kept.configured.text() if kept.configured else None,
            "size_bytes": kept.size_budget,
        },
    }
    if args.json:
        print(json.dumps(doc))
    else:
        print(
            f"batch {status.batch_id} at {to_iso(status.batch_time)} "
            f"({format_duration(max(age, 0))} ago), {status.input_rows} rows"
        )
        print(
            f"watermark {to_iso(status.watermark)} "
            f"(delay {format_duration(now - status.watermark)})"
        )
        print(format_freshness(status.freshness))
        dups = sum(b.get("duplicates") or 0 for b in recent)
        print(f"duplicates dropped: {dups:,} in the last {len(recent)} batches")
        print(format_overflow(doc["overflow"]))
        if status.spark:
            s = status.spark
            print(f"spark {s['master']}: {s['executors']} executor(s), {s['cores']} core(s)")
        print("offsets " + ", ".join(f"p{p}={o}" for p, o in sorted(status.offsets.items())))
        if kept is not None:
            print(kept.text())
    if args.max_age and age > parse_duration(args.max_age):
        return _fail(f"stale: last report {format_duration(age)} ago (> {args.max_age})")
    return 0


#: Batches of the history `query status` sums duplicates over.
_RECENT_BATCHES = 100


def format_overflow(o: Mapping[str, int]) -> str:
    """The status's line on service names beyond `--max-services`."""
    if not o["max_names"]:
        return f"service names over --max-services: none in the last {o['batches']} batches"
    return (
        f"service names over --max-services: {o['last_names']:,} in the last batch, up to "
        f"{o['max_names']:,} per batch; {o['events']:,} events counted under "
        f"'{OVERFLOW_SERVICE}' in the last {o['batches']} batches"
    )


def format_freshness(freshness: Mapping[str, int] | None) -> str:
    """The status's freshness line: "freshness p50 120ms, p99 480ms, max 900ms (batch 12, ...)".

    Freshness of a record = when its batch's results were committed to Redis - its broker
    timestamp (ms). The job keeps that of the latest batch with records (`JobStatus.freshness`),
    so in a quiet stream it names an older batch than the status line. Negative values (the
    broker's clock ahead of the job's) keep their sign.
    """
    if freshness is None:
        return "freshness: no batch with records yet"
    n = freshness["records"]
    return (
        f"freshness p50 {format_duration(freshness['p50_ms'])}, "
        f"p99 {format_duration(freshness['p99_ms'])}, "
        f"max {format_duration(freshness['max_ms'])} "
        f"(batch {freshness['batch_id']}, {n:,} record{'' if n == 1 else 's'})"
    )


def _dead(r: redis.Redis, keys: store.Keys, args: argparse.Namespace) -> int:
    counts = store.read_dead_counts(r, keys)
    letters = store.read_dead_letters(r, keys, args.limit)
    if args.json:
        print(json.dumps({"counts": counts, "letters": [d.to_dict() for d in letters]}))
        return 0
    for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{reason:<16}{n:>10}")
    for d in letters:
        preview = d.raw[:80].decode("utf-8", errors="backslashreplace")
        print(f"{d.partition}:{d.offset:<10} {d.reason:<14} {d.detail[:60]:<60} {preview}")
    if not counts:
        print("(no dead letters)")
    return 0


def _alerts(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    firings = read_firings(r, keys)
    if args.state:
        firings = [f for f in firings if f.state == args.state]
    notices = read_alert_log(r, keys, args.limit)
    beat = read_alert_heartbeat(r, keys)
    if args.json:
        print(
            json.dumps(
                {
                    "firings": [f.to_dict() for f in firings],
                    "notices": notices,
                    "evaluated_at": None if beat is None else beat.time,
                }
            )
        )
    else:
        if beat is None:
            print("no alert evaluator has run on this prefix (start one: tidegauge alerts)")
        else:
            ago = format_duration(max(now - beat.time, 0))
            print(f"evaluated {ago} ago, {beat.rules} rule(s)")
        for f in firings:
            print(describe_firing(f))
        if not firings:
            print("(no firings)")
        if notices:
            print("\nlatest notices:")
        for n in notices:
            f = Firing.from_dict(n["firing"])
            print(f"{to_iso(int(n['time']))}  {n['state']:<12} {f.rule_name} ({f.service})")
    return 1 if args.state and firings else 0


def _slo(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    load_plugins([SLO_COUNTS_PLUGIN])  # the job's exact SLO counts, read from the windows
    topic = args.catalog_topic or os.environ.get(ENV_CATALOG_TOPIC) or DEFAULT_CATALOG_TOPIC
    kafka = KafkaSettings.from_env(bootstrap=args.bootstrap, topic=topic, options=args.kafka_option)
    at = parse_instant(args.at, now) if args.at else now
    published = read_catalog_entries(r, keys)
    if published and not (args.at or args.bootstrap or args.catalog_topic):
        entry = published.get(args.service)  # as the job joins it now
        topic = f"{topic} (as the job last published it)"
    else:  # the topic itself: any time it still holds
        entry = CatalogHistory.of(read_catalog(kafka)).as_of(args.service, at)
    if entry is None or entry.slo is None:
        raise ValueError(
            f"{args.service} has no SLO in the catalog {topic!r} at {to_iso(at)} "
            f"(tidegauge catalog put {args.service} --availability 99.9 ...)"
        )
    period = parse_duration(args.period) if args.period else entry.slo.period_ms
    reports = slo_report(r, keys, args.service, entry.slo, period, at)
    if args.json:
        print(json.dumps({"service": args.service, "objectives": [x.to_dict() for x in reports]}))
        return 0
    print(
        f"{args.service}: SLO over {format_duration(period)} to {to_iso(at)} "
        "(windows still open: provisional)"
    )
    for x in reports:
        b = x.budget
        sli = "-" if b.sli is None else f"{b.sli:.3f}%"
        print(
            f"  {x.objective} {x.target:g}%: SLI {sli} of {b.events:,} events ({b.bad:,} bad); "
            f"budget used {b.consumed:.1%}, left {b.left:.1%}"
        )
        pace = "-" if x.current_burn is None else f"{x.current_burn:.2f}"
        lasts = (
            "never runs out at this pace"
            if x.exhausted_in_ms is None
            else f"runs out in {lasting_text(x.exhausted_in_ms)}"
        )
        print(f"    burn rate over the last hour {pace}: the budget left {lasts}")
        for name, severity, rate, long_burn, short_burn, fires in x.rules:
            shown = "/".join("-" if v is None else f"{v:.2f}" for v in (long_burn, short_burn))
            state = "FIRES" if fires else "quiet"
            print(f"    {name} ({severity}, rate {rate:.3g}): long/short {shown}  {state}")
    return 0
