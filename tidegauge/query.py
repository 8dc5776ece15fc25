"""`tidegauge query`: the stored results, read through tidegauge/store.py, as tables or JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import redis

from tidegauge import store
from tidegauge.config import RedisSettings, redact_url
from tidegauge.durations import format_duration, parse_duration, parse_instant, to_iso

__all__ = ["add_arguments", "run"]


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
    w.add_argument("--window", help="window size, e.g. 10s (default: the smallest stored)")

    s = sub.add_parser("status", help="the job's latest batch: id, age, watermark, offsets")
    common(s)
    s.add_argument(
        "--max-age", help="exit 1 unless the job reported within this long (health checks)"
    )

    d = sub.add_parser("dead-letters", help="malformed records by reason, newest first")
    common(d)
    d.add_argument("--limit", type=int, default=20)


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
        if args.view == "status":
            return _status(r, keys, args, now)
        return _dead(r, keys, args)
    except redis.RedisError as e:
        return _fail(f"cannot read Redis at {redact_url(settings.url)}: {e}")
    except ValueError as e:
        return _fail(str(e))


def _windows(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    rows = store.read_windows(
        r,
        keys,
        size_ms=parse_duration(args.window) if args.window else None,
        service=args.service,
        since_ms=parse_instant(args.since, now) if args.since else None,
        until_ms=parse_instant(args.until, now) if args.until else None,
    )
    if args.json:
        json.dump([row.to_dict() for row in rows], sys.stdout)
        print()
        return 0
    print(f"{'window_start (UTC)':<26}{'service':<16}{'count':>10}{'events/s':>12}{'late':>8}")
    for row in rows:
        print(
            f"{to_iso(row.window_start):<26}{row.service:<16}{row.count:>10}"
            f"{row.events_per_s:>12.1f}{row.late:>8}"
        )
    if not rows:
        print("(no windows stored yet)")
    return 0


def _status(r: redis.Redis, keys: store.Keys, args: argparse.Namespace, now: int) -> int:
    status = store.read_status(r, keys)
    if status is None:
        if args.json:
            print("null")
        return _fail("no status yet: the job has not finished a batch")
    age = now - status.status_time
    doc: dict[str, Any] = status.to_dict() | {"age_ms": age}
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
        print("offsets " + ", ".join(f"p{p}={o}" for p, o in sorted(status.offsets.items())))
    if args.max_age and age > parse_duration(args.max_age):
        return _fail(f"stale: last report {format_duration(age)} ago (> {args.max_age})")
    return 0


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
