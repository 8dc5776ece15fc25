"""The SLO panel's table, from reports worked by hand."""

from __future__ import annotations

import math

from dashboard.slo import COLUMNS, slo_table
from tidegauge.catalog.budget import Budget
from tidegauge.catalog.entry import CatalogEntry, Slo
from tidegauge.catalog.report import ObjectiveReport

DAY = 86_400_000


def _report(objective: str, target: float, events: int, bad: int, burn: float | None):  # type: ignore[no-untyped-def]
    budget = Budget(target, 30 * DAY, events, bad)
    rules = [("fast burn", "page", 14.4, burn, burn, bool(burn and burn >= 14.4))]
    return ObjectiveReport(objective, target, budget, rules, burn, budget.exhausted_in_ms(burn))


def test_one_row_per_objective_the_worst_budget_first() -> None:
    checkout = CatalogEntry(team="payments", slo=Slo(99.9, 800, 99))
    search = CatalogEntry(slo=Slo(availability=99.5))
    rows = [
        ("checkout", checkout, [_report("availability", 99.9, 10_000, 5, 0.5),
                                _report("latency", 99.0, 10_000, 90, 20.0)]),
        ("search", search, [_report("availability", 99.5, 1_000, 0, None)]),
    ]  # fmt: skip
    table = slo_table(rows)
    assert list(table.columns) == COLUMNS
    records = table.to_dict("records")
    assert math.isnan(records[2].pop("burn (1h)"))  # no events in the hour: no burn
    assert records == [
        {"service": "checkout", "team": "payments", "objective": "99% under 800 ms / 720h",
         "SLI": 99.1, "budget left": 10.0, "burn (1h)": 20.0, "runs out in": "3h36m",
         "firing": "fast burn"},
        {"service": "checkout", "team": "payments", "objective": "99.9% available / 720h",
         "SLI": 99.95, "budget left": 50.0, "burn (1h)": 0.5, "runs out in": "720h",
         "firing": ""},
        {"service": "search", "team": "", "objective": "99.5% available / 720h",
         "SLI": 100.0, "budget left": 100.0, "runs out in": "-",
         "firing": ""},
    ]  # fmt: skip
