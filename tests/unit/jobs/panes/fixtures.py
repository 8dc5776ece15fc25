"""What the panes' unit tests share: open sessions and session buckets in readable form."""

from __future__ import annotations

from jobs.panes.sessions import Sessions
from tidegauge.core.window_agg import WindowAgg

Open = tuple[str, int, int, int]  # user, first, last, events


def open_of(s: Sessions) -> list[Open]:
    """Open sessions as sorted (user, first, last, events)."""
    return sorted(
        zip(s.users.tolist(), s.first.tolist(), s.last.tolist(), s.events.tolist(), strict=True)
    )


def lengths_of(agg: WindowAgg) -> tuple[int, float, float, float]:
    """(sessions, shortest, longest, mean length) of a bucket, from its exact digest statistics."""
    assert agg.latency.count == agg.count
    return agg.count, agg.latency.min, agg.latency.max, agg.latency.mean
