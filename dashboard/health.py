"""The pipeline's own health, per batch: rates in and out, durations, freshness, and restarts.

Pure functions of the job's batch summaries (oldest first), as `dashboard.data` read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dashboard.times import to_utc
from tidegauge.core.store.annotations import Annotation

__all__ = ["FRESHNESS_COLUMNS", "health_frame", "job_starts"]

#: Freshness fields of a batch summary and their `health_frame` columns (ms).
FRESHNESS_COLUMNS = {
    "p50_ms": "freshness_p50_ms",
    "p99_ms": "freshness_p99_ms",
    "max_ms": "freshness_max_ms",
}


def health_frame(batches: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per batch: time, id, rows, input and processed rows/s, batch duration and freshness (ms).

    Freshness (committed to Redis − broker timestamp, per record: p50, p99, max) is NaN for a
    batch without records, and for history written before the job measured it.
    """
    df = pd.DataFrame(
        [
            {
                "batch_id": int(b["batch_id"]),
                "batch_time": int(b["batch_time"]),
                "input_rows": int(b.get("input_rows") or 0),
                "input_rows_per_s": float(b.get("input_rows_per_s") or 0.0),
                "processed_rows_per_s": float(b.get("processed_rows_per_s") or 0.0),
                "batch_duration_ms": int(b.get("batch_duration_ms") or 0),
                **_freshness_cells(b.get("freshness")),
            }
            for b in batches
        ],
        columns=[
            "batch_id",
            "batch_time",
            "input_rows",
            "input_rows_per_s",
            "processed_rows_per_s",
            "batch_duration_ms",
            *FRESHNESS_COLUMNS.values(),
        ],
    )
    df["batch_time"] = to_utc(df["batch_time"])
    df = df.astype({c: "float64" for c in FRESHNESS_COLUMNS.values()})
    return df.sort_values("batch_id", kind="stable").reset_index(drop=True)


def _freshness_cells(freshness: Mapping[str, int] | None) -> dict[str, float]:
    if not freshness:
        return dict.fromkeys(FRESHNESS_COLUMNS.values(), math.nan)
    return {col: float(freshness[key]) for key, col in FRESHNESS_COLUMNS.items()}


def job_starts(batches: Sequence[Mapping[str, Any]]) -> list[Annotation]:
    """Where the job was started or restarted, from its batch history (processing time).

    A start is the first batch of a run: Spark gives every start of a query a new run id (a
    restart from the checkpoint keeps the query id). The first batch kept counts only when it
    is the query's batch 0; before it the history was trimmed.
    """
    out: list[Annotation] = []
    previous: str | None = None
    for b in batches:
        run = b.get("run_id")
        if run is None:
            continue
        if (previous is None and int(b.get("batch_id", -1)) == 0) or (
            previous is not None and run != previous
        ):
            label = "job started" if int(b.get("batch_id", -1)) == 0 else "job restarted"
            t = int(b["batch_time"])
            out.append(
                Annotation("job_start", f"{label} (batch {b['batch_id']})", "processing", t, t)
            )
        previous = run
    return out
