"""Benchmark sketches.TDigest against fastdigest (Rust) and tdigest (pure Python) from PyPI.

Prints the machine, then: batch-add throughput on one core, merging 100 digests, query and
serialisation times, and rank errors |F(estimate) - q| at p50 / p99 / p99.9 on the same data.
Every timing is the best of a few runs (the machine may be shared). Not a test; run with

    .venv/bin/pip install fastdigest tdigest      # comparison only, not project dependencies
    .venv/bin/python benchmarks/bench_tdigest.py [--quick]

`tdigest` (PyPI) adds values one by one in Python, so it is fed 100,000 values and its speed is
extrapolated; its rank errors are measured on those 100,000 values against their own exact CDF.
"""

from __future__ import annotations

import os

# One core: keep BLAS / OpenMP pools (unused by the sort, but imported with numpy) at one thread.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402
from sketches.tdigest import DEFAULT_COMPRESSION, TDigest  # noqa: E402

QS = np.array([0.5, 0.99, 0.999])


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def machine() -> str:
    return describe(("numpy", "fastdigest", "tdigest"))


def rank_errors(sorted_data: np.ndarray, estimates: np.ndarray) -> np.ndarray:
    return np.abs(np.searchsorted(sorted_data, estimates, "right") / sorted_data.size - QS)


def fmt_errors(errors: np.ndarray) -> str:
    return "  ".join(f"{e:.1e}" for e in errors)


def ours_feed(data: np.ndarray, batch: int) -> TDigest:
    d = TDigest()
    for start in range(0, data.size, batch):
        d.update(data[start : start + batch])
    return d


def bench_batch_add(data: np.ndarray, sizes: list[int], repeat: int, fd: object) -> None:
    print(f"\n## Batch add, one core (values/s, best of {repeat})")
    print(
        f"{'values':>12} {'batch':>10} {'sketches.TDigest':>18} {'fastdigest(1000)':>18} "
        f"{'fastdigest(100)':>17}"
    )
    for n in sizes:
        x = data[:n]
        for batch in (10_000, 1_000_000):
            ours = best_of(lambda x=x, batch=batch: ours_feed(x, batch), repeat)
            row = f"{n:>12,} {batch:>10,} {n / ours / 1e6:>15.1f} M/s"
            if fd is not None:
                for cap in (1000, 100):

                    def feed(x: np.ndarray = x, batch: int = batch, cap: int = cap) -> None:
                        f = fd.TDigest(max_centroids=cap)  # type: ignore[attr-defined]
                        for start in range(0, x.size, batch):
                            f.batch_update(x[start : start + batch])

                    t = best_of(feed, repeat)
                    row += f" {n / t / 1e6:>14.1f} M/s"
            print(row)
    # Small batches show the fixed per-call cost (no hidden buffer; see the class docstring).
    for batch in (100, 1_000):
        x = data[:200_000]
        t = best_of(lambda x=x, batch=batch: ours_feed(x, batch), repeat)
        print(
            f"{x.size:>12,} {batch:>10,} {x.size / t / 1e6:>15.1f} M/s   "
            f"({t / (x.size / batch) * 1e6:.0f} us per update call)"
        )


def bench_merge(data: np.ndarray, repeat: int, fd: object) -> None:
    parts = np.split(data[:1_000_000], 100)
    ours = [TDigest() for _ in parts]
    for d, p in zip(ours, parts, strict=True):
        d.update(p)
    t_merged = best_of(lambda: TDigest.merged(ours), repeat * 3)

    def pairwise() -> None:
        acc = TDigest()
        for d in ours:
            acc.merge(d)

    t_pairwise = best_of(pairwise, repeat)
    print(f"\n## Merge 100 digests of 10,000 values (best of {repeat * 3})")
    print(f"sketches.TDigest.merged (one sort, one compress): {t_merged * 1e3:8.2f} ms")
    print(f"sketches.TDigest.merge pairwise (100 calls):     {t_pairwise * 1e3:8.2f} ms")
    if fd is not None:
        for cap in (1000, 100):
            theirs = [fd.TDigest.from_values(p, max_centroids=cap) for p in parts]  # type: ignore[attr-defined]
            t = best_of(lambda theirs=theirs: fd.merge_all(theirs), repeat * 3)  # type: ignore[attr-defined]
            print(
                f"fastdigest.merge_all (max_centroids={cap}):{' ' * (9 - len(str(cap)))}"
                f"{t * 1e3:8.2f} ms"
            )


