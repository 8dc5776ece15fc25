"""Burn-rate alerts for every catalogued SLO: the SRE workbook's rules, over event-time windows.

`tidegauge alerts --slo` turns each objective of each service in the job's published catalog
(`Keys.catalog`, jobs/sink/catalog.py) into the three rules of `BURN_RULES` (fast and slow burn
page, a budget leak opens a ticket) and evaluates them like any rule (tidegauge/alerts/rules.py):

* each window of the service's primary spec is a point; its value is the smaller of the burn
  over the rule's long window and over its short window ending with it, divided by the rule's
  rate, so the point breaches at 1: both windows burn at least the rate;
* the burns are sums of the job's exact SLO counts (tidegauge/catalog/slo_counts.py) over the
  windows inside each range, read across the retention tiers (a 3-day window from 1-minute
  roll-ups; a roll-up straddling the range's start is left out: the range is at most one
  roll-up short);
* a point is closed when its window is: a burn that includes open windows is **provisional**,
  confirmed once they close, retracted if stragglers bring it under. Consecutive breaching
  windows are one firing, so a sustained burn pages once; a short blip burns the short window
  but not the long one, and pages no one.

Notices carry Alertmanager-style labels: `alertname`, `service`, `team`, `severity`, `slo`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tidegauge.alerts.rules import SLO_BURN, Point, Rule, SloCheck
from tidegauge.catalog.budget import BURN_RULES, burn_rate
from tidegauge.catalog.entry import CatalogEntry
from tidegauge.catalog.report import OBJECTIVE_COUNTS
from tidegauge.core.store.records import WindowRow

__all__ = ["burn_points", "slo_rules"]


def slo_rules(catalog: Mapping[str, CatalogEntry]) -> list[Rule]:
    """The burn-rate rules of every objective of every catalogued service."""
    out = []
    for service, entry in sorted(catalog.items()):
        slo = entry.slo
        if slo is None:
            continue
        for objective, target in slo.objectives().items():
            name = slo.name(objective)
            for b in BURN_RULES:
                check = SloCheck(
                    objective,
                    target,
                    slo.period_ms,
                    b.name,
                    b.rate(slo.period_ms),
                    b.long_ms,
                    b.short_ms,
                )
                labels = {
                    "alertname": f"SLO {b.name}",
                    "service": service,
                    "severity": b.severity,
                    "slo": name,
                    **({"team": entry.team} if entry.team else {}),
                }
                out.append(
                    Rule(
                        name=f"{service} {name}: {b.name}",
                        metric=SLO_BURN,
                        op=">=",
                        threshold=1.0,
                        service=service,
                        slo=check,
                        labels=labels,
                    )
                )
    return out


def burn_points(
    rule: Rule, windows: Sequence[WindowRow], counts: Sequence[WindowRow], watermark_ms: int | None
) -> list[Point]:
    """The rule's series: one point per window of `windows` (the primary spec, oldest first).

    `counts`: the service's rows across the retention tiers, covering the long window before
    the first point (any sizes, not overlapping); a window without a row is one of no events.
    """
    check = rule.slo
    if check is None:
        raise ValueError(f"rule {rule.name!r} is not an SLO rule")
    judged_field, bad_field = OBJECTIVE_COUNTS[check.objective]
    rows = sorted((w for w in counts if w.service == rule.service), key=lambda w: w.window_start)
    starts = np.array([w.window_start for w in rows], np.int64)
    ends = np.array([w.window_end for w in rows], np.int64)
    judged = np.cumsum([0, *[int(w.extra.get(judged_field) or 0) for w in rows]])
    bad = np.cumsum([0, *[int(w.extra.get(bad_field) or 0) for w in rows]])

    def burn(since: int, until: int) -> float | None:
        lo = int(np.searchsorted(starts, since, side="left"))  # rows starting at or after since
        hi = int(np.searchsorted(ends, until, side="right"))  # rows ending at or before until
        if hi <= lo:
            return None
        return burn_rate(int(judged[hi] - judged[lo]), int(bad[hi] - bad[lo]), check.target)

    mine = sorted((w for w in windows if w.service == rule.service), key=lambda w: w.window_start)
    out: list[Point] = []
    if not mine:
        return out
    size = mine[0].window_end - mine[0].window_start
    closed_by_start = {w.window_start: w.closed for w in mine}
    for start in range(mine[0].window_start, mine[-1].window_start + 1, size):
        end = start + size
        long_burn = burn(end - check.long_ms, end)
        short_burn = burn(end - check.short_ms, end)
        value = None
        if long_burn is not None and short_burn is not None:
            # (a burn of exactly the rate, computed from counts, may land a hair below it)
            value = min(long_burn, short_burn) / check.rate * (1 + 1e-9)
        closed = closed_by_start.get(start, watermark_ms is not None and end <= watermark_ms)
        out.append(Point(start, end, value, bool(closed)))
    return out
