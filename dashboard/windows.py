"""The windows of the chosen spec as tables: one row per (window, service), for the charts.

Events per second, latency percentiles, distinct users (with the HyperLogLog's error band) and
the order services are drawn in. Pure functions of what `dashboard.data` read.

Series filtered to some services are sums of those services' rows; with no filter the stored
`*` rows are used, because `*` distinct users and percentiles come from merged sketches and
cannot be summed (`pick_services`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from dashboard.times import to_utc
from sketches.hll import DEFAULT_P
from tidegauge.core.metrics import added_result_fields
from tidegauge.core.store import ALL_SERVICES, WindowRow

__all__ = [
    "HLL_RELATIVE_ERROR",
    "METRIC_COLUMNS",
    "WINDOW_COLUMNS",
    "metrics_frame",
    "pick_services",
    "services_in",
    "stable_order",
    "users_band",
    "windows_frame",
]

#: Columns of `windows_frame`, in order.
WINDOW_COLUMNS = ["window_start", "window_end", "service", "count", "events_per_s"]

#: Columns of `metrics_frame`, in order: latencies in ms (NaN for a window without latencies).
METRIC_COLUMNS = [
    "window_start",
    "window_end",
    "service",
    "count",
    "latency_count",
    "p50",
    "p95",
    "p99",
    "distinct_users",
]

#: Relative standard error of the job's HyperLogLogs (1.04 / sqrt(2^p)).
HLL_RELATIVE_ERROR = 1.04 / math.sqrt(1 << DEFAULT_P)


def _columns(rows: Sequence[WindowRow], names: Sequence[str]) -> pd.DataFrame:
    """Rows' fields as columns, one list per field: ~5x faster than a dict per row."""
    own = WindowRow.__dataclass_fields__
    return pd.DataFrame(
        {
            n: [getattr(r, n) for r in rows] if n in own else [r.extra.get(n) for r in rows]
            for n in names
        },
        columns=list(names),
    )


def windows_frame(rows: Sequence[WindowRow]) -> pd.DataFrame:
    """One row per (window, service): start/end as naive-UTC datetimes, count, events_per_s.

    Sorted by service (`*` first) then window start, so each service's line is drawn in order.
    """
    if not rows:
        return pd.DataFrame(
            {
                "window_start": pd.Series(dtype="datetime64[ms]"),
                "window_end": pd.Series(dtype="datetime64[ms]"),
                "service": pd.Series(dtype="object"),
                "count": pd.Series(dtype="int64"),
                "events_per_s": pd.Series(dtype="float64"),
            }
        )
    df = _columns(rows, WINDOW_COLUMNS)
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    df["count"] = df["count"].astype("int64")
    df["events_per_s"] = df["events_per_s"].astype("float64")
    return df.sort_values(["service", "window_start"], kind="stable").reset_index(drop=True)


def metrics_frame(rows: Sequence[WindowRow]) -> pd.DataFrame:
    """One row per (window, service) with latency percentiles (ms) and distinct users.

    Same times and order as `windows_frame`; a window without latencies has NaN percentiles,
    so its line has a gap rather than a fake zero. Result fields of metrics added by plugins
    follow as float columns (NaN where a window predates the metric).
    """
    added = list(added_result_fields())  # plugin metrics: one float column each
    df = _columns(rows, METRIC_COLUMNS + added)
    for name in added:
        df[name] = pd.to_numeric(df[name], errors="coerce").astype("float64")
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    df = df.astype(
        {
            "service": "object",
            "count": "int64",
            "latency_count": "int64",
            "p50": "float64",
            "p95": "float64",
            "p99": "float64",
            "distinct_users": "int64",
        }
    )
    return df.sort_values(["service", "window_start"], kind="stable").reset_index(drop=True)


def users_band(frame: pd.DataFrame, sigmas: float = 2.0) -> pd.DataFrame:
    """A `metrics_frame` plus `users_lo`/`users_hi`: estimate ± `sigmas` HLL standard errors.

    The HyperLogLog's relative standard error is 1.04 / sqrt(m) (0.81 % at the job's p = 14);
    at small counts its linear-counting estimate is better than that, so the band is a safe
    upper bound on the error.
    """
    out = frame.copy()
    err = out["distinct_users"].astype("float64") * HLL_RELATIVE_ERROR * sigmas
    out["users_lo"] = (out["distinct_users"] - err).clip(lower=0)
    out["users_hi"] = out["distinct_users"] + err
    return out


def services_in(frame: pd.DataFrame) -> list[str]:
    """Services present in a `windows_frame`, sorted, without the `*` total."""
    return sorted(s for s in frame["service"].unique() if s != ALL_SERVICES)


def stable_order(previous: Sequence[str], current: Iterable[str]) -> list[str]:
    """`previous` unchanged, then the services of `current` not in it yet, sorted.

    The chart's trace order must not move when a service appears (see `figures`), so the app
    keeps the order it has shown and only appends newcomers.
    """
    known = set(previous)
    return [*previous, *sorted(set(current) - known)]


def pick_services(rows: Iterable[Any], services: Sequence[str] | None) -> tuple[list[Any], bool]:
    """Rows of `*` when `services` is None, else the rows of those services (to be summed)."""
    if services is None:
        return [r for r in rows if r.service == ALL_SERVICES], False
    chosen = set(services)
    return [r for r in rows if r.service in chosen], True
