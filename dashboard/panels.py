"""What the live panels say and draw, as data: shared by the Streamlit page and the wall page.

The Streamlit page (`dashboard/app.py`) lays these out with widgets; the wall page
(`dashboard/wall.py`) sends them to every screen as one JSON document. Pure functions of a
snapshot (`dashboard/data.py`), so both show the same figures, alerts and warnings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from dashboard import data, figures, health, job_status, lateness, marks, times
from dashboard.headline import Headline, headline
from dashboard.shared import Derived
from tidegauge.alerts.rules import ongoing, title
from tidegauge.core.durations import format_duration, to_iso
from tidegauge.core.store import ALL_SERVICES

__all__ = [
    "FALLBACK_STALE_MS",
    "NO_STATUS",
    "Notice",
    "alert_notices",
    "event_marks",
    "events_figure",
    "health_figure",
    "latency_figure",
    "lateness_figure",
    "only_shown",
    "shared_headline",
    "shown_services",
    "stale_notice",
]

#: Before the job states its report interval, a status older than this reads as stale.
FALLBACK_STALE_MS = 5_000

#: What the status panel says when the store has windows but the job wrote no status yet.
NO_STATUS = "The job has written windows but no status yet."


@dataclass(frozen=True)
class Notice:
    """A banner: `level` "error" (confirmed alert) or "warning" (tentative alert, stale job)."""

    level: str
    text: str


def alert_notices(snap: data.Snapshot) -> list[Notice]:
    """Ongoing alert firings (docs/alerts.md), confirmed ones as errors; none when none."""
    if not snap.firings or snap.spec is None or snap.newest_start_ms is None:
        return []
    lateness = snap.status.allowed_lateness_ms if snap.status else None
    slack = (lateness or 0) + 2 * snap.spec.size_ms
    out = []
    for x in ongoing(snap.firings, snap.spec.end(snap.newest_start_ms), slack):
        text = (
            f"**{title(x)}**: {x.state}, since {to_iso(x.start)}, "
            f"{x.windows} window(s), worst {x.peak:,.4g}"
        )
        if x.state == "confirmed":
            out.append(Notice("error", text))
        else:
            out.append(
                Notice("warning", text + " (windows still open: stragglers may withdraw it)")
            )
    return out


def shared_headline(snap: data.Snapshot, d: Derived, f: data.Filters) -> list[Headline]:
    """The snapshot's `headline`, built once (`d`) for every viewer of the page and the wall."""
    heads: list[Headline] = d.get(
        "headline",
        lambda: headline(
            snap.status, snap.windows, snap.batches, snap.read_at_ms, f.range_ms, snap.sliding
        ),
    )
    return heads


def stale_notice(snap: data.Snapshot, stale_after_ms: int | None) -> Notice | None:
    """A warning when the job has not reported for longer than it should have, else None."""
    if snap.status is None:
        return None
    stale_ms = job_status.stale_after_ms(snap.status, stale_after_ms, FALLBACK_STALE_MS)
    view = job_status.status_view(snap.status, snap.read_at_ms, stale_ms)
    if not view.stale:
        return None
    silent = snap.read_at_ms - max(snap.status.status_time, snap.status.batch_time)
    return Notice(
        "warning",
        f"**Stale**: the job has not reported for {times.format_age(silent)} (more than "
        f"{format_duration(stale_ms)}); its last batch #{view.batch_id} ran "
        f"{times.format_age(view.batch_age_ms)} ago. The job may be stopped, stuck, or "
        "unable to reach Redis. The figures below are the last ones it wrote.",
    )


def shown_services(f: data.Filters) -> list[str] | None:
    """The services the series sum over, or None for the stored all-services (`*`) rows."""
    return list(f.services) if f.services else None


