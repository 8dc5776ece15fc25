"""Redis memory over weeks of event time: does the default retention plateau?

    .venv/bin/python benchmarks/bench_soak.py [--days 14] [--services 10] [--events 100]
        [--retention 6h,1m:7d,10m:7d,1h:90d] [--pool 400]

Starts its own redis-server and streams `--days` of event time, time-compressed, through the job's
sink code (jobs/sink/redis_sink.py `write_batch` with the retention tiers, jobs/sink/rollup.py), as
the job writes it: one batch per minute of event time, each with the 10 s windows of every service
(aggregates of `--events` events: latency t-digest, users HyperLogLog, lateness), a few late rows
and stragglers, processing- and broker-time arrivals, and the batch's progress entry. The watermark
is the batch's event time minus 30 s; processing and broker time follow event time, as in a live
stream. Aggregates are drawn from a pool of `--pool` distinct ones built up front (building 2
million of them would measure numpy, not Redis).


Prints Redis `used_memory` and the number of keys after 1 h, 6 h, 1 d, 7 d and 14 d of event
time, the bytes one window of one service takes in each tier (MEMORY USAGE of its keys), and the
sink's time per batch. The default tiers must plateau: 7 d and 14 d within 10 % (BENCHMARKS.md).
Then, on the final store, the server time of a dashboard refresh (benchmarks/bench_dashboard.py
`refresh`: every Redis read, frames, figures and their JSON) for each of the page's time
ranges, with the closed-window memo as the app keeps it (target: 7 d x 10 services <= 300 ms).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import redis  # noqa: E402

from benchmarks.bench_dashboard import refresh  # noqa: E402
from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_redis  # noqa: E402
from dashboard import data  # noqa: E402
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch  # noqa: E402
from jobs.sink.rollup import BatchTime  # noqa: E402
from jobs.sink.status import write_progress  # noqa: E402
from jobs.state.rows import ArrivalUpdate, LateUpdate, WindowCount, WindowUpdate  # noqa: E402
from tidegauge.core.closed_windows import ClosedWindows  # noqa: E402
from tidegauge.core.late_agg import LateAgg  # noqa: E402
from tidegauge.core.retention import DEFAULT_RETENTION, Retention, format_span  # noqa: E402
from tidegauge.core.store import Keys  # noqa: E402
from tidegauge.core.window_agg import WindowAgg  # noqa: E402
from tidegauge.core.windows import WindowSpec  # noqa: E402

S, M, H, D = 1_000, 60_000, 3_600_000, 86_400_000
W = 10 * S
SPEC = WindowSpec.tumbling(W)
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
#: The dashboard's time ranges (dashboard/app.py RANGES_MS, without importing Streamlit's page).
RANGES_MS = {"15 min": 15 * M, "6 h": 6 * H, "24 h": D, "7 d": 7 * D, "30 d": 30 * D}
CHECKPOINTS = [("1h", H), ("6h", 6 * H), ("1d", D), ("7d", 7 * D), ("14d", 14 * D)]


def pool(n: int, events: int, seed: int = 1) -> list[WindowUpdate]:
    """`n` distinct window aggregates of `events` events each (start and service set later)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = max(1, int(rng.poisson(events)))
        latency = rng.lognormal(np.log(30 + 5 * (i % 10)), 0.8, k)
        status = rng.choice(np.array([200, 404, 500]), k, p=[0.95, 0.03, 0.02])
        users = np.array([f"user-{u}" for u in rng.integers(0, 5_000, k)], dtype=object)
        agg = WindowAgg()
        agg.add(latency, status, users)
        out.append(WindowUpdate(SPEC.key, 0, "", agg.to_bytes()))
    return out