def bench_queries(data: np.ndarray, repeat: int, fd: object) -> None:
    d = TDigest()
    d.update(data[:1_000_000])
    qs = np.linspace(0.0, 1.0, 1000)
    loops = 2000
    t_scalar = best_of(lambda: [d.quantile(0.99) for _ in range(loops)], repeat) / loops
    t_vec = best_of(lambda: d.quantile(qs), repeat * 10)
    t_cdf = best_of(lambda: [d.cdf(1.0) for _ in range(loops)], repeat) / loops
    blob = d.to_bytes()
    t_ser = best_of(lambda: [d.to_bytes() for _ in range(loops)], repeat) / loops
    t_de = best_of(lambda: [TDigest.from_bytes(blob) for _ in range(loops)], repeat) / loops
    print(f"\n## Queries on a digest of 1,000,000 values ({len(d)} centroids)")
    print(f"quantile(0.99), scalar:        {t_scalar * 1e6:7.1f} us")
    print(f"quantile(1000 qs), vectorised: {t_vec * 1e6:7.1f} us ({t_vec / 1000 * 1e9:.0f} ns/q)")
    print(f"cdf(x), scalar:                {t_cdf * 1e6:7.1f} us")
    print(f"to_bytes:                      {t_ser * 1e6:7.1f} us ({len(blob)} bytes)")
    print(f"from_bytes:                    {t_de * 1e6:7.1f} us")
    if fd is not None:
        f = fd.TDigest.from_values(data[:1_000_000])  # type: ignore[attr-defined]
        t_f = best_of(lambda: [f.quantile(0.99) for _ in range(loops)], repeat) / loops
        t_fv = best_of(lambda: f.quantile_vec(qs), repeat * 10)
        print(
            f"fastdigest(1000) quantile(0.99): {t_f * 1e6:5.1f} us; 1000 qs: {t_fv * 1e6:.1f} us;"
            f" to_bytes {len(f.to_bytes())} bytes ({f.n_centroids} centroids)"
        )


def bench_accuracy(datasets: dict[str, np.ndarray], fd: object, td: object) -> None:
    print("\n## Rank error |F(estimate) - q| at p50  p99  p99.9 (10^6 values, batches of 10,000)")
    print("   bounds we test:  1.0e-02  2.0e-03  5.0e-04")
    for name, data in datasets.items():
        truth = np.sort(data)
        ours = ours_feed(data, 10_000)
        parts = [TDigest() for _ in range(100)]
        for d, p in zip(parts, np.split(data, 100), strict=True):
            d.update(p)
        merged = TDigest.merged(parts)
        print(f"{name}:")
        print(
            f"  sketches.TDigest({DEFAULT_COMPRESSION:g}) single  {len(ours):4d} c  "
            f"{fmt_errors(rank_errors(truth, ours.quantile(QS)))}"
        )
        print(
            f"  sketches.TDigest({DEFAULT_COMPRESSION:g}) merged  {len(merged):4d} c  "
            f"{fmt_errors(rank_errors(truth, merged.quantile(QS)))}"
        )
        if fd is not None:
            for cap in (1000, 100):
                f = fd.TDigest(max_centroids=cap)  # type: ignore[attr-defined]
                for p in np.split(data, 100):
                    f.batch_update(p)
                est = np.asarray(f.quantile_vec(QS))
                label = f"fastdigest({cap})"
                print(f"  {label:<30} {f.n_centroids:4d} c  {fmt_errors(rank_errors(truth, est))}")
        if td is not None:
            sub = data[:100_000]
            t = td.TDigest()  # type: ignore[attr-defined]
            t.batch_update(sub)
            t.compress()
            est = np.array([t.percentile(100 * q) for q in QS])
            print(
                f"  {'tdigest (PyPI), 1e5 values':<30} {len(t):4d} c  "
                f"{fmt_errors(rank_errors(np.sort(sub), est))}"
            )


def bench_pypi_tdigest(data: np.ndarray, td: object) -> None:
    sub = data[:100_000]
    t = td.TDigest()  # type: ignore[attr-defined]
    start = time.perf_counter()
    t.batch_update(sub)
    elapsed = time.perf_counter() - start
    rate = sub.size / elapsed
    print(
        f"\n## tdigest (PyPI) batch_update: {rate / 1e3:.0f} k values/s on 100,000 values "
        f"(extrapolated: 10^6 values would take ~{1e6 / rate:.0f} s, 10^7 ~{1e7 / rate:.0f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^6 values only, fewer repeats")
    args = parser.parse_args()
    repeat = 2 if args.quick else 3
    sizes = [1_000_000] if args.quick else [1_000_000, 10_000_000]

    try:
        import fastdigest as fd
    except ImportError:
        fd = None
        print("fastdigest not installed: skipping its columns (pip install fastdigest)")
    try:
        import tdigest as td
    except ImportError:
        td = None
        print("tdigest not installed: skipping it (pip install tdigest)")

    print("# sketches.TDigest benchmark\n")
    print(machine())
    if fd is not None:
        print(f"fastdigest: {getattr(fd, '__version__', '?')}")
    rng = np.random.default_rng(12345)
    data = rng.lognormal(0.0, 1.0, max(sizes))
    print(f"data: lognormal(0, 1), float64; compression {DEFAULT_COMPRESSION:g}")

    bench_batch_add(data, sizes, repeat, fd)
    bench_merge(data, repeat, fd)
    bench_queries(data, repeat, fd)
    if td is not None:
        bench_pypi_tdigest(data, td)
    datasets = {
        "uniform": rng.uniform(0.0, 1.0, 1_000_000),
        "exponential": rng.exponential(1.0, 1_000_000),
        "lognormal(sigma=1)": data[:1_000_000],
        "pareto(a=1.5)": rng.pareto(1.5, 1_000_000) + 1.0,
    }
    bench_accuracy(datasets, fd, td)


if __name__ == "__main__":
    main()
