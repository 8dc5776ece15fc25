"""Lateness as tables: what arrived late, how late, and what another allowed lateness would do.

Late events, stragglers and duplicates per window; a histogram of how late events arrived (from
the lateness digests); the share of events another allowed lateness would have made late; and
the late events the job kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dashboard.times import format_age, to_utc
from dashboard.windows import pick_services
from sketches.tdigest import TDigest
from tidegauge.core.store import LatenessResult, WindowRow

__all__ = ["digest_histogram", "late_events_frame", "lateness_frame", "what_if_frame"]


def lateness_frame(
    rows: Sequence[WindowRow], services: Sequence[str] | None = None
) -> pd.DataFrame:
    """Per window: late events, stragglers, duplicates and the revision (highest of the services).

    `services` None: the `*` rows; else summed over those services.
    """
    picked, _ = pick_services(rows, services)
    df = pd.DataFrame(
        [(w.window_start, w.late, w.stragglers, w.duplicates, w.revision) for w in picked],
        columns=["window_start", "late", "stragglers", "duplicates", "revision"],
    )
    df = df.groupby("window_start", as_index=False).agg(
        {"late": "sum", "stragglers": "sum", "duplicates": "sum", "revision": "max"}
    )
    df["window_start"] = to_utc(df["window_start"])
    return df.sort_values("window_start").reset_index(drop=True)


def digest_histogram(digest: TDigest, bins: int = 40) -> pd.DataFrame:
    """A histogram (lo, hi, count) of the values a t-digest summarises, from its centroids.

    Each centroid's weight goes to the bin holding its mean: exact for the digest's small
    centroids at the tails, approximate in the middle, which is what a histogram shows anyway.
    """
    means, weights = digest.centroids
    if not len(means):
        return pd.DataFrame({"lo": [], "hi": [], "count": []})
    lo, hi = float(digest.min), float(digest.max)
    if hi <= lo:
        hi = lo + 1.0
    counts, edges = np.histogram(means, bins=bins, range=(lo, hi), weights=weights)
    return pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": counts})


def what_if_frame(result: LatenessResult, points: int = 60) -> pd.DataFrame:
    """Allowed lateness (ms) -> share of events that would have been late, over a grid.

    The grid runs from 0 to just past the largest overdue seen (after which nothing is late).
    """
    top = float(result.overdue.max) if result.overdue.count else 0.0
    grid = np.unique(np.linspace(0.0, max(top * 1.05, 1000.0), points).round().astype(np.int64))
    return pd.DataFrame(
        {
            "allowed_lateness_ms": grid,
            "fraction_late": [result.fraction_late(int(v)) for v in grid],
        }
    )


def late_events_frame(events: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Kept late events as a table: broker time, service, event time, how far behind, where."""
    return pd.DataFrame(
        {
            "broker time (UTC)": to_utc([int(e.get("kafka_timestamp") or 0) for e in events]),
            "service": [e.get("service") for e in events],
            "event time (UTC)": to_utc([int(e["event_time"]) for e in events]),
            "behind watermark": [format_age(int(e.get("behind_ms") or 0)) for e in events],
            "partition:offset": [f"{e.get('partition')}:{e.get('offset')}" for e in events],
        }
    )
