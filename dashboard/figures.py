"""Plotly figures as pure functions: frames from `dashboard.data` in, `go.Figure` out.

Every figure sets `layout.uirevision` to a constant and keeps its traces in a stable order, so
when the page refreshes, plotly.js keeps what the user did (zoom, pan, legend toggles) instead
of resetting it. Nothing here sets an explicit axis range for the same reason: a range that
changes with each refresh would override the user's zoom. Times are naive datetimes in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pandas as pd
import plotly.graph_objects as go

from tidegauge.durations import format_duration
from tidegauge.store import ALL_SERVICES

__all__ = [
    "LATENCY_PERCENTILES",
    "TOTAL_NAME",
    "UIREVISION",
    "distinct_users",
    "empty_figure",
    "events_per_second",
    "latency_percentiles",
]

#: Constant, so user interactions survive every refresh.
UIREVISION = "tidegauge"

#: Legend name of the all-services line.
TOTAL_NAME = "all services (*)"

#: Percentile columns of the latency chart, in trace order, with their line colours.
LATENCY_PERCENTILES = {"p50": "#2ca02c", "p95": "#ff7f0e", "p99": "#d62728"}

_HEIGHT = 420
_TOTAL_COLOR = "#7f7f7f"


def _base_layout(fig: go.Figure) -> None:
    fig.update_layout(
        uirevision=UIREVISION,
        height=_HEIGHT,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        hovermode="x unified",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )


def empty_figure(message: str) -> go.Figure:
    """A valid figure with no data and `message` in the middle (axes hidden)."""
    fig = go.Figure()
    _base_layout(fig)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(
        text=message,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        showarrow=False,
        font={"size": 16},
    )
    return fig


def _time_title(window_size_ms: int | None) -> str:
    title = "event time (UTC), window start"
    if window_size_ms:
        title += f"; {format_duration(window_size_ms)} windows"
    return title


def _service_lines(
    fig: go.Figure,
    frame: pd.DataFrame,
    column: str,
    services: Sequence[str],
    show_total: bool,
    *,
    customdata: str | None,
    hovertemplate: str,
) -> None:
    """One line of `column` per service: the `*` total first, then `services`, then the rest.

    The stable order is what keeps legend toggles on the right line (see `events_per_second`).
    """
    present = {s for s in frame["service"].unique() if s != ALL_SERVICES}
    order = [s for s in services if s != ALL_SERVICES]
    order += sorted(present - set(order))
    for svc in [ALL_SERVICES, *order]:
        part = frame[frame["service"] == svc]
        total = svc == ALL_SERVICES
        fig.add_trace(
            go.Scatter(
                x=part["window_start"],
                y=part[column],
                customdata=None if customdata is None else part[[customdata]].to_numpy(),
                name=TOTAL_NAME if total else svc,
                mode="lines+markers",
                marker={"size": 4},
                line=(
                    {"width": 3.5, "dash": "dash", "color": _TOTAL_COLOR}
                    if total
                    else {"width": 1.8}
                ),
                visible=show_total if total else True,
                hovertemplate=hovertemplate,
            )
        )


def events_per_second(
    frame: pd.DataFrame,
    *,
    services: Sequence[str] = (),
    window_size_ms: int | None = None,
    watermark: datetime | None = None,
    show_total: bool = True,
) -> go.Figure:
    """Events/s per service over event time: one line per service, `*` as a thick dashed line.

    `frame` is a `dashboard.data.windows_frame`: x is the window start (UTC), y `events_per_s`.
    Traces come in a stable order: the `*` total first (hidden, not removed, when `show_total`
    is false), then `services` in the given order (a service without rows in `frame` keeps an
    empty trace), then any other service in `frame`, sorted. Streamlit drops trace `uid`s, so
    plotly.js matches the user's legend toggles to traces by index; a stable order keeps them
    on the right line across refreshes. With `watermark` (naive UTC), windows ending after it
    are shaded as still open: their counts can still grow, so the newest point usually dips.
    """
    if frame.empty:
        return empty_figure("No windows yet: waiting for the job to write results")
    fig = go.Figure()
    _base_layout(fig)
    _service_lines(
        fig,
        frame,
        "events_per_s",
        services,
        show_total,
        customdata="count",
        hovertemplate="%{y:,.1f} events/s (%{customdata[0]:,} events)",
    )
    fig.update_xaxes(title_text=_time_title(window_size_ms), type="date")
    fig.update_yaxes(title_text="events/s", rangemode="tozero")
    if watermark is not None and window_size_ms:
        newest_end = frame["window_end"].max()
        if watermark < newest_end:
            # A window is final once its end <= watermark; x is the window start, so windows
            # still open are those starting after watermark - size.
            first_open = watermark - pd.Timedelta(milliseconds=window_size_ms)
            fig.add_vrect(
                x0=max(first_open, frame["window_start"].min()),
                x1=frame["window_start"].max(),
                fillcolor="#1f77b4",
                opacity=0.07,
                line_width=0,
                annotation_text="open windows",
                annotation_position="top left",
            )
    return fig


def latency_percentiles(
    frame: pd.DataFrame,
    service: str = ALL_SERVICES,
    *,
    window_size_ms: int | None = None,
) -> go.Figure:
    """p50, p95 and p99 latency (ms) of one service's windows over event time.

    `frame` is a `dashboard.data.metrics_frame`; `service` may be `*` (all services, whose
    percentiles come from the merged t-digest, not from averaging services). Always three
    traces in the order of `LATENCY_PERCENTILES`, so legend toggles stay put across refreshes
    and service changes. A window without latencies leaves a gap (NaN), not a zero.
    """
    part = frame[frame["service"] == service] if not frame.empty else frame
    if part.empty:
        return empty_figure(f"No windows for {_service_label(service)} yet")
    fig = go.Figure()
    _base_layout(fig)
    for name, color in LATENCY_PERCENTILES.items():
        fig.add_trace(
            go.Scatter(
                x=part["window_start"],
                y=part[name],
                customdata=part[["latency_count"]].to_numpy(),
                name=name,
                mode="lines+markers",
                marker={"size": 4},
                line={"width": 1.8, "color": color},
                connectgaps=False,
                hovertemplate=f"{name} %{{y:,.1f}} ms (%{{customdata[0]:,}} latencies)",
            )
        )
    fig.update_xaxes(title_text=_time_title(window_size_ms), type="date")
    fig.update_yaxes(title_text="latency (ms)", rangemode="tozero")
    return fig


def distinct_users(
    frame: pd.DataFrame,
    *,
    services: Sequence[str] = (),
    window_size_ms: int | None = None,
    show_total: bool = True,
) -> go.Figure:
    """Distinct users per window and service over event time (HyperLogLog estimates).

    `frame` is a `dashboard.data.metrics_frame`. Same trace order and total handling as
    `events_per_second`. The `*` line is the distinct users across all services (the merged
    HyperLogLog), which is less than the sum of the services' lines when users overlap.
    """
    if frame.empty:
        return empty_figure("No windows yet: waiting for the job to write results")
    fig = go.Figure()
    _base_layout(fig)
    _service_lines(
        fig,
        frame,
        "distinct_users",
        services,
        show_total,
        customdata=None,
        hovertemplate="%{y:,} users",
    )
    xtitle = _time_title(window_size_ms)
    fig.update_xaxes(title_text=xtitle, type="date")
    fig.update_yaxes(title_text="distinct users per window (users)", rangemode="tozero")
    return fig


def _service_label(service: str) -> str:
    return TOTAL_NAME if service == ALL_SERVICES else service
