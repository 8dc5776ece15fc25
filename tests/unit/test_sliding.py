"""Sliding windows against brute force: every interval of every event, counted directly.

The timeline's peaks are checked against a scan of every interval on the resolution's grid;
the job's pane logic (jobs/panes/windows.py) against a replay of randomized out-of-order streams
with late events, batch by batch: each row's final peak and rolling count must equal what the events
that arrived while the row was open give, counted one by one.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from jobs.panes.dedup import horizons
from jobs.panes.windows import ServiceWindows
from tidegauge.core.config import job_config_from_args
from tidegauge.core.metrics import WindowAgg
from tidegauge.core.sliding import Frame, Timeline, frame_of
from tidegauge.core.windows import (
    SLIDING_NEEDS_STEP,
    WindowSpec,
    advance_watermark,
    default_resolution,
)

pytestmark = pytest.mark.unit


def brute_peak(times: list[int], errors: list[bool], frame: Frame) -> tuple[int, int, int, int]:
    """(events, start, errors, start) of the busiest interval, by counting each one."""
    best = [(-1, 0), (-1, 0)]
    for e in range(frame.first_end_ms, frame.last_end_ms + 1, frame.resolution_ms):
        lo = e - frame.length_ms
        n = sum(lo <= t < e for t in times)
        k = sum(lo <= t < e and err for t, err in zip(times, errors, strict=True))
        if n > best[0][0]:
            best[0] = (n, lo)
        if k > best[1][0]:
            best[1] = (k, lo)
    return best[0][0], best[0][1], best[1][0], best[1][1]


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


def test_specs_parse_and_refuse_what_cannot_be_sliding() -> None:
    spec = WindowSpec.parse("1m/sliding", 10_000)
    assert (spec.kind, spec.size_ms, spec.slide_ms, spec.resolution_ms) == (
        "sliding",
        60_000,
        10_000,
        100,
    )
    assert WindowSpec.from_key(spec.key) == spec and spec.key == "sl60000-10000-100"
    assert WindowSpec.parse("60s/sliding@1ms", 10_000).resolution_ms == 1
    assert default_resolution(60_000, 10_000) == 100
    assert default_resolution(2_050, 2_050) == 50
    with pytest.raises(ValueError, match="sliding"):
        WindowSpec.parse("60s/sliding")  # no step: the job's primary window gives it
    # any size: rows end where the primary windows end, wherever that puts their starts
    odd = WindowSpec.parse("25s/sliding", 10_000)
    assert (odd.anchor_ms, odd.windows_containing(20_000, 5_000)) == (5_000, [5_000, 15_000])
    assert odd.end(5_000) % 10_000 == 0 and odd.last_end_containing(29_999) == 50_000
    small = WindowSpec.parse("4s/sliding", 10_000)  # shorter than its step: busiest 4 s of 10 s
    assert small.windows_containing(16_000, 2_000) == [16_000] and small.end(16_000) == 20_000
    assert small.windows_containing(10_000, 2_000) == []  # no row's rolling 4 s holds [10, 12)
    with pytest.raises(ValueError, match="must divide"):
        WindowSpec.parse("60s/sliding@7ms", 10_000)
    with pytest.raises(ValueError, match="only a sliding window"):
        WindowSpec.parse("60s/10s@1ms")


def _config(*windows: str) -> object:
    import argparse

    from jobs.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--checkpoint", "ckpt", *(a for w in windows for a in ("--window", w))])
    return job_config_from_args(args)


def test_the_job_takes_sliding_windows_after_a_tumbling_one() -> None:
    cfg = _config("10s", "60s/sliding", "5m/sliding@1s")
    keys = [w.key for w in cfg.windows]  # type: ignore[attr-defined]
    assert keys == ["10000", "sl60000-10000-100", "sl300000-10000-1000"]
    with pytest.raises(ValueError) as e:
        _config("60s/sliding")
    assert str(e.value) == SLIDING_NEEDS_STEP


# --- the job's panes against a replay --------------------------------------------------------


def _stream(rng: np.random.Generator, n: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of (event times, statuses): a steady clock with bursts, jitter and late events."""
    t = 0
    while n > 0:
        k = int(min(n, rng.integers(1, 120)))
        n -= k
        t += int(rng.integers(500, 4_000))
        times = t + rng.integers(-6_000, 1_000, k)  # out of order, some far behind
        burst = rng.random(k) < 0.2
        times[burst] = t - int(rng.integers(0, 3_000))  # many events in one ms: a busy moment
        status = np.where(rng.random(k) < 0.15, 503, 200)
        yield times.astype(np.int64), status.astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_every_row_equals_the_events_that_arrived_while_it_was_open(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tumbling = WindowSpec.tumbling(2_000)
    size = int(rng.choice([1_000, 3_000, 6_000, 7_000]))  # shorter, longer, odd multiples
    sliding = WindowSpec.sliding(size, 2_000, int(rng.choice([1, 10, 100])))
    lateness = int(rng.integers(0, 5_000))
    sw = ServiceWindows((tumbling, sliding))
    watermark = 0
    seen: list[tuple[int, int, int]] = []  # (event time, status, watermark it arrived under)
    rows: dict[int, WindowAgg] = {}
    for times, status in _stream(rng, 1_500):
        added = sw.add(
            times, np.full(len(times), 5.0), status, np.full(len(times), "u", object), watermark
        )
        for (spec, start), agg in sw.windows(added.touched, watermark).items():
            if spec == sliding:
                rows[start] = WindowAgg.from_bytes(agg.to_bytes())
        seen += [(t, s, watermark) for t, s in zip(times.tolist(), status.tolist(), strict=True)]
        sw.evict(watermark)
        watermark = advance_watermark(watermark, times.tolist(), lateness)

    assert len(rows) > 20
    for start, agg in rows.items():
        end = sliding.end(start)
        open_ = [(t, s) for t, s, wm in seen if wm < end]  # arrived while the row was open
        frame = frame_of(sliding, start)
        in_reach = [(t, s) for t, s in open_ if frame.origin_ms <= t < end]
        want = brute_peak([t for t, _ in in_reach], [s >= 500 for _, s in in_reach], frame)
        m = agg.metrics(sliding.size_ms)
        got = (m["peak_events"], m["peak_start"], m["peak_errors"], m["peak_errors_start"])
        assert got == want, (start, got, want)
        assert m["count"] == sum(start <= t < end for t, _ in open_)
    # every row with events in its reach while it was open was emitted
    starts = {
        end - size  # rows ending in (t, t + size + step]: their peak intervals reach t
        for t, _, wm in seen
        for end in range(t - t % 2_000 + 2_000, t + size + 2_001, 2_000)
        if wm < end
    }
    assert starts <= set(rows)


def test_dedup_keeps_ids_as_long_as_a_peak_can_take_the_event() -> None:
    sliding = WindowSpec.sliding(6_000, 2_000, 100)
    at = np.array([0, 1_999, 2_000], np.int64)
    got = horizons(at, np.ones(3, bool), [WindowSpec.tumbling(2_000), sliding])
    assert got.tolist() == [8_000, 8_000, 10_000]  # last rolling end + one step


def test_a_window_text_finds_its_stored_spec() -> None:
    from tidegauge.alerts.evaluator import _spec_of
    from tidegauge.alerts.rules import parse_rule
    from tidegauge.core.windows import match_spec

    tumbling, hopping = WindowSpec.tumbling(10_000), WindowSpec(60_000, 10_000)
    fine, coarse = WindowSpec.sliding(60_000, 10_000, 1), WindowSpec.sliding(60_000, 10_000)
    stored = [tumbling, hopping, coarse, fine]
    assert match_spec("10s", stored) == tumbling
    assert match_spec("1m/10s", stored) == hopping and match_spec("60000-10000", stored) == hopping
    assert match_spec("60s/sliding", stored) == coarse  # the first of that size
    assert match_spec("60s/sliding@1ms", stored) == fine
    assert match_spec("30s/sliding", stored) is None and match_spec("20s", stored) is None
    # an alert rule's `in SPEC` reads the same way (it once compared the text with the key)
    assert _spec_of(parse_rule("p99 > 800 for 3 in 60s/10s"), stored) == hopping
    assert _spec_of(parse_rule("p99 > 800 in 1m/sliding@1ms"), stored) == fine
    with pytest.raises(ValueError, match="is not a window"):
        parse_rule("p99 > 800 in soon")
