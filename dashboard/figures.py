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
from plotly.subplots import make_subplots

from tidegauge.durations import format_duration
from tidegauge.store import ALL_SERVICES

__all__ = [
    "DOMAIN_STYLE",
    "LATENCY_PERCENTILES",
    "TOTAL_NAME",
    "UIREVISION",
    "distinct_users",
    "empty_figure",
    "events_per_second",
    "latency_cdf",
    "latency_percentiles",
    "lateness_histogram",
    "lateness_windows",
    "pipeline_health",
    "time_domains",
    "what_if",
]

#: Constant, so user interactions survive every refresh.
UIREVISION = "tidegauge"

#: Legend name of the all-services line.
TOTAL_NAME = "all services (*)"

#: Percentile columns of the latency chart, in trace order, with their line colours.
LATENCY_PERCENTILES = {"p50": "#2ca02c", "p95": "#ff7f0e", "p99": "#d62728"}

#: Legend name and colour of each time domain's rate series, in trace order.
DOMAIN_STYLE = {
    "event": ("by event time", "#1f77b4"),
    "processing": ("by processing time", "#ff7f0e"),
    "broker": ("by broker time", "#2ca02c"),
}

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
    if "users_lo" in frame:
        # The error band first (under the lines), one filled polygon per shown line.
        for svc in [ALL_SERVICES, *[s for s in services if s != ALL_SERVICES]]:
            part = frame[frame["service"] == svc]
            fig.add_trace(
                go.Scatter(
                    x=pd.concat([part["window_start"], part["window_start"][::-1]]),
                    y=pd.concat([part["users_hi"], part["users_lo"][::-1]]),
                    fill="toself",
                    fillcolor="rgba(31,119,180,0.12)",
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                    name=f"{_service_label(svc)} ±2 SE",
                    visible=show_total if svc == ALL_SERVICES else True,
                )
            )
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


