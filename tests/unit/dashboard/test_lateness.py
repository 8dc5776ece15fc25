"""Lateness as tables (dashboard/lateness.py), against ground truth computed here."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.lateness import digest_histogram, lateness_frame, what_if_frame
from sketches.tdigest import TDigest
from tests.unit.dashboard.fixtures import T, W
from tests.unit.dashboard.fixtures import plain_row as row
from tidegauge.core.store import LatenessResult

pytestmark = pytest.mark.unit


def test_lateness_frame_sums_counts_and_keeps_the_highest_revision() -> None:
    rows = [
        row(T, "*", 10, late=4, stragglers=3, duplicates=2, revision=2),
        row(T, "api", 5, late=1, stragglers=3, duplicates=2, revision=2),
        row(T, "web", 5, late=3, stragglers=0, revision=0),
        row(T + W, "*", 10),
    ]
    cols = ["late", "stragglers", "duplicates", "revision"]
    assert lateness_frame(rows)[cols].values.tolist() == [[4, 3, 2, 2], [0, 0, 0, 0]]
    picked = lateness_frame(rows, ["api", "web"])
    assert picked[cols].values.tolist() == [[4, 3, 2, 2]]


def test_digest_histogram_matches_a_histogram_of_the_raw_values() -> None:
    rng = np.random.default_rng(5)
    values = rng.exponential(2000.0, 50_000)
    digest = TDigest()
    digest.update(values)
    hist = digest_histogram(digest, bins=20)
    assert hist["count"].sum() == pytest.approx(len(values))
    truth, _ = np.histogram(values, bins=20, range=(values.min(), values.max()))
    # centroid means stand in for their values: each bin within 2 % of all values of the truth
    assert np.abs(hist["count"].to_numpy() - truth).max() <= 0.02 * len(values)
    assert digest_histogram(TDigest()).empty


def test_what_if_frame_falls_to_zero_past_the_largest_overdue() -> None:
    overdue = TDigest()
    overdue.update(np.array([0.0] * 50 + [4000.0] * 30 + [9000.0] * 20))
    res = LatenessResult("*", "10000", T, T + W, 1, 200, 20, 50, TDigest(), overdue)
    f = what_if_frame(res)
    assert f["fraction_late"].iloc[0] == pytest.approx(100 / 200)
    assert f["fraction_late"].iloc[-1] == 0.0
    assert (np.diff(f["fraction_late"]) <= 1e-12).all()  # more lateness allowed, fewer late
    mid = f.loc[(f["allowed_lateness_ms"] - 6500).abs().idxmin()]
    assert mid["fraction_late"] == pytest.approx(20 / 200, abs=0.01)  # only the 9 s ones
