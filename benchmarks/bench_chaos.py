"""The chaos soak: the whole pipeline at a steady rate for half an hour, faults on a schedule.

    .venv/bin/python benchmarks/bench_chaos.py [--minutes 30] [--rate 5000] [--seed 1]
        [--workers N]

Runs tests/chaos.py's `Soak`: a broker, a redis-server with an append-only file, `tidegauge
produce` in real time and `tidegauge job` (1 s trigger); every 25 to 40 s one fault, each kind
in turn (job SIGKILL, job SIGTERM, broker paused 10 s, Redis restarted, the job's Python
workers killed; with `--workers N` the job runs on a Spark standalone cluster of N one-core
workers, and one of them is killed and replaced in turn too). Prints the machine, each fault
with how long its part was down, how long until a batch with records was committed again, and
the worst freshness p99 in the minute after; then whether Redis equals the ground truth window
by window. Nothing is asserted (the three-minute version in tests/integration/test_chaos.py
asserts).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402
from tests.chaos import Soak  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=5_000.0, help="events per second offered")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", help="keep logs, truth and checkpoint here (default: a temp dir)")
    ap.add_argument(
        "--workers", type=int, default=0, help="a standalone cluster of N workers (0: local[2])"
    )
    args = ap.parse_args()
    print(describe(["pyspark", "redis"]))
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tg-chaos-"))
    started = time.monotonic()
    result = Soak(workdir, args.minutes * 60, args.rate, args.seed, workers=args.workers).run()
    where = f"{args.workers} standalone workers" if args.workers else "local[2]"
    print(
        f"soak: {args.minutes:g} min at {args.rate:,.0f} events/s on {where}, seed {args.seed}, "
        f"{workdir}"
    )
    print(result.table())
    recovered = [f.recovered_s for f in result.faults if f.recovered_s is not None]
    freshness = [f.max_freshness_ms for f in result.faults if f.max_freshness_ms is not None]
    line = f"{len(result.faults)} faults"
    if recovered and freshness:
        line += (
            f"; recovered in median {statistics.median(recovered):.1f} s, max "
            f"{max(recovered):.1f} s; worst freshness p99 after a fault {max(freshness):,} ms"
        )
    print(line)
    print(
        f"{result.records:,} records, {result.batches:,} batches committed, {result.events:,} "
        f"events in {result.windows:,} (window, service) pairs; "
        + (
            "Redis equals the ground truth: every window exact, nothing lost, nothing twice"
            if not result.mismatches
            else f"{len(result.mismatches)} differences:\n  " + "\n  ".join(result.mismatches[:40])
        )
    )
    print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
