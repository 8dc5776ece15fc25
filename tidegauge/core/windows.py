"""Window and watermark math on epoch-millisecond integers. Pure: no Spark, no I/O.

The job uses these functions on executors, the sink uses them for Redis keys, and the tests use
them to compute expected answers, so all three agree by construction. The rules mirror Spark's:

    tumbling window of size W holding t:    [t - t mod W, t - t mod W + W)

    watermark after a batch:                max(previous watermark, max event time seen - L)
                                            (starts at 0; never goes back)

    a row is late (dropped):                window end <= watermark in force for its batch

    the frontier of a batch:                max event time seen before it = watermark + L
                                            (unknown before the first watermark)

    a row is a straggler (accepted, but     watermark < window end <= frontier
    its window was already emitted):

          window [10s, 20s)                     watermark in force = 26s
    ----|=========|---------------------------------|-------> event time
       10s       20s                               26s
                  ^ end 20s <= 26s: an event at 11s arriving now is late
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

__all__ = [
    "ARRIVAL_DOMAINS",
    "TIME_DOMAINS",
    "LATE",
    "ON_TIME",
    "STRAGGLER",
    "SLIDING_NEEDS_STEP",
    "WindowSpec",
    "advance_watermark",
    "default_resolution",
    "is_sliding_text",
    "match_spec",
    "classify",
    "classify_many",
    "late_mask",
    "frontier",
    "pane_size",
    "primary_size",
    "is_late",
    "tumbling_start",
    "tumbling_starts",
    "window_end",
]

#: The three clocks an event can be counted by (docs/time.md): its own time, when the job
#: processed it (its micro-batch's timestamp) and when the broker received it (the record's).
TIME_DOMAINS = ("event", "processing", "broker")
#: The clocks of the arrival series the job keeps beside its event-time windows.
ARRIVAL_DOMAINS = TIME_DOMAINS[1:]


def tumbling_start(ts_ms: int, size_ms: int) -> int:
    """Start of the tumbling window of `size_ms` that holds `ts_ms` (floor, also for negatives)."""
    if size_ms <= 0:
        raise ValueError("window size must be positive")
    return ts_ms - ts_ms % size_ms


def tumbling_starts(ts_ms: npt.NDArray[np.int64], size_ms: int) -> npt.NDArray[np.int64]:
    """Vectorised `tumbling_start` for a whole column of event times."""
    if size_ms <= 0:
        raise ValueError("window size must be positive")
    ts = np.asarray(ts_ms, dtype=np.int64)
    return ts - np.mod(ts, size_ms)


def window_end(start_ms: int, size_ms: int) -> int:
    """Exclusive end of a window."""
    return start_ms + size_ms


def is_late(window_end_ms: int, watermark_ms: int) -> bool:
    """Spark's rule for windowed aggregation: a row whose window ended at or before the watermark.

    The watermark is the one in force when the row's micro-batch started (computed from the
    batches before it), not one that the row itself moves.
    """
    return window_end_ms <= watermark_ms


#: Arrival classes of an event for one window (see `classify`).
ON_TIME, STRAGGLER, LATE = 0, 1, 2


def frontier(watermark_ms: int, allowed_lateness_ms: int) -> int | None:
    """Max event time seen before a batch, from the watermark in force for it (None before any).

    Spark's watermark is max event time seen - allowed lateness, and starts at 0 before the
    first batch with data: a watermark of 0 means nothing has been seen yet.
    """
    if watermark_ms <= 0:
        return None
    return watermark_ms + allowed_lateness_ms


def classify(window_end_ms: int, watermark_ms: int, frontier_ms: int | None) -> int:
    """ON_TIME, STRAGGLER or LATE for an event of the window ending at `window_end_ms`.

    Late: the watermark in force has passed the window end (the window is closed, the event is
    dropped from it). Straggler: accepted, but the frontier (max event time seen before the
    batch) had already passed the window end, so the window was emitted without it and this
    batch corrects it. On time: neither.

        window [10s, 20s)
        ----|=========|----------|------------|---> event time
           10s       20s     watermark    frontier
                      ^ end <= watermark: late
        watermark < end <= frontier: straggler; end > frontier: on time
    """
    if is_late(window_end_ms, watermark_ms):
        return LATE
    if frontier_ms is not None and window_end_ms <= frontier_ms:
        return STRAGGLER
    return ON_TIME


def classify_many(
    window_end_ms: npt.NDArray[np.int64], watermark_ms: int, frontier_ms: int | None
) -> npt.NDArray[np.int64]:
    """Vectorised `classify`: ON_TIME, STRAGGLER or LATE for each window end of a column."""
    ends = np.asarray(window_end_ms, dtype=np.int64)
    out = np.full(len(ends), ON_TIME, dtype=np.int64)
    if frontier_ms is not None:
        out[ends <= frontier_ms] = STRAGGLER
    out[late_mask(ends, watermark_ms)] = LATE
    return out


def late_mask(window_end_ms: npt.NDArray[np.int64], watermark_ms: int) -> npt.NDArray[np.bool_]:
    """Vectorised `is_late` for a column of window ends."""
    return np.asarray(window_end_ms, dtype=np.int64) <= watermark_ms


def advance_watermark(
    watermark_ms: int, event_times_ms: Iterable[int], allowed_lateness_ms: int
) -> int:
    """The watermark after a batch with these event times; it never moves backwards."""
    latest = max(event_times_ms, default=None)
    if latest is None:
        return watermark_ms
    return max(watermark_ms, latest - allowed_lateness_ms)


@dataclass(frozen=True)
class WindowSpec:
    """A window kind and its sizes in ms: tumbling, hopping, sliding or sessions.

    Tumbling: `slide` = `size`; hopping: `slide` < `size`; sliding: `resolution_ms` > 0, a row
    per `slide` (the primary window); sessions: `gap_ms` > 0.

    Hopping windows start at multiples of `slide` and last `size`; the job builds them by merging
    panes (tumbling windows of `pane_size` of all specs), never by re-reading events:

        size 30s, slide 10s, panes of 10s
        panes    |p0 |p1 |p2 |p3 |p4 |
        window   [p0  p1  p2]
        window       [p1  p2  p3]
        window           [p2  p3  p4]
    """

    size_ms: int
    slide_ms: int
    #: > 0 for session results: sessions (per user, closed after `gap_ms` of silence) counted
    #: in tumbling buckets of `size_ms` by the time of their last event.
    gap_ms: int = 0
    #: A roll-up tier's windows (tidegauge/core/retention.py): tumbling, merged from the
    #: smallest tumbling spec's windows after they closed; stored under their own key.
    rollup: bool = False
    #: > 0 for a sliding window (tidegauge/core/sliding.py): every interval of `size_ms`, its
    #: busiest one counted at this resolution; one row per step (`slide_ms`, the job's primary
    #: window), holding the rolling aggregate of [end - size, end) and the peak of the
    #: intervals ending inside (end - step, end].
    resolution_ms: int = 0

    def __post_init__(self) -> None:
        if self.rollup and (self.gap_ms or self.slide_ms != self.size_ms):
            raise ValueError("roll-up windows are tumbling")
        if self.gap_ms < 0:
            raise ValueError("session gap must be positive")
        if self.gap_ms and self.slide_ms != self.size_ms:
            raise ValueError("session results are bucketed in tumbling windows")
        if self.size_ms <= 0:
            raise ValueError("window size must be positive")
        if not 0 < self.slide_ms <= self.size_ms and not (self.resolution_ms and self.slide_ms > 0):
            raise ValueError(
                f"slide must be in (0, size]: slide {self.slide_ms} ms, size {self.size_ms} ms"
            )
        if self.resolution_ms:
            r = self.resolution_ms
            if r < 0 or self.rollup or self.gap_ms:
                raise ValueError("a sliding window is neither a roll-up nor a session")
            if self.size_ms % r or self.slide_ms % r:
                raise ValueError(
                    f"a sliding window's resolution ({r} ms) must divide its size "
                    f"({self.size_ms} ms) and its step ({self.slide_ms} ms)"
                )

    @classmethod
    def tumbling(cls, size_ms: int) -> WindowSpec:
        """Windows of `size_ms` that do not overlap."""
        return cls(size_ms, size_ms)

    @classmethod
    def rollup_of(cls, size_ms: int) -> WindowSpec:
        """Roll-ups of `size_ms`: merges of finer tumbling windows (a retention tier)."""
        return cls(size_ms, size_ms, rollup=True)

    @classmethod
    def session(cls, gap_ms: int, bucket_ms: int) -> WindowSpec:
        """Per-user sessions with this gap, reported per `bucket_ms` of session end time."""
        return cls(bucket_ms, bucket_ms, gap_ms)

    @classmethod
    def sliding(cls, size_ms: int, step_ms: int, resolution_ms: int | None = None) -> WindowSpec:
        """Sliding windows of `size_ms`, a row per `step_ms`, peaks at `resolution_ms`.

        The default resolution is 100 ms, or the largest that divides size and step if 100 ms
        does not (`default_resolution`).
        """
        r = default_resolution(size_ms, step_ms) if resolution_ms is None else resolution_ms
        if r <= 0:
            raise ValueError("a sliding window's resolution must be positive")
        return cls(size_ms, step_ms, resolution_ms=r)

    @classmethod
    def parse(cls, text: str, step_ms: int | None = None) -> WindowSpec:
        """Parse "10s" (tumbling), "60s/10s" (size/slide, hopping) or "60s/sliding[@RES]".

        A sliding window's step is the job's primary window (`step_ms`); without one the
        text is refused (`SLIDING_NEEDS_STEP`).
        """
        from tidegauge.core.durations import parse_duration

        size, _, slide = text.strip().partition("/")
        size_ms = parse_duration(size)
        kind, _, resolution = slide.partition("@")
        if kind.strip().lower() == "sliding":
            if step_ms is None:
                raise ValueError(SLIDING_NEEDS_STEP)
            return cls.sliding(
                size_ms, step_ms, parse_duration(resolution) if resolution.strip() else None
            )
        if resolution:
            raise ValueError(f"{text!r}: only a sliding window has a resolution (SIZE/sliding@RES)")
        return cls(size_ms, parse_duration(slide) if slide else size_ms)

    @cached_property
    def kind(self) -> str:
        """Either "tumbling", "hopping", "sliding" or "session"."""
        if self.gap_ms:
            return "session"
        if self.resolution_ms:
            return "sliding"
        return "tumbling" if self.slide_ms == self.size_ms else "hopping"

    @cached_property
    def reach_ms(self) -> int:
        """How far back from a row's end the events it depends on go.

        The window's size, and for a sliding window one step more: the intervals ending inside
        its step start up to a step before its rolling interval does.
        """
        return self.size_ms + (self.slide_ms if self.resolution_ms else 0)

    @cached_property
    def key(self) -> str:
        """Redis identity: "10000" tumbling, "60000-10000" hopping, "s30000-10000" sessions.

        Roll-ups: "r60000"; sliding: "sl60000-10000-100" (size, step, resolution).
        """
        if self.rollup:
            return f"r{self.size_ms}"
        if self.resolution_ms:
            return f"sl{self.size_ms}-{self.slide_ms}-{self.resolution_ms}"
        if self.kind == "session":
            return f"s{self.gap_ms}-{self.size_ms}"
        if self.kind == "tumbling":
            return str(self.size_ms)
        return f"{self.size_ms}-{self.slide_ms}"

    @classmethod
    def from_key(cls, key: str) -> WindowSpec:
        """Inverse of `key`."""
        m = re.fullmatch(r"s(\d+)-(\d+)", key)
        if m:
            return cls.session(int(m.group(1)), int(m.group(2)))
        m = re.fullmatch(r"r(\d+)", key)
        if m:
            return cls.rollup_of(int(m.group(1)))
        m = re.fullmatch(r"sl(\d+)-(\d+)-(\d+)", key)
        if m:
            return cls.sliding(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if not re.fullmatch(r"\d+(-\d+)?", key):
            raise ValueError(f"not a window key: {key!r}")
        size, _, slide = key.partition("-")
        return cls(int(size), int(slide) if slide else int(size))

    def end(self, start_ms: int) -> int:
        """Exclusive end of this spec's window starting at `start_ms` (a session: its bucket)."""
        return window_end(start_ms, self.size_ms)

    def is_closed(self, start_ms: int, watermark_ms: int | None) -> bool:
        """No event can change the window any more: the watermark has passed its end.

        A session's stored window is its start bucket; the session's own end keeps growing
        while the user is active, so a session window is never closed by this rule.
        """
        return (
            watermark_ms is not None
            and self.kind != "session"
            and is_late(self.end(start_ms), watermark_ms)
        )

    def lies_within(self, start_ms: int, since_ms: int, until_ms: int) -> bool:
        """The whole window [start, end) lies inside [since, until)."""
        return start_ms >= since_ms and self.end(start_ms) <= until_ms

    def first_start_overlapping(self, since_ms: int) -> int:
        """Smallest window start (not rounded to a slide) whose window still reaches `since_ms`.

        The lower bound of an index scan for windows overlapping [since, ...).
        """
        return since_ms - self.size_ms + 1

    @cached_property
    def anchor_ms(self) -> int:
        """Where this spec's windows start, modulo `slide_ms`.

        0: windows start at multiples of the slide. A sliding window's rows END at multiples of
        its step (the primary window's ends), so they start at -size modulo the step.
        """
        return -self.size_ms % self.slide_ms if self.resolution_ms else 0

    def last_start_at_or_before(self, ts_ms: int) -> int:
        """Start of the last window of this spec that starts at or before `ts_ms`."""
        return ts_ms - (ts_ms - self.anchor_ms) % self.slide_ms

    def last_end_containing(self, ts_ms: int) -> int:
        """End of the last window of this spec (by start) that holds `ts_ms`."""
        return self.end(self.last_start_at_or_before(ts_ms))

    def last_end_reaching(self, ts_ms: int) -> int:
        """End of the last row (by start) whose result depends on an event at `ts_ms`.

        `last_end_containing`, and one step later for a sliding window (its peak).
        """
        return self.last_start_at_or_before(ts_ms) + self.reach_ms

    def windows_reaching(self, pane_start_ms: int, pane_ms: int) -> list[int]:
        """Starts of the rows whose result depends on the pane.

        `windows_containing`, and for a sliding window also the row after the last of those
        (the pane is in its peak intervals, not in its rolling interval).
        """
        starts = self.windows_containing(pane_start_ms, pane_ms)
        if self.resolution_ms:
            starts.append(self.last_start_at_or_before(pane_start_ms) + self.slide_ms)
        return starts

    def rate_per_s(self, count: int) -> float:
        """Events per second of a window of this spec holding `count` events."""
        return count * 1000.0 / self.size_ms

    def windows_containing(self, pane_start_ms: int, pane_ms: int) -> list[int]:
        """Starts of the windows that contain the whole pane [pane_start, pane_start + pane_ms)."""
        first = pane_start_ms + pane_ms - self.size_ms  # earliest start that still covers the pane
        first += (self.anchor_ms - first) % self.slide_ms  # round up onto the spec's grid
        return list(range(first, pane_start_ms + 1, self.slide_ms))

    def panes_of(self, window_start_ms: int, pane_ms: int) -> range:
        """Pane starts that make up the window starting at `window_start_ms`."""
        return range(window_start_ms, window_start_ms + self.size_ms, pane_ms)


