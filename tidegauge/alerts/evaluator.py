"""One evaluation of every rule against the store (tidegauge/alerts/rules.py has the rules)."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from tidegauge.alerts.rules import Firing, Rule, advance, batch_points, evaluate, window_points
from tidegauge.alerts.slo import burn_points
from tidegauge.alerts.store import read_firings, write_evaluation
from tidegauge.catalog.budget import BURN_RULES
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.store import (
    Keys,
    read_batches,
    read_newest_window_start,
    read_status,
    read_window_specs,
    read_windows,
    read_windows_tiered,
)
from tidegauge.core.store.records import WindowRow
from tidegauge.core.windows import WindowSpec, match_spec

__all__ = ["DEFAULT_LOOKBACK_MS", "evaluate_store"]

#: How far back (event time, behind the newest window) each evaluation reads windows. Firings
#: that started before are kept as they are.
DEFAULT_LOOKBACK_MS = 3_600_000


def evaluate_store(
    r: redis.Redis,
    keys: Keys,
    rules: Sequence[Rule],
    now_ms: int,
    lookback_ms: int = DEFAULT_LOOKBACK_MS,
    cache: ClosedWindows | None = None,
    deliver: bool = True,
) -> list[Firing]:
    """Evaluate `rules`, store the firings and queue the notices; returns the changed firings.

    `deliver`: queue notices for the webhook sender (False when nobody sends them).
    """
    status = read_status(r, keys)
    watermark = status.watermark if status is not None else None
    specs = read_window_specs(r, keys)
    known = read_firings(r, keys)
    batches = read_batches(r, keys) if any(rule.per_batch for rule in rules) else []
    every: list[Firing] = []
    changed: list[Firing] = []
    slo_rows: dict[str, tuple[list[WindowRow], list[WindowRow]]] = {}
    for rule in rules:
        mine = [f for f in known if f.rule == rule.key]
        if rule.slo is not None:
            spec = _spec_of(rule, specs)
            if spec is None:
                every += mine
                continue
            newest = read_newest_window_start(r, keys, spec)
            until = spec.end(newest) if newest is not None else now_ms
            oldest = until - lookback_ms
            if rule.service not in slo_rows:  # once per service for its rules
                windows = read_windows(r, keys, spec, rule.service, since_ms=oldest, cache=cache)
                slo_rows[rule.service] = (
                    windows,
                    _counts(r, keys, spec, rule.service, oldest - _REACH_MS, until),
                )
            windows, counts = slo_rows[rule.service]
            points = burn_points(rule, windows, counts, watermark)
        elif rule.per_batch:
            points = batch_points(rule, batches)
            oldest = points[0].start if points else now_ms
        else:
            spec = _spec_of(rule, specs)
            if spec is None:  # no windows of that spec (yet): nothing to say
                every += mine
                continue
            newest = read_newest_window_start(r, keys, spec)
            oldest = (spec.end(newest) if newest is not None else now_ms) - lookback_ms
            rows = read_windows(r, keys, spec, rule.service, since_ms=oldest, cache=cache)
            points = window_points(rule, rows, watermark)
        now, moved = advance(mine, evaluate(rule, points), rule, oldest, now_ms)
        every += now
        changed += moved
    rule_keys = {rule.key for rule in rules}
    every += [f for f in known if f.rule not in rule_keys]  # rules no longer run: kept
    write_evaluation(r, keys, rules, every, changed, now_ms, deliver=deliver, stored=known)
    return changed


def _spec_of(rule: Rule, specs: Sequence[WindowSpec]) -> WindowSpec | None:
    """The stored spec a rule reads: its `in SPEC` ("60s/10s", "1m/sliding"), else the first."""
    if rule.spec is None:
        return specs[0] if specs else None
    return match_spec(rule.spec, specs)


#: How far before the oldest point SLO rules read counts: their longest window.
_REACH_MS = max(b.long_ms for b in BURN_RULES)


def _counts(
    r: redis.Redis, keys: Keys, spec: WindowSpec, service: str, since: int, until: int
) -> list[WindowRow]:
    """A service's rows over [since, until): 1-minute roll-ups where kept, newer ones raw."""
    tiered = read_windows_tiered(r, keys, since, until, service, min_size_ms=60_000)
    if tiered is None:  # no retention tiers: the raw windows are all there is
        return read_windows(r, keys, spec, service, since_ms=since, until_ms=until)
    return tiered.rows
