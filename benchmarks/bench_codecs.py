"""What a batch's window aggregates cost to encode and decode, and how many bytes they take.

Run from the repository root:  .venv/bin/python benchmarks/bench_codecs.py  [--rounds 7]
    [--rollup-services 1000] [--rollup-rounds 3]

`WindowAggs` (tidegauge/core/window_aggs.py) of two shapes a batch meets: 7,000 aggregates of
~60 events (a live batch's 10 s windows at many services) and 700 of ~600 (a minute's
roll-ups), users drawn from 5,000, lognormal latencies to the µs, 25 % errors, 5 % overdue.
Then `Hlls` alone (7,000 sketches of 60 users): the HyperLogLogs' share. Then the sink's
largest regular step, a 10-minute roll-up (jobs/sink/rollup.py `roll_periods`) of ten 1-minute
windows of `--rollup-services` services, each ~180 events (30 per 10 s window, as
bench_store.py writes): with 10,000 services it is the batch that takes longest every 10
minutes. The roll-up is timed twice: in this process alone, and as the job runs it, half of
its merges in a state worker (`StatePool.merge_encoded`, one worker started for it). Best of
`--rounds` each (`--rollup-rounds` for the roll-up); prints figures, asserts nothing. Compare
two commits by running it in a worktree of each.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.machine import describe  # noqa: E402
from jobs.sink.rollup import RolledWindow, roll_periods  # noqa: E402
from jobs.state.step import StatePool  # noqa: E402
from jobs.summary.settings import ExecutorConfig  # noqa: E402
from sketches.hlls import Hlls  # noqa: E402
from sketches.tg64 import hash32  # noqa: E402
from tidegauge.core.window_aggs import WindowAggs  # noqa: E402
from tidegauge.core.windows import WindowSpec  # noqa: E402


def aggregates(groups: int, per: int, seed: int = 1) -> WindowAggs:
    rng = np.random.default_rng(seed)
    n = groups * per
    group = rng.integers(0, groups, n)
    users = np.array([f"u{u}" for u in rng.integers(0, 5000, n)], dtype=object)
    overdue = rng.random(n) < 0.05
    return WindowAggs.build(
        groups,
        group,
        np.round(rng.lognormal(3.5, 0.6, n), 3),
        rng.choice([200, 200, 200, 500], n),
        group,
        hash32(users),
        np.round(rng.exponential(300, n)),
        group[overdue],
        np.round(rng.exponential(1000, int(overdue.sum()))),
        None,
        None,
    )


def minutes(services: int, per: int) -> dict[int, list[tuple[int, RolledWindow]]]:
    """Ten 1-minute windows of `services` aggregates of ~`per` events: one 10-minute period."""
    windows = []
    for minute in range(10):
        blobs = aggregates(services, per, seed=minute).encode()
        names = (f"svc-{i:05d}" for i in range(services))
        windows.append((minute * 60_000, RolledWindow(aggs=dict(zip(names, blobs, strict=True)))))
    return {0: windows}


def best(rounds: int, f: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of `rounds` calls, in ms, and the last result."""
    fastest, out = float("inf"), None
    for _ in range(rounds):
        t = time.perf_counter()
        out = f()
        fastest = min(fastest, time.perf_counter() - t)
    return fastest * 1e3, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rollup-services", type=int, default=1_000)
    parser.add_argument("--rollup-rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe(("numpy",)))
    for groups, per in ((7000, 60), (700, 600)):
        cols = aggregates(groups, per)
        enc, blobs = best(args.rounds, cols.encode)
        dec, _ = best(args.rounds, functools.partial(WindowAggs.decode, blobs))
        size = sum(map(len, blobs)) / groups
        figures = f"encode {enc:.1f} ms, decode {dec:.1f} ms, {size:,.0f} B each"
        print(f"WindowAggs {groups:,} x ~{per}: {figures}")
    rng = np.random.default_rng(1)
    n = 7000 * 60
    hashes = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    sketches = Hlls.build(hashes, rng.integers(0, 7000, n), 7000)
    enc, blobs = best(args.rounds, sketches.encode)
    dec, _ = best(args.rounds, functools.partial(Hlls.decode, blobs))
    size = sum(map(len, blobs)) / 7000
    print(f"Hlls 7,000 x ~60 users: encode {enc:.1f} ms, decode {dec:.1f} ms, {size:,.0f} B each")
    n = args.rollup_services
    periods = minutes(n, 180)
    took, alone = best(args.rollup_rounds, functools.partial(roll_periods, periods, 10**9))
    what = f"10-minute roll-up of {n:,} services (10 x {n:,} aggregates of ~180)"
    print(f"{what}, in this process: {took:,.0f} ms")
    pool = StatePool(ExecutorConfig((WindowSpec.tumbling(10_000),)), 1)
    try:
        roll = functools.partial(roll_periods, periods, 10**9, pool.merge_encoded)
        took, split = best(args.rollup_rounds, roll)
    finally:
        pool.close()
    same = all(split[p].aggs == alone[p].aggs for p in alone)
    print(f"{what}, half in a state worker: {took:,.0f} ms (same bytes: {same})")


if __name__ == "__main__":
    main()
