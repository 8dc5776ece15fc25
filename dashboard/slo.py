"""The SLO panel's table: per catalogued service and objective, the budget and its burn.

From `tidegauge.catalog.report` (the same figures as `tidegauge query slo`): the SLI and the
budget left over the SLO's period, the burn over the last hour and when the budget runs out at
it, and the burn-rate rules firing now (docs/slo.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from tidegauge.catalog.report import ServiceSlos, lasting_text
from tidegauge.core.durations import format_duration

__all__ = ["slo_table"]

COLUMNS = [
    "service",
    "team",
    "objective",
    "SLI",
    "budget left",
    "burn (1h)",
    "runs out in",
    "firing",
]


def slo_table(rows: Sequence[ServiceSlos]) -> pd.DataFrame:
    """One row per (service, objective), worst budget first."""
    out = []
    for service, entry, reports in rows:
        for x in reports:
            b = x.budget
            if x.objective == "latency" and entry.slo is not None and entry.slo.latency_ms:
                objective = f"{x.target:g}% under {entry.slo.latency_ms:g} ms"
            else:
                objective = f"{x.target:g}% available"
            lasts = lasting_text(x.exhausted_in_ms)
            out.append(
                {
                    "service": service,
                    "team": entry.team or "",
                    "objective": f"{objective} / {format_duration(b.period_ms)}",
                    "SLI": None if b.sli is None else round(b.sli, 3),
                    "budget left": round(100 * b.left, 1),
                    "burn (1h)": None if x.current_burn is None else round(x.current_burn, 2),
                    "runs out in": lasts,
                    "firing": ", ".join(name for name, _, _, _, _, fires in x.rules if fires),
                }
            )
    frame = pd.DataFrame(out, columns=COLUMNS)
    return frame.sort_values("budget left", kind="stable").reset_index(drop=True)
