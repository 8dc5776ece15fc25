"""What a dimension costs in Redis per hour, and what the page's breakdown of an hour costs to read.

    .venv/bin/python benchmarks/bench_breakdown.py [--services 10] [--routes 100] [--regions 5]
        [--rate 1000] [--minutes 60] [--dimension route ...] [--runs 20]
        [--redis URL [--build-only]] [--profile]

Real parts end to end: its own broker (Tansu) and redis-server; `tidegauge produce --pace fast
--attributes --routes N --regions M` writes `--minutes` of event time ending now (equal
services, each request with a route whose shares follow Zipf's law beyond the seven built-in
ones); `tidegauge job --trigger available-now --window 10s --dimension ...` reads it all and
stops. Then:

* Redis bytes (`MEMORY USAGE`, every key) of the services' store and of each dimension's
  (`tg:by:{dim}:`), per hour of event time: what `--dimension` adds to the store. With
  `--dimension-values 20` (the default) each (service, dimension) keeps its 20 busiest values
  and `(other)`, whatever the routes;
* the dashboard's Breakdown panel over the last hour (`dashboard.breakdown.read_breakdown`, its
  table, trend frame, plotly figure and the figure's JSON): all services' routes ranked by
  events and by p99, and one service's; the first read (an empty closed-window memo) and
  `--runs` refreshes with the memo, as the page shares it. Target (BENCHMARKS.md): ≤ 300 ms.

Prints the machine and the figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_broker, start_redis  # noqa: E402
from dashboard import chart, figures  # noqa: E402
from dashboard.breakdown import (  # noqa: E402
    BreakdownView,
    breakdown_table,
    read_breakdown,
    trend_frame,
)
from tidegauge.core.closed_windows import ClosedWindows  # noqa: E402
from tidegauge.core.durations import to_iso  # noqa: E402
from tidegauge.core.store import Keys, read_services  # noqa: E402

TOPIC = "breakdown"


def _cli(*args: str, log: Path) -> None:
    """Run `tidegauge ARGS` to its end; its output to `log`, which the error shows."""
    with log.open("ab") as out:
        code = subprocess.call([sys.executable, "-m", "cli.main", *args], stdout=out, stderr=out)
    if code != 0:
        raise SystemExit(f"tidegauge {args[0]} exited {code}:\n{log.read_text()[-3000:]}")


def store_bytes(r: redis.Redis, dims: list[str]) -> dict[str, int]:
    """Bytes of every key, by store: "services" or the dimension's name."""
    out: dict[str, int] = defaultdict(int)
    prefixes = {f"tg:by:{d}:": d for d in dims}
    for key in r.scan_iter(count=10_000):
        k = key.decode()
        store = next((d for p, d in prefixes.items() if k.startswith(p)), "services")
        out[store] += int(r.memory_usage(key, samples=0) or 0)
    return dict(out)


def time_breakdown(
    r: redis.Redis, view: BreakdownView, cache: ClosedWindows | None
) -> tuple[float, int, int]:
    """One refresh of the panel: (ms, members ranked, windows drawn)."""
    t0 = time.perf_counter()
    b = read_breakdown(r, Keys(), view, cache)
    breakdown_table(b)
    drawn = [b.label(t.service) for t in b.ranked[: view.top]]
    chart.figure_json(figures.breakdown_trend(trend_frame(b), drawn, view.metric))
    return (time.perf_counter() - t0) * 1000, b.members, len(b.rows)


