"""Event time against processing time: the rate in each time domain, and the watermark.

The same events counted per window by when they happened (event time), when the job processed
them (processing time) and when the broker stamped them (broker time); and, per batch, where
the watermark and the max event time stood when the batch ran. A backlog is a processing-time
spike over a flat event-time line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dashboard.times import to_utc
from dashboard.windows import pick_services
from tidegauge.core.store import ArrivalRow

__all__ = ["arrivals_frame", "watermark_frame"]


def arrivals_frame(
    arrivals: Mapping[str, Sequence[ArrivalRow]], services: Sequence[str] | None = None
) -> pd.DataFrame:
    """Events/s per window in each time domain (event, processing, broker), one row each.

    `services` None: all services (the `*` rows); else the sum over those services.
    """
    rows = []
    for domain, series in arrivals.items():
        picked, _ = pick_services(series, services)
        for r in picked:
            rows.append((domain, r.window_start, r.window_end, r.events, r.late, r.stragglers))
    df = pd.DataFrame(
        rows, columns=["domain", "window_start", "window_end", "events", "late", "stragglers"]
    )
    df = df.groupby(["domain", "window_start", "window_end"], as_index=False).sum()
    df["events_per_s"] = df["events"] * 1000.0 / (df["window_end"] - df["window_start"])
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    return df.sort_values(["domain", "window_start"], kind="stable").reset_index(drop=True)


def watermark_frame(batches: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per batch: when it ran (processing time), the watermark after it, the max event time.

    Batches before the first event (watermark <= 0) are left out: there is nothing to draw.
    """
    rows = [
        (int(b["batch_time"]), int(b["watermark"]), b.get("max_event_time"))
        for b in batches
        if int(b.get("watermark") or 0) > 0
    ]
    df = pd.DataFrame(rows, columns=["batch_time", "watermark", "max_event_time"])
    out = pd.DataFrame(
        {
            "batch_time": to_utc(df["batch_time"]),
            "watermark": to_utc(df["watermark"]),
            "max_event_time": pd.to_datetime(pd.to_numeric(df["max_event_time"]), unit="ms"),
        }
    )
    return out.sort_values("batch_time", kind="stable").reset_index(drop=True)
