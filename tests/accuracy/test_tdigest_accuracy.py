"""TDigest accuracy on a million values per distribution, with the tolerances we promise.

Rank error is ``|F(estimate) - q|`` where F is the exact empirical CDF of the data (a
``searchsorted`` in the sorted data). Bounds: 0.01 at p50, 0.002 at p99 and 0.0005 at p99.9 (the
same bounds at p1 / p0.1), for one digest fed the way the job feeds it (100 batches of 10,000)
for 100 digests of the parts merged with ``TDigest.merged`` and merged one by one, and for
small batches (the one-pass path of ``update``). At the default compression the
measured worst errors are about an eighth of these bounds (docs/sketches.md). Seeded; ~2 s.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from sketches import TDigest

N = 1_000_000
PARTS = 100
SEED = 20_261_101
BOUNDS = {0.5: 0.01, 0.99: 0.002, 0.999: 0.0005, 0.01: 0.002, 0.001: 0.0005}

DISTRIBUTIONS: dict[str, Callable[[np.random.Generator], np.ndarray]] = {
    "uniform": lambda rng: rng.uniform(0.0, 1.0, N),
    "exponential": lambda rng: rng.exponential(1.0, N),
    "lognormal": lambda rng: rng.lognormal(0.0, 1.0, N),
    "pareto": lambda rng: rng.pareto(1.5, N) + 1.0,  # Pareto(x_m=1, a=1.5): infinite variance
}


class Case:
    """The data of one distribution (sorted, for the exact CDF) and its two digests."""

    def __init__(self, index: int, make: Callable[[np.random.Generator], np.ndarray]) -> None:
        data = make(np.random.default_rng([SEED, index]))
        self.sorted = np.sort(data)
        self.single = TDigest()
        for batch in np.split(data, PARTS):
            self.single.update(batch)
        parts = []
        for batch in np.split(data, PARTS):
            part = TDigest()
            part.update(batch)
            parts.append(part)
        self.merged = TDigest.merged(parts)
        self.pairwise = TDigest()
        for part in parts:
            self.pairwise.merge(part)

    def exact_cdf(self, x: np.ndarray | float) -> np.ndarray:
        return np.searchsorted(self.sorted, x, "right") / N

    def digest(self, mode: str) -> TDigest:
        return {"single": self.single, "merged": self.merged, "pairwise": self.pairwise}[mode]


@pytest.fixture(scope="module", params=list(DISTRIBUTIONS))
def case(request: pytest.FixtureRequest) -> Case:
    name = request.param
    return Case(list(DISTRIBUTIONS).index(name), DISTRIBUTIONS[name])


@pytest.mark.parametrize("mode", ["single", "merged", "pairwise"])
def test_quantile_rank_error(case: Case, mode: str) -> None:
    qs = np.array(list(BOUNDS))
    estimates = case.digest(mode).quantile(qs)
    errors = np.abs(case.exact_cdf(estimates) - qs)
    bounds = np.array(list(BOUNDS.values()))
    assert np.all(errors <= bounds), dict(zip(qs.tolist(), errors.tolist(), strict=True))


@pytest.mark.parametrize("mode", ["single", "merged", "pairwise"])
def test_cdf_error_at_exact_quantiles(case: Case, mode: str) -> None:
    qs = np.array(list(BOUNDS))
    xs = case.sorted[(qs * N).astype(np.int64)]
    errors = np.abs(case.digest(mode).cdf(xs) - case.exact_cdf(xs))
    bounds = np.array(list(BOUNDS.values()))
    assert np.all(errors <= bounds), dict(zip(qs.tolist(), errors.tolist(), strict=True))


@pytest.mark.parametrize("mode", ["single", "merged", "pairwise"])
def test_exact_statistics_survive(case: Case, mode: str) -> None:
    d = case.digest(mode)
    assert d.count == N
    assert d.min == case.sorted[0] and d.max == case.sorted[-1]
    assert d.sum == pytest.approx(float(np.sum(case.sorted)), rel=1e-12)
    assert len(d) <= 201


@pytest.mark.parametrize("batch", [100, 1_000, 5_000])
@pytest.mark.parametrize("name", ["lognormal", "pareto"])
def test_small_batches(name: str, batch: int) -> None:
    # Batches up to 4096 values take update()'s one-pass path, larger ones the two-stage path.
    n = 200_000
    data = DISTRIBUTIONS[name](np.random.default_rng([SEED, 99]))[:n]
    d = TDigest()
    for start in range(0, n, batch):
        d.update(data[start : start + batch])
    truth = np.sort(data)
    qs = np.array(list(BOUNDS))
    errors = np.abs(np.searchsorted(truth, d.quantile(qs), "right") / n - qs)
    bounds = np.array(list(BOUNDS.values()))
    assert np.all(errors <= bounds), dict(zip(qs.tolist(), errors.tolist(), strict=True))
    assert d.count == n and d.min == truth[0] and d.max == truth[-1]
