"""Server time of one dashboard refresh: 1 hour of 10 s windows for 10 services.

    .venv/bin/python benchmarks/bench_dashboard.py [--services 10] [--minutes 60] [--runs 20]

Starts its own redis-server, seeds it through the job's sink code (tests/integration/seed.py:
windows with sketches, late rows, stragglers, arrivals, batches, dead letters), then times what
the page does on every refresh, without Streamlit's own rendering: `dashboard.data.read_snapshot`
(every Redis read, pipelined; the 60-minute latency range merged from the stored sketches) and
the frames, plotly figures and figure JSON (what dashboard/chart.py sends) of every panel.
Refreshes share a closed-window memo as the app does (tidegauge/core/closed_windows.py); the first
refresh (empty memo) and refreshes without one are printed too. Target (BENCHMARKS.md): <= 300 ms.
Prints the machine and the figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_redis  # noqa: E402
from dashboard import chart, data, figures  # noqa: E402
from dashboard.headline import headline  # noqa: E402
from dashboard.health import health_frame  # noqa: E402
from dashboard.latency_range import cdf_frame, range_table  # noqa: E402
from dashboard.lateness import digest_histogram, lateness_frame, what_if_frame  # noqa: E402
from dashboard.time_domains import arrivals_frame, watermark_frame  # noqa: E402
from dashboard.windows import metrics_frame, users_band, windows_frame  # noqa: E402
from tests.integration.seed import seed_live  # noqa: E402
from tidegauge.core.closed_windows import ClosedWindows  # noqa: E402
from tidegauge.core.store import ALL_SERVICES, Keys  # noqa: E402


def refresh(
    r: redis.Redis, keys: Keys, f: data.Filters, cache: ClosedWindows | None
) -> tuple[float, float]:
    """One refresh: (ms reading Redis, ms building frames, figures and their JSON)."""
    t0 = time.perf_counter()
    now = time.time_ns() // 1_000_000
    snap = data.read_snapshot(r, keys, f.range_ms, now, filters=f, cache=cache)
    t1 = time.perf_counter()
    services = [ALL_SERVICES, *snap.services]
    headline(snap.status, snap.windows, snap.batches, snap.read_at_ms, f.range_ms)
    windows = windows_frame(snap.windows)
    metrics = metrics_frame(snap.windows)
    size = snap.window_size_ms
    figs = [
        figures.time_domains(arrivals_frame(snap.arrivals), watermark_frame(snap.batches)),
        figures.events_per_second(windows, services=snap.services, window_size_ms=size),
        figures.latency_percentiles(metrics, ALL_SERVICES, window_size_ms=size),
        figures.latency_cdf(cdf_frame(snap.range_aggs, services), snap.services),
        figures.distinct_users(users_band(metrics), services=snap.services),
        figures.lateness_windows(lateness_frame(snap.windows)),
        figures.pipeline_health(health_frame(snap.batches)),
    ]
    range_table(snap.range_aggs, services, f.latency_range_ms)
    if snap.lateness is not None:
        figs.append(figures.lateness_histogram(digest_histogram(snap.lateness.lateness)))
        figs.append(figures.what_if(what_if_frame(snap.lateness), chosen_ms=30_000, job_ms=30_000))
    for fig in figs:  # what dashboard/chart.py sends to the browser
        chart.figure_json(fig)
    t2 = time.perf_counter()
    return (t1 - t0) * 1000, (t2 - t1) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--services", type=int, default=10)
    p.add_argument("--minutes", type=int, default=60)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    print(describe(("redis", "pandas", "numpy", "plotly", "streamlit")))
    svc = start_redis()
    try:
        r = redis.Redis.from_url(f"redis://{svc.address}/0")
        keys = Keys()
        t0 = time.perf_counter()
        seed_live(
            r, keys, time.time_ns() // 1_000_000, services=args.services, minutes=args.minutes
        )
        print(
            f"seeded {args.services} services x {args.minutes} min of 10 s windows in "
            f"{time.perf_counter() - t0:.1f} s; {r.dbsize():,} keys, "
            f"{r.info('memory')['used_memory_human']} in Redis"
        )
        span = args.minutes * 60_000
        views = {
            f"{args.minutes} min charts and latency range": data.Filters(
                range_ms=span, latency_range_ms=span
            ),
            "page defaults (15 min charts, 15 min latency range)": data.Filters(),
        }
        refresh(r, keys, data.Filters(), None)  # warm-up: imports, connection
        results = {}
        for name, f in views.items():
            memo = ClosedWindows()
            first = refresh(r, keys, f, memo)  # the memo is empty: every window decoded
            steady = [refresh(r, keys, f, memo) for _ in range(args.runs)]
            bare = [refresh(r, keys, f, None) for _ in range(max(3, args.runs // 5))]
            results[name] = (first, steady, bare)
    finally:
        svc.stop()
    for name, (first, steady, bare) in results.items():
        total = sorted(a + b for a, b in steady)
        reads = sorted(a for a, _ in steady)
        shaping = sorted(b for _, b in steady)
        print(
            f"{name}, {len(steady)} refreshes (ms): median {statistics.median(total):.0f}, "
            f"p95 {total[int(0.95 * (len(total) - 1))]:.0f}, best {total[0]:.0f}"
        )
        print(
            f"  Redis reads + sketch merges: median {statistics.median(reads):.0f}; "
            f"frames + figures + JSON: median {statistics.median(shaping):.0f}"
        )
        print(
            f"  first refresh (closed-window memo empty): {sum(first):.0f}; without the memo: "
            f"median {statistics.median(a + b for a, b in bare):.0f}"
        )
    print("target: <= 300 ms")


if __name__ == "__main__":
    main()
