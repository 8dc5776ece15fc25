"""Window and watermark math on epoch-millisecond integers. Pure: no Spark, no I/O.

The job uses these functions on executors, the sink uses them for Redis keys, and the tests use
them to compute expected answers, so all three agree by construction. The rules mirror Spark's:

    tumbling window of size W holding t:    [t - t mod W, t - t mod W + W)

    watermark after a batch:                max(previous watermark, max event time seen - L)
                                            (starts at 0; never goes back)

    a row is late (dropped):                window end <= watermark in force for its batch

          window [10s, 20s)                     watermark in force = 26s
    ----|=========|---------------------------------|-------> event time
       10s       20s                               26s
                  ^ end 20s <= 26s: an event at 11s arriving now is late
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = [
    "advance_watermark",
    "is_late",
    "tumbling_start",
    "tumbling_starts",
    "window_end",
]


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


def advance_watermark(
    watermark_ms: int, event_times_ms: Iterable[int], allowed_lateness_ms: int
) -> int:
    """The watermark after a batch with these event times; it never moves backwards."""
    latest = max(event_times_ms, default=None)
    if latest is None:
        return watermark_ms
    return max(watermark_ms, latest - allowed_lateness_ms)
