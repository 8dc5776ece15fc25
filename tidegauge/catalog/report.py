"""A service's SLO standing from the store, for `tidegauge query slo`.

Its budget over the period, burn rates over the rules' windows, which rules fire.

The counts are the job's exact SLO counts (tidegauge/catalog/slo_counts.py), merged over each
range from the stored windows and roll-ups (`read_range`: the same answer whatever the tiers);
the objectives are the catalog's now. The ranges end now, so the newest windows may still be
open: their figures are provisional, as the alerts' are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from tidegauge.catalog.budget import BURN_RULES, Budget, burn_rate
from tidegauge.catalog.entry import CatalogEntry, Slo
from tidegauge.core import store
from tidegauge.core.durations import format_duration

__all__ = [
    "OBJECTIVE_COUNTS",
    "ObjectiveReport",
    "ServiceSlos",
    "lasting_text",
    "read_catalog_entries",
    "service_reports",
    "slo_report",
]

#: Per objective: the result fields (tidegauge/catalog/slo_counts.py) of the events it judged
#: and of the bad ones.
OBJECTIVE_COUNTS = {
    "availability": ("slo_availability_events", "slo_errors"),
    "latency": ("slo_latency_events", "slo_slow"),
}


@dataclass(frozen=True)
class ObjectiveReport:
    """One objective of a service over its period and the burn-rate rules' windows."""

    objective: str
    target: float
    budget: Budget
    #: (rule name, severity, rate it fires at, long-window burn, short-window burn, fires)
    rules: list[tuple[str, str, float, float | None, float | None, bool]]
    #: Burn over the last hour, and how long the budget left lasts at it (ms; None: for ever).
    current_burn: float | None
    exhausted_in_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        b = self.budget
        return {
            "objective": self.objective,
            "target": self.target,
            "period_ms": b.period_ms,
            "events": b.events,
            "bad": b.bad,
            "sli": b.sli,
            "budget_consumed": b.consumed,
            "budget_left": b.left,
            "current_burn": self.current_burn,
            "exhausted_in_ms": self.exhausted_in_ms,
            "rules": [
                {"rule": n, "severity": s, "rate": rate, "long": lb, "short": sb, "fires": f}
                for n, s, rate, lb, sb, f in self.rules
            ],
        }


def slo_report(
    r: redis.Redis, keys: store.Keys, service: str, slo: Slo, period_ms: int, now_ms: int
) -> list[ObjectiveReport]:
    """Each objective `slo` has, measured for `service` over the period ending `now_ms`."""
    spans = {period_ms, 3_600_000} | {
        w for rule in BURN_RULES for w in (rule.long_ms, rule.short_ms)
    }
    counts = {span: _counts(r, keys, service, now_ms - span, now_ms) for span in sorted(spans)}
    out = []
    for objective, target in slo.objectives().items():
        judged, bad = OBJECTIVE_COUNTS[objective]

        def burn(
            span: int, target: float = target, judged: str = judged, bad: str = bad
        ) -> float | None:
            c = counts[span]
            return burn_rate(c.get(judged, 0), c.get(bad, 0), target)

        total = counts[period_ms]
        budget = Budget(target, period_ms, total.get(judged, 0), total.get(bad, 0))
        rules = []
        for rule in BURN_RULES:
            lb, sb = burn(rule.long_ms), burn(rule.short_ms)
            rules.append(
                (
                    rule.name,
                    rule.severity,
                    rule.rate(period_ms),
                    lb,
                    sb,
                    rule.fires(period_ms, lb, sb),
                )
            )
        current = burn(3_600_000)
        out.append(
            ObjectiveReport(
                objective, target, budget, rules, current, budget.exhausted_in_ms(current)
            )
        )
    return out


def _counts(
    r: redis.Redis, keys: store.Keys, service: str, since: int, until: int
) -> dict[str, int]:
    result = store.read_range(r, keys, since, until, service, None, 0)
    return {k: int(v) for k, v in result.metrics.items() if k.startswith("slo_") and v is not None}


def read_catalog_entries(r: redis.Redis, keys: store.Keys) -> dict[str, CatalogEntry]:
    """The catalog as the job last published it: service -> its newest entry."""
    out = {}
    for service, raw in r.hgetall(keys.catalog).items():
        doc = json.loads(raw)
        out[service.decode() if isinstance(service, bytes) else str(service)] = (
            CatalogEntry.from_json(doc["entry"])
        )
    return out


#: A catalogued service, its entry and its objectives' reports.
ServiceSlos = tuple[str, CatalogEntry, list[ObjectiveReport]]


def service_reports(
    r: redis.Redis, keys: store.Keys, now_ms: int, limit: int = 20
) -> list[ServiceSlos]:
    """Every catalogued service with an SLO (the first `limit` by name): its reports now."""
    out = []
    entries = read_catalog_entries(r, keys)
    for service, entry in sorted(entries.items()):
        if entry.slo is None:
            continue
        reports = slo_report(r, keys, service, entry.slo, entry.slo.period_ms, now_ms)
        out.append((service, entry, reports))
        if len(out) >= limit:
            break
    return out


def lasting_text(ms: float | None) -> str:
    """How long a budget lasts, to the minute: "352h59m", "0s" (gone), "-" (for ever)."""
    if ms is None:
        return "-"
    return format_duration(round(ms / 60_000) * 60_000)
