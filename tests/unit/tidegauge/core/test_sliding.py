"""Sliding windows' timelines (tidegauge/core/sliding.py) against brute force.

The timeline's peaks are checked against a scan of every interval on the resolution's grid
(`brute_peak`, which tests/unit/jobs/panes/test_windows.py holds the job's panes to as well).
"""

from __future__ import annotations

import struct
import zlib

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


def _v1_bytes(t: Timeline) -> bytes:
    """Version 1 of a timeline, written here from its layout: a bool, the frame, zlib'd widths."""
    f = t.frame or Frame(1, 1, 0, 0)
    head = struct.pack(
        "<?qqqqI", t.frame is not None, f.length_ms, f.resolution_ms, f.first_end_ms,
        f.last_end_ms, len(t),
    )  # fmt: skip
    starts = np.diff(t.starts, prepend=0).astype("<i8").tobytes()
    body = starts + t.counts.astype("<u4").tobytes() + t.errors.astype("<u4").tobytes()
    return head + zlib.compress(body)


def _row(events: int, seed: int, start: int = 1_795_000_000_000) -> Timeline:
    """A 60 s sliding row at 100 ms holding `events` events, 5 % of them errors."""
    rng = np.random.default_rng(seed)
    times = start + rng.integers(0, 60_000, events)
    pane = Timeline().add(times // 100 * 100, rng.random(events) < 0.05)
    return pane.framed(Frame(60_000, 100, start + 50_100, start + 60_000))


@pytest.mark.parametrize("events", [0, 1, 3, 100, 5_000])
def test_every_timeline_reads_back_in_both_versions(events: int) -> None:
    framed = _row(events, seed=events)
    pane = Timeline(framed.starts, framed.counts, framed.errors)
    for t in (framed, pane):
        assert Timeline.from_bytes(t.to_bytes()) == t
        if len(t) or t.frame is not None:
            assert Timeline.from_bytes(_v1_bytes(t)) == t  # a store or checkpoint written before


def test_a_row_of_100_events_takes_about_a_byte_a_bucket() -> None:
    rows = [_row(100, seed) for seed in range(20)]
    new = [len(t.to_bytes()) for t in rows]
    old = [len(_v1_bytes(t)) for t in rows]
    assert max(new) <= 130 and np.mean(new) <= np.mean(old) / 2, (new, old)


def test_timelines_the_varints_cannot_hold_keep_version_1() -> None:
    far = Timeline(np.array([0, 1 << 40]), np.array([1, 2]), np.array([0, 1]))  # a year apart
    off_grid = Timeline(
        np.array([40_150]), np.array([3]), np.array([1]), Frame(30_000, 100, 40_100, 50_000)
    )
    for t in (far, off_grid):
        data = t.to_bytes()
        assert data[0] in (0, 1) and Timeline.from_bytes(data) == t


@pytest.mark.parametrize("cut", [1, 5, 9, 12])
def test_a_cut_or_foreign_timeline_is_refused(cut: int) -> None:
    data = _row(100, seed=1).to_bytes()
    with pytest.raises(ValueError, match="timeline"):
        Timeline.from_bytes(data[:cut])
    with pytest.raises(ValueError, match="timeline: unknown marker 7"):
        Timeline.from_bytes(b"\x07" + data[1:])