def with_others(frame: pd.DataFrame, snap: data.Snapshot, f: data.Filters) -> pd.DataFrame:
    """`frame` (windows of `*` and the drawn services) plus one line for the services not drawn.

    Their events per window are `*`'s less the drawn services' (exact: counts add up), under
    the name "N others". Nothing is added when every service is drawn or some are chosen.
    """
    others = snap.others
    if f.services or not others or frame.empty:
        return frame
    total = frame[frame["service"] == ALL_SERVICES].set_index("window_start")
    drawn = frame[frame["service"] != ALL_SERVICES].groupby("window_start")[["count"]].sum()
    rest = total[["window_end", "count"]].copy()
    rest["count"] = (rest["count"] - drawn["count"].reindex(rest.index, fill_value=0)).clip(0)
    sizes = (rest["window_end"] - rest.index).dt.total_seconds()
    rest["events_per_s"] = rest["count"] / sizes
    rest["service"] = others_name(len(others))
    rest = rest.reset_index()[list(frame.columns)]
    return pd.concat([frame, rest], ignore_index=True)


def others_name(n: int) -> str:
    """The name of the line of the services not drawn."""
    return f"{n:,} other{'s' if n != 1 else ''}"


def only_shown(frame: pd.DataFrame, f: data.Filters) -> pd.DataFrame:
    """Rows of the chosen services and the `*` total (all rows when none are chosen)."""
    if not f.services:
        return frame
    return frame[frame["service"].isin([ALL_SERVICES, *f.services])].reset_index(drop=True)


def event_marks(
    snap: data.Snapshot, range_ms: int, services: tuple[str, ...], only: str | None = None
) -> list[marks.Mark]:
    """Alert firings and event-time annotations of these services (all: `()`), in range.

    `only`: the firings of exactly this service (a chart of one service's own windows).
    """
    if snap.spec is None or snap.newest_start_ms is None:
        return []
    until = snap.spec.end(snap.newest_start_ms)
    ours = (ALL_SERVICES, *services)
    firings = [
        x
        for x in snap.firings
        if (x.service == only if only is not None else not services or x.service in ours)
    ]
    notes = [
        a for a in snap.annotations if a.domain == "event" and (not services or a.service in ours)
    ]
    found = marks.firing_marks(firings) + marks.annotation_marks(notes)
    return marks.clip(found, until - range_ms, until)


def events_figure(
    snap: data.Snapshot,
    frame: pd.DataFrame,
    order: Sequence[str],
    f: data.Filters,
    show_total: bool,
) -> figures.Figure:
    """Events per second by service (`frame`: the shown services' windows), marked."""
    wm = snap.status.watermark if snap.status and snap.status.watermark > 0 else None
    return marks.mark(
        figures.events_per_second(
            frame,
            services=list(order),
            window_size_ms=snap.window_size_ms,
            watermark=None if wm is None else times.to_utc([wm]).iloc[0].to_pydatetime(),
            show_total=show_total,
        ),
        event_marks(snap, f.range_ms, f.services),
    )


def latency_figure(
    snap: data.Snapshot,
    metrics: pd.DataFrame,
    service: str,
    f: data.Filters,
    sliding_metrics: Callable[[], pd.DataFrame],
) -> figures.Figure:
    """Latency percentiles of `service` (`*` = all) per window, with a sliding window's p99.

    `sliding_metrics`: gives `windows.metrics_frame(snap.sliding)`; called only when the
    snapshot has a sliding spec other than the charts' own.
    """
    return marks.mark(
        figures.latency_percentiles(
            metrics,
            service,
            window_size_ms=snap.window_size_ms,
            rolling=None if snap.sliding_spec in (None, snap.spec) else sliding_metrics(),
            rolling_size_ms=snap.sliding_spec.size_ms if snap.sliding_spec else None,
        ),
        event_marks(snap, f.range_ms, () if service == ALL_SERVICES else (service,), only=service),
    )


def lateness_figure(snap: data.Snapshot, f: data.Filters) -> figures.Figure:
    """Late events and stragglers per window of the shown services."""
    return figures.lateness_windows(
        lateness.lateness_frame(snap.windows, shown_services(f)), window_size_ms=snap.window_size_ms
    )


def health_figure(snap: data.Snapshot) -> figures.Figure:
    """Per batch: rows/s in and out, duration and freshness (the job's own health)."""
    return figures.pipeline_health(health.health_frame(snap.batches))
