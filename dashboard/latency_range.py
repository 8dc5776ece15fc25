"""The latency range: each service's figures over the chosen range, from merged sketches.

`dashboard.data` merges the sketches of the tumbling windows inside the latency range (one
aggregate per service and `*`); here they become the range's table (events, error rate,
percentiles, distinct users) and latency CDF. Merged, not averaged: `*` percentiles and users
are those of all events, and a user of two services counts once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from tidegauge.core.window_agg import WindowAgg

__all__ = ["cdf_frame", "range_table"]


def cdf_frame(
    aggs: Mapping[str, WindowAgg], services: Sequence[str], points: int = 101
) -> pd.DataFrame:
    """Latency CDF (service, latency_ms, fraction <= it) of each merged aggregate, from its digest.

    Services without latencies are left out.
    """
    q = np.linspace(0.0, 1.0, points)
    parts = []
    for svc in services:
        agg = aggs.get(svc)
        if agg is None or not agg.latency.count:
            continue
        parts.append(
            pd.DataFrame({"service": svc, "latency_ms": agg.latency.quantile(q), "fraction": q})
        )
    if not parts:
        return pd.DataFrame({"service": [], "latency_ms": [], "fraction": []})
    return pd.concat(parts, ignore_index=True)


def range_table(
    aggs: Mapping[str, WindowAgg], services: Sequence[str], range_ms: int
) -> pd.DataFrame:
    """One row per service: events, error rate, p50/p95/p99 and distinct users of the range.

    From the merged sketches, so `*` users count a user of two services once.
    """
    rows = []
    for svc in services:
        agg = aggs.get(svc)
        if agg is None:
            continue
        m = agg.metrics(range_ms)
        rows.append(
            {
                "service": svc,
                "events": int(m["count"]),
                "error rate %": round(100.0 * float(m["error_rate"]), 2),
                "p50 ms": _round(m.get("p50")),
                "p95 ms": _round(m.get("p95")),
                "p99 ms": _round(m.get("p99")),
                "distinct users": int(m["distinct_users"]),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "service",
            "events",
            "error rate %",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "distinct users",
        ],
    )


def _round(v: float | None) -> float | None:
    return None if v is None else round(float(v), 1)
