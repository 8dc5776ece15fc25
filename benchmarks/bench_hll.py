"""HyperLogLog throughput and error: our vectorised update vs datasketch per value.

Run from the repository root:  .venv/bin/python -m benchmarks.bench_hll  [--quick]

Prints figures, asserts nothing. Timings are the best of several runs (the machine is shared
and noisy); one core (numpy here is single-threaded). Input strings are ``user-<i>``, distinct,
built by Arrow compute outside the timed region.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import datasketch
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.machine import describe  # noqa: E402
from sketches.hll import HyperLogLog, _index_rank  # noqa: E402
from sketches.tg64 import datasketch_hashfunc, hash32  # noqa: E402


def machine() -> str:
    return describe(("numpy", "pandas", "pyarrow", "datasketch"))


def ids(n: int) -> pa.Array:
    numbers = pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(pa.scalar("user-"), numbers, "")


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:7.2f} M/s"


def update(values: object) -> HyperLogLog:
    s = HyperLogLog()
    s.update(values)
    return s


def ds_count(d: datasketch.HyperLogLog) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(d.count())


def ds_per_value(values: list[bytes], hashfunc: Callable[[bytes], int]) -> datasketch.HyperLogLog:
    d = datasketch.HyperLogLog(p=14, hashfunc=hashfunc)
    for v in values:
        d.update(v)
    return d


def row(name: str, n: int, seconds: float, extra: str = "") -> None:
    print(f"{name:38s} {n:>10,d} {seconds * 1e3:8.1f}ms {rate(n, seconds)}  {extra}")


def bench_update(n: int, repeat: int, with_list: bool) -> None:
    arrow = ids(n)
    inputs: dict[str, object] = {
        "pyarrow string array": arrow,
        "pandas str Series (Arrow-backed)": pd.Series(arrow.to_pandas()),
        "numpy object array": arrow.to_numpy(zero_copy_only=False),
    }
    if with_list:
        inputs["list[str]"] = arrow.to_pylist()
    for name, values in inputs.items():
        t = best_of(lambda v=values: update(v), repeat)
        row(name, n, t, f"{update(values).count() / n - 1:+9.3%}")
    # Where the time goes, on the Arrow input: hashing, then folding hashes into registers.
    h = hash32(arrow)
    row("  of which: hash only (hash32)", n, best_of(lambda: hash32(arrow), repeat))
    row("  of which: registers (update_hashes)", n, best_of(lambda: update_hashes(h), repeat))


def update_hashes(h: np.ndarray) -> HyperLogLog:
    s = HyperLogLog()
    s.update_hashes(h)
    return s


def bench_reductions(n: int) -> None:
    """np.maximum.at vs a bincount table vs sort + last-per-register, on n hashes at once."""
    m = 1 << 14
    index, rank = _index_rank(hash32(ids(n)), 14)

    def with_maximum_at() -> np.ndarray:
        reg = np.zeros(m, np.uint8)
        np.maximum.at(reg, index, rank)
        return reg

    def with_bincount_table() -> np.ndarray:
        table = np.bincount(index * 32 + rank, minlength=m * 32).reshape(m, 32)
        return np.where(table > 0, np.arange(32, dtype=np.uint8), 0).max(axis=1).astype(np.uint8)

    def with_sort() -> np.ndarray:
        key = np.sort(index.astype(np.int64) * 32 + rank)
        last = np.r_[key[1:] >> 5 != key[:-1] >> 5, True]
        reg = np.zeros(m, np.uint8)
        reg[key[last] >> 5] = key[last] & 31
        return reg

    reference = with_maximum_at()
    for fn in (with_maximum_at, with_bincount_table, with_sort):
        assert np.array_equal(fn(), reference)
        row(fn.__name__, n, best_of(fn, 3))


def bench_small_batches() -> None:
    for k in (1, 10, 100, 10_000):
        arrow = ids(k)
        as_list = arrow.to_pylist()
        h = hash32(arrow)
        cells = []
        for values in (arrow, as_list):
            cells.append(best_of(lambda v=values: update(v), 50))
        cells.append(best_of(lambda h=h: update_hashes(h), 50))
        print(
            f"{k:>7,d} values: update(arrow) {cells[0] * 1e6:7.1f} us, update(list) "
            f"{cells[1] * 1e6:7.1f} us, update_hashes {cells[2] * 1e6:6.1f} us per call"
        )


def bench_datasketch(n: int) -> None:
    arrow = ids(n)
    values = [v.encode() for v in arrow.to_pylist()]
    ours = update(arrow)
    for name, hashfunc in (
        ("datasketch, default sha1_hash32", datasketch.hashfunc.sha1_hash32),
        ("datasketch, hashfunc=ours", datasketch_hashfunc),
    ):
        t = best_of(lambda f=hashfunc: ds_per_value(values, f), 3)
        d = ds_per_value(values, hashfunc)
        same = "  (registers == ours)" if np.array_equal(d.reg, ours.registers) else ""
        row(name, n, t, f"{ds_count(d) / n - 1:+9.3%}{same}")
        print(f"{'':38s} -> 1e7 values would take ~{t * 1e7 / n:.0f} s (extrapolated)")
    row(
        "ours, update(pyarrow array)",
        n,
        best_of(lambda: update(arrow), 5),
        f"{ours.count() / n - 1:+9.3%}",
    )


def bench_accuracy(top: int) -> None:
    big = ids(10**top)
    print(f"{'n':>10s} {'count() err':>12s} {'estimate() err':>15s}")
    for e in range(2, top + 1):
        s = update(big.slice(0, 10**e))
        n = 10**e
        print(f"{n:>10,d} {s.count() / n - 1:>+12.3%} {s.estimate() / n - 1:>+15.3%}")
    # Around 2.5 m = 40 960 the classic estimator switches from linear counting to the raw one.
    for n in (30_000, 40_000, 41_000, 50_000, 70_000):
        s = update(big.slice(0, n))
        print(f"{n:>10,d} {s.count() / n - 1:>+12.3%} {s.estimate() / n - 1:>+15.3%}")


def bench_sizes() -> None:
    for n in (0, 1, 100, 1000, 3000, 10**6):
        s = update(ids(n))
        nz = int(np.count_nonzero(s.registers))
        print(f"{n:>10,d} users: {len(s.to_bytes()):>6,d} bytes ({nz} non-zero registers)")
    print(f"datasketch serialize(): {datasketch.HyperLogLog(p=14).bytesize():,d} bytes, always")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 1e6 values, fewer repeats")
    args = parser.parse_args()
    print(machine())
    print("p = 14; times are the best of 3 (1e7) or 5 runs\n")

    print("== Our vectorised update: one call per column ==")
    print(f"{'input':38s} {'n':>10s} {'time':>10s} {'rate':>11s}  {'count err':>9s}")
    bench_update(10**6, 5, with_list=True)
    if not args.quick:
        bench_update(10**7, 3, with_list=False)
    print()
    print("== Register reduction alternatives (precomputed index/rank, p = 14) ==")
    bench_reductions(10**6 if args.quick else 10**7)
    print()
    print("== Small batches (a window with few users): cost per call ==")
    bench_small_batches()
    print()
    print("== datasketch updated per value (one Python call each) vs ours ==")
    bench_datasketch(20_000 if args.quick else 100_000)
    print()
    print("== Accuracy at p = 14 (bound 3 x 1.04 / 128 = 2.44 %) ==")
    bench_accuracy(6 if args.quick else 7)
    print()
    print("== Serialised size (to_bytes) at p = 14 ==")
    bench_sizes()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
