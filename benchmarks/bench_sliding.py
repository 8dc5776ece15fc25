"""What a sliding window costs one service: CPU per batch, state bytes, Redis bytes per row.

    .venv/bin/python benchmarks/bench_sliding.py [--batches 120] [--rates 100,1000,10000]

Feeds one service's events (1 s batches, up to 3 s out of order, 5 % errors) through the job's
pane logic (jobs/panes/windows.py: `ServiceWindows.add`, `windows`, `evict`, the state's bytes, the
per-service work of the read tasks and the stateful step) with a 10 s tumbling window alone,
plus a 60 s hopping window (60s/10s), plus a 60 s sliding window at 100 ms and at 1 ms. Prints,
per rate: ms of CPU per batch, the state's bytes and the stored bytes of one 60 s row (what
Redis keeps per service and row: the aggregate with its timeline). The end-to-end figure is
`bench_job.py --contenders tidegauge,tidegauge-hopping,tidegauge-sliding,tidegauge-sliding-1ms`.
Prints the machine and the figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from jobs.panes.windows import ServiceWindows  # noqa: E402
from tidegauge.core.windows import WindowSpec, advance_watermark  # noqa: E402

TUMBLING = WindowSpec.tumbling(10_000)
SETS = {
    "10s": (TUMBLING,),
    "+60s/10s": (TUMBLING, WindowSpec(60_000, 10_000)),
    "+60s/sliding": (TUMBLING, WindowSpec.sliding(60_000, 10_000, 100)),
    "+60s/sliding@1ms": (TUMBLING, WindowSpec.sliding(60_000, 10_000, 1)),
}


def run(specs: tuple[WindowSpec, ...], rate: int, batches: int) -> tuple[float, int, int]:
    """(ms CPU per batch, state bytes at the end, bytes of the newest 60 s row)."""
    rng = np.random.default_rng(0)
    sw = ServiceWindows(specs)
    watermark, t, spent, row = 0, 1_780_000_000_000, 0.0, 0
    for _ in range(batches):
        t += 1_000
        times = (t - rng.integers(0, 3_000, rate)).astype(np.int64)
        status = np.where(rng.random(rate) < 0.05, 503, 200).astype(np.int64)
        users = np.array([f"u{i}" for i in rng.integers(0, 500, rate)], dtype=object)
        latency = rng.lognormal(5.0, 1.0, rate)
        t0 = time.perf_counter()
        added = sw.add(times, latency, status, users, watermark)
        out = sw.windows(added.touched, watermark)
        blobs = {(spec, w): agg.to_bytes() for (spec, w), agg in out.items()}
        for (spec, _), agg in out.items():
            agg.metrics(spec.size_ms)
        sw.evict(watermark)
        state = sw.to_bytes()
        spent += time.perf_counter() - t0
        wide = [(w, b) for (spec, w), b in blobs.items() if spec.size_ms == 60_000]
        if wide:
            row = max(len(b) for _, b in wide)
        watermark = advance_watermark(watermark, times.tolist(), 30_000)
    return spent / batches * 1000, len(state), row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batches", type=int, default=120)
    ap.add_argument("--rates", default="100,1000,10000", help="events per second (= per batch)")
    args = ap.parse_args()
    print(f"machine: {describe()}")
    print(f"{'events/s':>9} {'windows':<18}{'ms/batch':>9}{'state KB':>10}{'60s row KB':>12}")
    for rate in [int(x) for x in args.rates.split(",")]:
        for name, specs in SETS.items():
            ms, state, row = run(specs, rate, args.batches)
            shown = f"{row / 1024:.1f}" if row else "-"
            print(f"{rate:>9} {name:<18}{ms:>9.2f}{state / 1024:>10.1f}{shown:>12}")


if __name__ == "__main__":
    main()