def build(args: argparse.Namespace, url: str, dims: list[str]) -> None:
    """Produce `--minutes` of event time ending now and run the job over it into `url`."""
    broker = start_broker()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-breakdown-") as tmp:
            log = Path(tmp) / "run.log"
            _cli("topic", "--bootstrap", broker.address, "--topic", TOPIC, "--partitions", "3",
                 log=log)  # fmt: skip
            now = time.time_ns() // 1_000_000
            start = now - args.minutes * 60_000
            services = ",".join(f"s{k:03d}:1" for k in range(args.services))
            t0 = time.perf_counter()
            _cli(
                "produce", "--bootstrap", broker.address, "--topic", TOPIC, "--pace", "fast",
                "--start-time", to_iso(start), "--duration", f"{args.minutes}m",
                "--rate", str(args.rate), "--services", services, "--attributes",
                "--routes", str(args.routes), "--regions", str(args.regions), "--quiet",
                log=log,
            )  # fmt: skip
            events = round(args.rate * args.minutes * 60)
            print(f"produced ~{events:,} events in {time.perf_counter() - t0:.0f} s", flush=True)
            t0 = time.perf_counter()
            _cli(
                "job", "--bootstrap", broker.address, "--topic", TOPIC, "--redis", url,
                "--checkpoint", str(Path(tmp) / "cp"), "--trigger", "available-now",
                "--window", "10s", "--allowed-lateness", "30s", "--master", "local[2]",
                "--shuffle-partitions", "2", "--dimension-values", str(args.dimension_values),
                *(x for d in dims for x in ("--dimension", d)),
                log=log,
            )  # fmt: skip
            print(f"the job read it in {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        broker.stop()


def measure(args: argparse.Namespace, url: str, dims: list[str]) -> None:
    """Redis bytes per store and the breakdown panel's refreshes over the last hour."""
    r = redis.Redis.from_url(url)
    per_hour = 60 / args.minutes
    sizes = store_bytes(r, dims)
    print(
        f"\nRedis after {args.minutes} min of {args.services} services x {args.routes} "
        f"routes ({args.regions} regions) at {args.rate:,.0f} events/s, "
        f"--dimension-values {args.dimension_values}:"
    )
    for name, size in sorted(sizes.items()):
        print(f"  {name:>12}: {size / 1e6:8.1f} MB, {size * per_hour / 1e6:8.1f} MB per hour")
    first_service = read_services(r, Keys())[0]
    hour = 60 * 60_000
    views = {
        f"all services' {dims[0]}s by events": BreakdownView(dims[0], range_ms=hour),
        f"all services' {dims[0]}s by p99": BreakdownView(dims[0], metric="p99", range_ms=hour),
        f"{first_service}'s {dims[0]}s by events": BreakdownView(
            dims[0], of=first_service, range_ms=hour
        ),
    }
    print(f"\nBreakdown panel over the last hour, top 10 drawn ({args.runs} refreshes):")
    for name, view in views.items():
        memo = ClosedWindows()
        first, members, rows = time_breakdown(r, view, memo)
        steady = sorted(time_breakdown(r, view, memo)[0] for _ in range(args.runs))
        bare = statistics.median(time_breakdown(r, view, None)[0] for _ in range(3))
        print(
            f"  {name}: {members} values, {rows} windows drawn; first {first:.0f} ms, "
            f"then median {statistics.median(steady):.0f} ms (p95 "
            f"{steady[int(0.95 * (len(steady) - 1))]:.0f}); without the memo {bare:.0f} ms"
        )
        if args.profile:
            import cProfile
            import pstats

            with cProfile.Profile() as prof:
                time_breakdown(r, view, memo)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--services", type=int, default=10)
    p.add_argument("--routes", type=int, default=100)
    p.add_argument("--regions", type=int, default=5)
    p.add_argument("--rate", type=float, default=1000.0, help="events/s of event time")
    p.add_argument("--minutes", type=int, default=60, help="event time written, ending now")
    p.add_argument("--dimension", action="append", help="as the job's (default: route)")
    p.add_argument("--dimension-values", type=int, default=20)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument(
        "--redis",
        metavar="URL",
        help="measure this store (built by an earlier run with --build-only) instead of "
        "starting a redis-server and building one",
    )
    p.add_argument("--build-only", action="store_true", help="build the store in --redis, stop")
    p.add_argument("--profile", action="store_true", help="cProfile one refresh of each view")
    args = p.parse_args()
    dims = args.dimension or ["route"]
    print(describe(), flush=True)
    if args.redis:
        if args.build_only:
            build(args, args.redis, dims)
        else:
            measure(args, args.redis, dims)
        return 0
    store = start_redis()
    try:
        url = f"redis://{store.address}/0"
        build(args, url, dims)
        measure(args, url, dims)
    finally:
        store.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