def is_sliding_text(text: str) -> bool:
    """Whether a `--window` text names a sliding window ("60s/sliding", "1m/sliding@1ms")."""
    return text.partition("/")[2].partition("@")[0].strip().lower() == "sliding"


#: Why "SIZE/sliding" cannot stand alone: its rows follow the job's primary window.
SLIDING_NEEDS_STEP = (
    "a sliding window (SIZE/sliding) reports once per primary window: give a tumbling "
    "--window too, e.g. --window 10s --window 60s/sliding"
)


def match_spec(text: str, specs: Sequence[WindowSpec]) -> WindowSpec | None:
    """The spec of `specs` a user means by `text`, or None.

    `text` is a `--window` text ("10s", "60s/10s", "60s/sliding[@RES]") or a stored key
    ("60000-10000"). A sliding window's step is the job's primary window, which a reader does
    not know: any of `specs` of that size (and resolution, when given) matches.
    """
    text = text.strip()
    for s in specs:
        if s.key == text:
            return s
    if is_sliding_text(text):
        from tidegauge.core.durations import parse_duration

        size, _, rest = text.partition("/")
        resolution = rest.partition("@")[2]
        size_ms = parse_duration(size)
        res_ms = parse_duration(resolution) if resolution.strip() else None
        return next(
            (
                s
                for s in specs
                if s.kind == "sliding"
                and s.size_ms == size_ms
                and res_ms in (None, s.resolution_ms)
            ),
            None,
        )
    wanted = WindowSpec.parse(text)
    return next((s for s in specs if s == wanted), None)


def default_resolution(size_ms: int, step_ms: int) -> int:
    """A sliding window's resolution when none is given.

    100 ms, or the largest that divides both size and step if 100 ms does not (1 ms is exact;
    docs/time.md says what each costs).
    """
    return math.gcd(size_ms, step_ms, 100)


def primary_size(specs: Sequence[WindowSpec]) -> int:
    """Window size (ms) of the event-level views: the smallest tumbling spec, else the pane.

    Per-event figures that need one window per event (the late-event store, the processing-time
    and broker-time series, their late and straggler counts) use tumbling windows of this size.
    """
    tumbling = [s.size_ms for s in specs if s.kind == "tumbling"]
    if tumbling:
        return min(tumbling)
    return pane_size([s for s in specs if s.kind != "session"] or specs)


def pane_size(specs: Sequence[WindowSpec]) -> int:
    """The largest pane every window of every spec is made of: gcd of all sizes and slides."""
    if not specs:
        raise ValueError("at least one window spec is needed")
    return math.gcd(*[v for s in specs for v in (s.size_ms, s.slide_ms)])