def key_bytes(r: redis.Redis, keys: Keys, spec: str, start: int) -> int:
    """MEMORY USAGE of every key of one window (metrics, aggregates, late, stragglers)."""
    names = [
        keys.window(spec, start),
        keys.window_aggs(spec, start),
        keys.window_late(spec, start),
        keys.window_stragglers(spec, start),
        keys.window_duplicates(spec, start),
    ]
    return sum(int(r.memory_usage(n, samples=0) or 0) for n in names)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--days", type=float, default=14)
    p.add_argument("--services", type=int, default=10)
    p.add_argument("--events", type=int, default=100, help="events per window and service")
    p.add_argument("--retention", default=DEFAULT_RETENTION)
    p.add_argument("--pool", type=int, default=400)
    p.add_argument("--runs", type=int, default=10, help="dashboard refreshes per range")
    args = p.parse_args()
    retention = Retention.parse(args.retention)
    print(describe())
    print(
        f"soak: {args.days:g} days of event time, {args.services} services, ~{args.events} "
        f"events per 10 s window and service, retention {retention.text()}"
    )
    aggs = pool(args.pool, args.events)
    late_blob = LateAgg()
    late_blob.add(np.array([45_000.0, 90_000.0]), 15_000.0)
    services = [f"svc-{i:02d}" for i in range(args.services)]
    svc = start_redis()
    keys = Keys("tg")
    try:
        r = redis.Redis(host=svc.host, port=svc.port)
        base = int(r.info("memory")["used_memory"])
        batches = int(args.days * D // M)
        marks = {ms // M: name for name, ms in CHECKPOINTS if ms // M <= batches}
        sink_ms: list[float] = []
        rng = np.random.default_rng(2)
        i = 0
        started = time.monotonic()
        for b in range(1, batches + 1):
            t = T0 + b * M  # the batch brings the minute [t - 1 min, t)
            windows, late, strag, arrivals = [], [], [], []
            for j in range(6):
                start = t - M + j * W
                for name in services:
                    u = aggs[i % len(aggs)]
                    i += 1
                    windows.append(WindowUpdate(SPEC.key, start, name, u.agg))
            for _ in range(2):  # late rows for windows 1 to 30 minutes old
                start = t - M - int(rng.integers(6, 180)) * W
                late.append(
                    LateUpdate(
                        SPEC.key, start, services[b % len(services)], 2, late_blob.to_bytes()
                    )
                )
            strag.append(WindowCount(SPEC.key, t - M - W, services[b % len(services)], 1))
            for name in services:
                metrics = {"late": 0, "stragglers": 0, "proc_ms": t}
                arrivals.append(ArrivalUpdate("processing", t - W, name, 600, metrics))
                arrivals.append(ArrivalUpdate("broker", t - W, name, 600, metrics))
            wm = t - M - 30 * S
            t0 = time.perf_counter()
            write_batch(
                r,
                keys,
                SinkBatch(
                    b,
                    windows,
                    late=late,
                    stragglers=strag,
                    arrivals=arrivals,
                    at=BatchTime(b, wm, t),
                ),
                SinkConfig(arrival_window_ms=W, retention=retention, source=SPEC),
            )
            sink_ms.append((time.perf_counter() - t0) * 1000)
            write_progress(
                r,
                keys,
                {
                    "batch_id": b,
                    "batch_time": t,
                    "watermark": wm,
                    "input_rows": 6 * args.services * args.events,
                    "offsets": {"0": b * 1000},
                    "start_offsets": {"0": (b - 1) * 1000},
                    "latest_offsets": {"0": b * 1000},
                    "batch_duration_ms": 500,
                    "query_id": "soak",
                },
            )
            if b in marks:
                mem = int(r.info("memory")["used_memory"])
                print(
                    f"after {marks[b]:>4} of event time: used_memory {(mem - base) / 1e6:8.1f} MB "
                    f"(+{base / 1e6:.1f} MB empty), {r.dbsize():>8,} keys; sink median "
                    f"{statistics.median(sink_ms[-1000:]):.1f} ms per batch, max "
                    f"{max(sink_ms[-1000:]):.1f} ms; {time.monotonic() - started:.0f}s so far",
                    flush=True,
                )
        last = T0 + batches * M
        print("bytes per window (all its keys), per service, by tier:")
        for spec, size in [(SPEC.key, W)] + [(t.spec.key, t.size_ms) for t in retention.tiers]:
            held = r.zcard(keys.window_index(spec))
            mid = held // 2  # closed windows in the middle of the tier: no longer changing
            starts = [int(s) for s in r.zrange(keys.window_index(spec), mid, mid + 19)]
            if not starts:
                continue
            per = [key_bytes(r, keys, spec, s) / (args.services + 1) for s in starts]
            print(
                f"  {format_span(size):>4} windows: {statistics.median(per):8,.0f} bytes per "
                f"(window, service or *), {held:,} windows held"
            )
        print(f"event time streamed up to {last}; {time.monotonic() - started:.0f}s in all")
        print(
            f"dashboard refresh, {args.services} services (median of {args.runs} after the first):"
        )
        refresh(r, keys, data.Filters(), None)  # warm-up: imports, connection
        for label, ms in RANGES_MS.items():
            f = data.Filters(range_ms=ms)
            memo = ClosedWindows()
            first = sum(refresh(r, keys, f, memo))
            runs = [refresh(r, keys, f, memo) for _ in range(args.runs)]
            steady = sorted(a + b for a, b in runs)
            reads = statistics.median(a for a, _ in runs)
            snap = data.read_snapshot(r, keys, f.range_ms, T0, filters=f, cache=memo)
            print(
                f"  {label:>6}: first {first:6.0f} ms, then median {statistics.median(steady):5.0f}"
                f" ms (reading Redis {reads:.0f} ms), max {steady[-1]:5.0f} ms; "
                f"{len(snap.windows):,} rows; {snap.resolution}"
            )
    finally:
        svc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
