"""Server time of one dashboard refresh: 1 hour of 10 s windows for 10 services, or for more.

    .venv/bin/python benchmarks/bench_dashboard.py [--services 10[,100,1000,...]] [--minutes 60]
        [--runs 20]

Starts its own redis-server, seeds it through the job's sink code (tests/integration/seed.py:
windows with sketches, late rows, stragglers, arrivals, batches, dead letters), then times what
the page does on every refresh, without Streamlit's own rendering: `dashboard.data.read_snapshot`
(every Redis read, pipelined; the latency range merged from the stored sketches; with more
services than the page's top 10, the ranking and only the drawn services' windows) and the
frames, plotly figures and figure JSON (what dashboard/chart.py sends) of every panel, for the
services the page draws. Refreshes share a closed-window memo as the app does
(tidegauge/core/closed_windows.py); the first refresh (empty memo) and refreshes without one are
printed too. With several `--services`, each count gets a store of its own and the same view
(the page's defaults and the whole seeded span): the read path's cost against the services
stored. Seeding takes ~1.2 ms per (window, service) here: 1,000 services x 10 minutes ~70 s.
Target (BENCHMARKS.md): <= 300 ms. Prints the machine and the figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_redis  # noqa: E402
from dashboard import chart, data, figures  # noqa: E402
from dashboard.headline import headline  # noqa: E402
from dashboard.health import health_frame  # noqa: E402
from dashboard.latency_range import cdf_frame, range_table  # noqa: E402
from dashboard.lateness import digest_histogram, lateness_frame, what_if_frame  # noqa: E402
from dashboard.panels import with_others  # noqa: E402
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
    drawn = snap.drawn
    services = [ALL_SERVICES, *drawn]
    headline(snap.status, snap.windows, snap.batches, snap.read_at_ms, f.range_ms)
    windows = with_others(windows_frame(snap.windows), snap, f)
    metrics = metrics_frame(snap.windows)
    size = snap.window_size_ms
    figs = [
        figures.time_domains(arrivals_frame(snap.arrivals), watermark_frame(snap.batches)),
        figures.events_per_second(windows, services=drawn, window_size_ms=size),
        figures.latency_percentiles(metrics, ALL_SERVICES, window_size_ms=size),
        figures.latency_cdf(cdf_frame(snap.range_aggs, services), drawn),
        figures.distinct_users(users_band(metrics), services=drawn),
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


def measure(
    n: int, minutes: int, runs: int
) -> tuple[str, dict[str, tuple[tuple[float, float], list[tuple[float, float]], list[Any]]]]:
    """Seed a store of its own with `n` services and time the views' refreshes on it."""
    svc = start_redis()
    try:
        r = redis.Redis.from_url(f"redis://{svc.address}/0")
        keys = Keys()
        t0 = time.perf_counter()
        names = [f"svc-{i:05d}" for i in range(n)] if n > 100 else None
        seed_live(r, keys, time.time_ns() // 1_000_000, services=n, minutes=minutes, names=names)
        seeded = (
            f"seeded {n:,} services x {minutes} min of 10 s windows in "
            f"{time.perf_counter() - t0:.1f} s; {r.dbsize():,} keys, "
            f"{r.info('memory')['used_memory_human']} in Redis"
        )
        print(seeded, flush=True)
        span = minutes * 60_000
        views = {
            f"{minutes} min charts and latency range": data.Filters(
                range_ms=span, latency_range_ms=span
            ),
            "page defaults (15 min charts, 15 min latency range)": data.Filters(),
        }
        refresh(r, keys, data.Filters(), None)  # warm-up: imports, connection
        results: dict[str, tuple[tuple[float, float], list[tuple[float, float]], list[Any]]] = {}
        for name, f in views.items():
            memo = ClosedWindows()
            first = refresh(r, keys, f, memo)  # the memo is empty: every window decoded
            steady = [refresh(r, keys, f, memo) for _ in range(runs)]
            bare = [refresh(r, keys, f, None) for _ in range(max(3, runs // 5))]
            results[name] = (first, steady, bare)
    finally:
        svc.stop()
    return seeded, results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--services", default="10", help="stored services; several: 10,100,1000")
    p.add_argument("--minutes", type=int, default=60)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    print(describe(("redis", "pandas", "numpy", "plotly", "streamlit")))
    counts = [int(x) for x in args.services.split(",")]
    table = []
    for n in counts:
        _, results = measure(n, args.minutes, args.runs)
        for name, (first, steady, bare) in results.items():
            total = sorted(a + b for a, b in steady)
            reads = sorted(a for a, _ in steady)
            shaping = sorted(b for _, b in steady)
            print(
                f"{n:,} services, {name}, {len(steady)} refreshes (ms): median "
                f"{statistics.median(total):.0f}, p95 {total[int(0.95 * (len(total) - 1))]:.0f}, "
                f"best {total[0]:.0f}"
            )
            print(
                f"  Redis reads + sketch merges: median {statistics.median(reads):.0f}; "
                f"frames + figures + JSON: median {statistics.median(shaping):.0f}"
            )
            print(
                f"  first refresh (closed-window memo empty): {sum(first):.0f}; without the "
                f"memo: median {statistics.median(a + b for a, b in bare):.0f}",
                flush=True,
            )
            table.append((n, name, sum(first), statistics.median(total), total[-1]))
    if len(counts) > 1:
        print("\nstored services | view | first refresh | refresh median | refresh max (ms)")
        for n, name, first_ms, median_ms, max_ms in table:
            print(f"{n:>15,} | {name} | {first_ms:,.0f} | {median_ms:,.0f} | {max_ms:,.0f}")
    print("target: <= 300 ms (first draw <= 2 s)")


if __name__ == "__main__":
    main()
