"""The breakdown panel's reads and tables: a dimension's values ranked, with their trend.

A breakdown shows the values of one dimension (docs/dimensions.md) over the page's time range:
of one service or of all services (`*`), or, filtered to one value, the services that value
comes from ("/cart: which services?"). Each row is a member of the dimension's store
(`Keys.by`): totals over the range (exact events and errors, p99 of the merged t-digests) rank
them; the windows of the busiest are read for their trend, and only those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import redis

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.dimensions import SEP, split_member
from tidegauge.core.store import (
    ALL_SERVICES,
    Keys,
    WindowRow,
    read_newest_window_start,
    read_window_specs,
    read_windows,
    read_windows_tiered,
)
from tidegauge.core.store.ranking import (
    ServiceTotals,
    rank_services,
    rank_size,
    ranked_parts,
    read_service_totals,
)

__all__ = ["Breakdown", "BreakdownView", "breakdown_table", "read_breakdown", "trend_frame"]

#: Most windows a trend line has (as the page's other charts: MAX_CHART_WINDOWS).
MAX_TREND_WINDOWS = 2_160


@dataclass(frozen=True)
class BreakdownView:
    """What a breakdown shows: hashable, so every viewer of one view shares one read."""

    dimension: str
    #: Whose values: a service, or `*` for all services.
    of: str = ALL_SERVICES
    #: One value: the services it comes from instead of the values of `of`.
    value: str | None = None
    metric: str = "events"
    top: int = 10
    range_ms: int = 15 * 60_000


@dataclass
class Breakdown:
    """One read of a breakdown."""

    view: BreakdownView
    #: Every member ranked (most first), and how many there are.
    ranked: list[ServiceTotals] = field(default_factory=list)
    members: int = 0
    #: The windows of the drawn members over the range.
    rows: list[WindowRow] = field(default_factory=list)
    since_ms: int | None = None
    until_ms: int | None = None

    def label(self, member: str) -> str:
        """A member as the panel names it: the value, or (filtered to a value) the service."""
        service, value = split_member(member)
        return service if self.view.value is not None else value


def _members(names: Sequence[str], view: BreakdownView) -> list[str]:
    if view.value is not None:
        return [
            n for n in names if split_member(n)[1] == view.value and not n.startswith(ALL_SERVICES)
        ]
    return [n for n in names if n.startswith(view.of + SEP)]


def read_breakdown(
    r: redis.Redis, keys: Keys, view: BreakdownView, cache: ClosedWindows | None = None
) -> Breakdown:
    """Rank the members of `view` over the range ending at the newest window; read the top's."""
    by = keys.by(view.dimension)
    out = Breakdown(view)
    specs = [s for s in read_window_specs(r, by) if s.kind == "tumbling"]
    if not specs:
        return out
    spec = specs[0]
    newest = read_newest_window_start(r, by, spec)
    if newest is None:
        return out
    until = spec.end(newest)
    since = until - view.range_ms
    min_size = view.range_ms // MAX_TREND_WINDOWS
    parts = ranked_parts(r, by, spec, since, until, rank_size(view.range_ms, min_size))
    totals = read_service_totals(r, by, parts, cache, with_p99=True)
    mine = {m: totals[m] for m in _members(list(totals), view)}
    order = rank_services(mine, view.metric, len(mine))
    out.ranked = [mine[m] for m in order]
    out.members = len(order)
    out.since_ms, out.until_ms = since, until
    drawn = order[: view.top] if view.top else order
    if drawn:
        tiered = read_windows_tiered(r, by, since, until, None, min_size, cache, services=drawn)
        out.rows = (
            tiered.rows
            if tiered is not None  # (None: the store keeps every window, no tiers)
            else read_windows(r, by, spec, since_ms=since, cache=cache, services=drawn)
        )
    return out


def breakdown_table(b: Breakdown) -> pd.DataFrame:
    """The ranked members: events, errors, error %, p99 over the range (top first)."""
    head = "service" if b.view.value is not None else b.view.dimension
    return pd.DataFrame(
        {
            head: [b.label(t.service) for t in b.ranked],
            "events": [t.events for t in b.ranked],
            "errors": [t.errors for t in b.ranked],
            "error %": [round(100 * t.errors / t.events, 2) if t.events else 0.0 for t in b.ranked],
            "p99 ms": [None if t.p99 is None else round(t.p99, 1) for t in b.ranked],
        }
    )


def trend_frame(b: Breakdown) -> pd.DataFrame:
    """Per window and drawn member: events/s, errors/s and p99 (long format, by window start)."""
    return pd.DataFrame(
        {
            "window_start": pd.to_datetime([w.window_start for w in b.rows], unit="ms", utc=True),
            "member": [b.label(w.service) for w in b.rows],
            "events_per_s": [w.events_per_s for w in b.rows],
            "errors": [w.errors for w in b.rows],
            "p99": [w.p99 for w in b.rows],
        }
    ).sort_values(["window_start", "member"], ignore_index=True)
