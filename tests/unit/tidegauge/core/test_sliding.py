"""Sliding windows' timelines (tidegauge/core/sliding.py) against brute force.

The timeline's peaks are checked against a scan of every interval on the resolution's grid
(`brute_peak`, which tests/unit/jobs/panes/test_windows.py holds the job's panes to as well).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.fixtures import brute_peak
from tidegauge.core.sliding import Frame, Timeline

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("seed", range(30))
def test_peaks_equal_a_scan_of_every_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = int(rng.choice([1, 5, 100]))
    length = r * int(rng.integers(1, 40))
    first = r * int(rng.integers(-20, 20))
    frame = Frame(length, r, first, first + r * int(rng.integers(0, 30)))
    n = int(rng.integers(0, 60))
    times = rng.integers(frame.origin_ms - 3 * r, frame.last_end_ms + 3 * r, n).tolist()
    errors = (rng.random(n) < 0.3).tolist()
    t = Timeline().add(np.array(times, np.int64) // r * r, np.array(errors, bool))
    peaks = t.framed(frame).peaks()
    assert peaks is not None
    assert (peaks.events, peaks.start_ms, peaks.errors, peaks.errors_start_ms) == brute_peak(
        times, errors, frame
    )


def test_a_timeline_is_the_sum_of_its_parts_and_survives_bytes() -> None:
    rng = np.random.default_rng(7)
    times = rng.integers(0, 100_000, 5_000)
    errors = rng.random(5_000) < 0.1
    whole = Timeline().add(times // 10 * 10, errors)
    parts = [Timeline().add(times[i::3] // 10 * 10, errors[i::3]) for i in range(3)]
    assert Timeline.merged(parts) == whole
    assert whole.total == 5_000
    frame = Frame(30_000, 100, 40_100, 50_000)
    framed = whole.framed(frame)
    assert Timeline.from_bytes(framed.to_bytes()) == framed
    assert Timeline.from_bytes(whole.to_bytes()) == whole
    assert Timeline().to_bytes() == b"" and Timeline.from_bytes(b"") == Timeline()
    # the `*` row: framed timelines of one row add up; of two rows they must not
    assert Timeline.merged([framed, framed]).peaks().events == 2 * framed.peaks().events  # type: ignore[union-attr]
    other = whole.framed(Frame(30_000, 100, 50_100, 60_000))
    with pytest.raises(ValueError, match="different frames"):
        Timeline.merged([framed, other])
    with pytest.raises(ValueError):
        Timeline.from_bytes(framed.to_bytes()[:-3])