def time_domains(
    arrivals: pd.DataFrame, watermarks: pd.DataFrame, *, show_broker: bool = False
) -> go.Figure:
    """Event time vs processing time: the rate series on one time axis, the watermark below.

    Top: events/s per window counted by event time, by processing time (when the job ran the
    batch) and, when `show_broker`, by the broker's record timestamp. Bottom, on the same x
    axis: the watermark and the max event time after each batch, against when the batch ran;
    the grey diagonal is "event time = processing time". A backlog shows as a flat event-time
    line with a processing-time spike above it, and a watermark that stalls then climbs.
    Always the same traces in the same order (broker hidden, not removed) so zoom and legend
    toggles survive refreshes.
    """
    if arrivals.empty and watermarks.empty:
        return empty_figure("No batches yet: waiting for the job to write results")
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.62, 0.38],
        vertical_spacing=0.06,
    )
    _base_layout(fig)
    fig.update_layout(height=560)
    for domain, (name, color) in DOMAIN_STYLE.items():
        part = arrivals[arrivals["domain"] == domain] if not arrivals.empty else arrivals
        fig.add_trace(
            go.Scatter(
                x=part["window_start"] if len(part) else [],
                y=part["events_per_s"] if len(part) else [],
                name=name,
                mode="lines+markers",
                marker={"size": 4},
                line={"width": 2.2 if domain == "event" else 1.8, "color": color},
                visible=show_broker if domain == "broker" else True,
                hovertemplate=f"{name}: %{{y:,.1f}} events/s<extra></extra>",
            ),
            row=1,
            col=1,
        )
    wm = watermarks
    fig.add_trace(
        go.Scatter(
            x=wm["batch_time"],
            y=wm["watermark"],
            name="watermark",
            mode="lines",
            line={"width": 2.2, "color": "#9467bd", "shape": "hv"},
            hovertemplate="watermark %{y|%H:%M:%S}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=wm["batch_time"],
            y=wm["max_event_time"],
            name="max event time",
            mode="lines",
            line={"width": 1.4, "color": "#8c564b", "dash": "dot", "shape": "hv"},
            hovertemplate="max event time %{y|%H:%M:%S}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    ends = pd.concat([wm["batch_time"].iloc[[0, -1]]]) if len(wm) else pd.Series(dtype=object)
    fig.add_trace(
        go.Scatter(
            x=ends,
            y=ends,
            name="event time = processing time",
            mode="lines",
            line={"width": 1, "color": _TOTAL_COLOR, "dash": "dash"},
            hoverinfo="skip",
        ),
        row=2,
        col=1,
    )
    fig.update_yaxes(title_text="events/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="event time (UTC)", type="date", row=2, col=1)
    fig.update_xaxes(type="date", row=1, col=1)
    fig.update_xaxes(title_text="time (UTC): window start, or when the batch ran", row=2, col=1)
    return fig


def latency_cdf(frame: pd.DataFrame, services: Sequence[str] = ()) -> go.Figure:
    """The latency CDF of the selected range per service, from merged t-digests.

    `frame` is a `dashboard.frames.cdf_frame`; one line per service (`*` first, thick grey),
    log x axis because latencies span orders of magnitude.
    """
    if frame.empty:
        return empty_figure("No latencies in this range")
    fig = go.Figure()
    _base_layout(fig)
    fig.update_layout(hovermode="closest")
    present = list(dict.fromkeys(frame["service"]))
    order = [s for s in [ALL_SERVICES, *services] if s in present]
    order += [s for s in present if s not in order]
    for svc in order:
        part = frame[frame["service"] == svc]
        total = svc == ALL_SERVICES
        fig.add_trace(
            go.Scatter(
                x=part["latency_ms"],
                y=part["fraction"],
                name=_service_label(svc),
                mode="lines",
                line={"width": 3, "color": _TOTAL_COLOR} if total else {"width": 1.8},
                hovertemplate="%{x:,.1f} ms: %{y:.1%} of requests at or below<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="latency (ms, log scale)", type="log")
    fig.update_yaxes(title_text="fraction of requests ≤ latency", range=[0, 1.02])
    return fig


def lateness_windows(frame: pd.DataFrame, *, window_size_ms: int | None = None) -> go.Figure:
    """Late events and stragglers per window (bars), and each window's revision (markers).

    `frame` is a `dashboard.frames.lateness_frame`. Revisions count the batches that corrected
    an already emitted window; they use the right-hand axis.
    """
    if frame.empty:
        return empty_figure("No windows yet")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    _base_layout(fig)
    fig.update_layout(barmode="group")
    fig.add_trace(
        go.Bar(
            x=frame["window_start"], y=frame["late"], name="late events", marker_color="#d62728"
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Bar(
            x=frame["window_start"],
            y=frame["stragglers"],
            name="stragglers",
            marker_color="#ff7f0e",
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=frame["window_start"],
            y=frame["revision"],
            name="revision",
            mode="markers",
            marker={"size": 7, "symbol": "diamond", "color": "#9467bd"},
        ),
        secondary_y=True,
    )
    fig.update_xaxes(title_text=_time_title(window_size_ms), type="date")
    fig.update_yaxes(title_text="events", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(
        title_text="revision", rangemode="tozero", tickformat=",d", secondary_y=True
    )
    return fig


def lateness_histogram(frame: pd.DataFrame) -> go.Figure:
    """How late events arrived (broker time − event time), from the merged lateness digests.

    `frame` is a `dashboard.frames.digest_histogram` in ms; shown in seconds.
    """
    if frame.empty or not frame["count"].sum():
        return empty_figure("No lateness measured in this range")
    fig = go.Figure()
    _base_layout(fig)
    fig.update_layout(hovermode="closest")
    width = (frame["hi"] - frame["lo"]) / 1000.0
    fig.add_trace(
        go.Bar(
            x=(frame["lo"] / 1000.0) + width / 2,
            y=frame["count"],
            width=width,
            name="events",
            marker_color="#1f77b4",
            hovertemplate="%{x:,.2f} s: %{y:,.0f} events<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="lateness: broker time − event time (s)")
    # Log counts: the few very late events must stay visible next to the on-time bulk.
    fig.update_yaxes(title_text="events (log scale)", type="log")
    return fig


def what_if(frame: pd.DataFrame, *, chosen_ms: int, job_ms: int | None = None) -> go.Figure:
    """Share of events that would have been late for each allowed lateness (what-if curve).

    `frame` is a `dashboard.frames.what_if_frame`; a marker at the user's choice, and a dashed
    line at the job's real allowed lateness when known.
    """
    if frame.empty:
        return empty_figure("No events in this range")
    fig = go.Figure()
    _base_layout(fig)
    fig.update_layout(hovermode="closest", height=320)
    x = frame["allowed_lateness_ms"] / 1000.0
    fig.add_trace(
        go.Scatter(
            x=x,
            y=frame["fraction_late"],
            name="would be late",
            mode="lines",
            line={"width": 2, "color": "#d62728", "shape": "hv"},
            hovertemplate="allowed %{x:,.1f} s: %{y:.2%} late<extra></extra>",
        )
    )
    at = frame.iloc[(frame["allowed_lateness_ms"] - chosen_ms).abs().argsort()[:1]]
    fig.add_trace(
        go.Scatter(
            x=[chosen_ms / 1000.0],
            y=at["fraction_late"],
            name="your choice",
            mode="markers",
            marker={"size": 11, "color": "#d62728", "line": {"width": 2, "color": "white"}},
        )
    )
    if job_ms is not None:
        fig.add_vline(
            x=job_ms / 1000.0,
            line_dash="dash",
            line_color=_TOTAL_COLOR,
            annotation_text="job's allowed lateness",
        )
    fig.update_xaxes(title_text="allowed lateness (s)", rangemode="tozero")
    fig.update_yaxes(title_text="fraction late", tickformat=".2%", rangemode="tozero")
    return fig


def pipeline_health(frame: pd.DataFrame) -> go.Figure:
    """Input vs processed rows/s per batch (top) and batch duration (bottom), by batch time.

    Processed below input for long means the job falls behind; duration near the trigger
    interval means it has no headroom left.
    """
    if frame.empty:
        return empty_figure("No batches yet")
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.08
    )
    _base_layout(fig)
    for name, col, color in (
        ("input rows/s", "input_rows_per_s", "#1f77b4"),
        ("processed rows/s", "processed_rows_per_s", "#2ca02c"),
    ):
        fig.add_trace(
            go.Scatter(
                x=frame["batch_time"],
                y=frame[col],
                name=name,
                mode="lines",
                line={"width": 1.8, "color": color},
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            x=frame["batch_time"],
            y=frame["batch_duration_ms"],
            name="batch duration (ms)",
            marker_color="#7f7f7f",
            customdata=frame[["batch_id"]].to_numpy(),
            hovertemplate="batch #%{customdata[0]}: %{y:,} ms<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.update_yaxes(title_text="rows/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="duration (ms)", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(type="date", row=1, col=1)
    fig.update_xaxes(title_text="processing time (UTC), when the batch ran", row=2, col=1)
    return fig
