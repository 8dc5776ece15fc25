"""Helpers shared by the tests of tidegauge/core's aggregates and metrics."""

from __future__ import annotations

import math

import numpy as np

from sketches.tdigest import TDigest
from tidegauge.core.window_agg import WindowAgg

NAN = math.nan


def f64(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def users(*values: str | None) -> np.ndarray:
    return np.array(values, dtype=object)


def agg_of(latency: np.ndarray, status: np.ndarray, user_ids: np.ndarray | None) -> WindowAgg:
    a = WindowAgg()
    a.add(latency, status, user_ids)
    return a


def exact_values(d: TDigest) -> list[float]:
    """The values of a digest that keeps every value (all centroid weights 1), sorted."""
    means, weights = d.centroids
    assert (weights == 1.0).all(), "digest is not exact: use at most 25 values"
    return sorted(means.tolist())
