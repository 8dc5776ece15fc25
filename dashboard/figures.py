"""Plotly figures as pure functions: the dashboard's tables in, figure dicts out.

A figure is the JSON plotly.js takes, `{"data": [trace, ...], "layout": {...}}`, built from
numpy arrays. Not `go.Figure` objects: validating every trace on every refresh cost ~10 ms a
chart, and dashboard/chart.py sends JSON anyway. The tests validate each figure with
`go.Figure(fig)` instead, so a misspelt property still fails loudly.

Every figure sets `layout.uirevision` to a constant and keeps its traces in a stable order, so
when the page refreshes, plotly.js keeps what the user did (zoom, pan, legend toggles) instead
of resetting it. Nothing here sets an explicit axis range on a time axis for the same reason:
a range that changed with each refresh would override the user's zoom. Times are naive
datetimes in UTC (numpy datetime64), which reach plotly.js as ISO strings without an offset.
Alert firings and annotations are drawn over these figures by `dashboard.marks`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from tidegauge.core.durations import format_duration
from tidegauge.core.store import ALL_SERVICES

__all__ = [
    "DOMAIN_STYLE",
    "FRESHNESS_STYLE",
    "LATENCY_PERCENTILES",
    "TEMPLATE",
    "TOTAL_NAME",
    "UIREVISION",
    "Figure",
    "distinct_users",
    "empty_figure",
    "events_per_second",
    "latency_cdf",
    "latency_percentiles",
    "lateness_histogram",
    "lateness_windows",
    "pipeline_health",
    "service_label",
    "time_domains",
    "what_if",
]

#: A plotly.js figure: {"data": [trace dicts], "layout": {...}}.
Figure = dict[str, Any]

#: Constant, so user interactions survive every refresh.
UIREVISION = "tidegauge"

#: plotly's light template, named (not the process default, which Streamlit replaces with
#: placeholder colours that only its own chart element fills in).
TEMPLATE = "plotly_white"

#: Legend name of the all-services line.
TOTAL_NAME = "all services (*)"

#: Percentile columns of the latency chart, in trace order, with their line colours.
LATENCY_PERCENTILES = {"p50": "#2ca02c", "p95": "#ff7f0e", "p99": "#d62728"}
#: The rolling p99 of a sliding window (dashed), drawn with the window percentiles.
ROLLING_COLOR = "#9467bd"

#: Legend name and colour of each time domain's rate series, in trace order.
DOMAIN_STYLE = {
    "event": ("by event time", "#1f77b4"),
    "processing": ("by processing time", "#ff7f0e"),
    "broker": ("by broker time", "#2ca02c"),
}

#: `health.health_frame` freshness columns of `pipeline_health`, in trace order: legend name
#: and line style.
FRESHNESS_STYLE: dict[str, tuple[str, dict[str, Any]]] = {
    "freshness_p50_ms": ("freshness p50", {"width": 1.6, "color": "#17becf"}),
    "freshness_p99_ms": ("freshness p99", {"width": 2.2, "color": "#d62728"}),
    "freshness_max_ms": ("freshness max", {"width": 1.4, "color": "#8c564b", "dash": "dot"}),
}

_HEIGHT = 420
_TOTAL_COLOR = "#7f7f7f"


def _layout(**extra: Any) -> dict[str, Any]:
    """The layout every chart shares (constant uirevision, legend on top), plus `extra`."""
    return {
        "template": TEMPLATE,
        "uirevision": UIREVISION,
        "height": _HEIGHT,
        "margin": {"l": 10, "r": 10, "t": 30, "b": 10},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        **extra,
    }


def _axis(title: str | None = None, **extra: Any) -> dict[str, Any]:
    """An axis whose labels get room of their own (automargin), titled when `title`."""
    out: dict[str, Any] = {"automargin": True, **extra}
    if title is not None:
        out["title"] = {"text": title}
    return out


def _col(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as a numpy array: what plotly's JSON encoder turns into a list fastest."""
    return frame[column].to_numpy()


def _stacked(
    shares: Sequence[float], spacing: float, *, x_title: str, ys: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Axes of plots stacked on one time axis, as `make_subplots(rows=n, shared_xaxes=True)`.

    `shares` are the plots' shares of the height, top first; `spacing` the gap between two
    plots; `ys` each plot's y axis settings (`_axis` arguments: title and any property).
    Plot i (from 1, top down) uses xaxis "x{i}" and yaxis "y{i}" ("x" and "y" for the first);
    every x axis matches the bottom one, which alone has tick labels and `x_title`.
    """
    n = len(shares)
    height = 1.0 - spacing * (n - 1)
    out: dict[str, Any] = {}
    top = 1.0
    for i, (share, y) in enumerate(zip(shares, ys, strict=True), start=1):
        last = i == n
        bottom = 0.0 if last else top - share * height
        suffix = "" if i == 1 else str(i)
        out[f"xaxis{suffix}"] = (
            _axis(x_title, anchor=f"y{suffix}", type="date")
            if last
            else _axis(anchor=f"y{suffix}", matches=f"x{n}", showticklabels=False, type="date")
        )
        out[f"yaxis{suffix}"] = _axis(anchor=f"x{suffix}", domain=[bottom, top], **y)
        top = bottom - spacing
    return out


def empty_figure(message: str) -> Figure:
    """A valid figure with no data and `message` in the middle (axes hidden)."""
    return {
        "data": [],
        "layout": _layout(
            xaxis={"visible": False},
            yaxis={"visible": False},
            annotations=[
                {
                    "text": message,
                    "xref": "paper",
                    "yref": "paper",
                    "x": 0.5,
                    "y": 0.5,
                    "showarrow": False,
                    "font": {"size": 16},
                }
            ],
        ),
    }


def _time_title(window_size_ms: int | None) -> str:
    title = "event time (UTC), window start"
    if window_size_ms:
        title += f"; {format_duration(window_size_ms)} windows"
    return title


def _by_service(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The frame's rows per service, split once (not one boolean mask per trace)."""
    return {str(k): v for k, v in frame.groupby("service", sort=False)}


def _line_order(frame: pd.DataFrame, services: Sequence[str]) -> list[str]:
    """`*` first, then `services` in the given order, then any other service present, sorted."""
    present = {s for s in frame["service"].unique() if s != ALL_SERVICES}
    order = [s for s in services if s != ALL_SERVICES]
    return [ALL_SERVICES, *order, *sorted(present - set(order))]


def _service_lines(
    frame: pd.DataFrame,
    column: str,
    services: Sequence[str],
    show_total: bool,
    *,
    customdata: str | None,
    hovertemplate: str,
) -> list[dict[str, Any]]:
    """One line of `column` per service in `_line_order`; `*` thick, dashed and grey.

    A service in `services` without rows keeps an empty trace: the stable order is what keeps
    legend toggles on the right line (see `events_per_second`).
    """
    parts = _by_service(frame)
    empty = frame.iloc[:0]
    traces = []
    for svc in _line_order(frame, services):
        part = parts.get(svc, empty)
        total = svc == ALL_SERVICES
        trace: dict[str, Any] = {
            "type": "scatter",
            "x": _col(part, "window_start"),
            "y": _col(part, column),
            "name": service_label(svc),
            "mode": "lines+markers",
            "marker": {"size": 4},
            "line": (
                {"width": 3.5, "dash": "dash", "color": _TOTAL_COLOR} if total else {"width": 1.8}
            ),
            "visible": show_total if total else True,
            "hovertemplate": hovertemplate,
        }
        if customdata is not None:
            trace["customdata"] = _col(part, customdata)[:, None]
        traces.append(trace)
    return traces


def events_per_second(
    frame: pd.DataFrame,
    *,
    services: Sequence[str] = (),
    window_size_ms: int | None = None,
    watermark: datetime | None = None,
    show_total: bool = True,
) -> Figure:
    """Events/s per service over event time: one line per service, `*` as a thick dashed line.

    `frame` is a `dashboard.windows.windows_frame`: x is the window start (UTC), y
    `events_per_s`. Traces come in a stable order: the `*` total first (hidden, not removed,
    when `show_total` is false), then `services` in the given order (a service without rows
    keeps an empty trace), then any other service in `frame`, sorted. plotly.js matches the
    user's legend toggles to traces by index, so a stable order keeps them on the right line
    across refreshes. With `watermark` (naive UTC), windows ending after it are shaded as still
    open: their counts can still grow, so the newest point usually dips.
    """
    if frame.empty:
        return empty_figure("No windows yet: waiting for the job to write results")
    layout = _layout(
        xaxis=_axis(_time_title(window_size_ms), type="date"),
        yaxis=_axis("events/s", rangemode="tozero"),
    )
    if watermark is not None and window_size_ms:
        newest_end = frame["window_end"].max()
        if watermark < newest_end:
            # A window is final once its end <= watermark; x is the window start, so windows
            # still open are those starting after watermark - size.
            first_open = watermark - pd.Timedelta(milliseconds=window_size_ms)
            x0 = max(pd.Timestamp(first_open), frame["window_start"].min())
            x1 = frame["window_start"].max()
            layout["shapes"] = [
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": x0.isoformat(),
                    "x1": x1.isoformat(),
                    "y0": 0,
                    "y1": 1,
                    "fillcolor": "#1f77b4",
                    "opacity": 0.07,
                    "line": {"width": 0},
                    "layer": "below",
                }
            ]
            layout["annotations"] = [
                {
                    "text": "open windows",
                    "xref": "x",
                    "yref": "paper",
                    "x": x0.isoformat(),
                    "y": 1,
                    "xanchor": "left",
                    "yanchor": "top",
                    "showarrow": False,
                }
            ]
    data = _service_lines(
        frame,
        "events_per_s",
        services,
        show_total,
        customdata="count",
        hovertemplate="%{y:,.1f} events/s (%{customdata[0]:,} events)",
    )
    return {"data": data, "layout": layout}


def latency_percentiles(
    frame: pd.DataFrame,
    service: str = ALL_SERVICES,
    *,
    window_size_ms: int | None = None,
    rolling: pd.DataFrame | None = None,
    rolling_size_ms: int | None = None,
) -> Figure:
    """p50, p95 and p99 latency (ms) of one service's windows over event time.

    `frame` is a `dashboard.windows.metrics_frame`; `service` may be `*` (all services, whose
    percentiles come from the merged t-digest, not from averaging services). Always three
    traces in the order of `LATENCY_PERCENTILES`, so legend toggles stay put across refreshes
    and service changes. A window without latencies leaves a gap (NaN), not a zero.
    `rolling` (a metrics frame of a sliding window's rows, `rolling_size_ms` long) adds a
    fourth, dashed line: the p99 of the `rolling_size_ms` before each point.
    """
    part = frame[frame["service"] == service] if not frame.empty else frame
    if part.empty:
        return empty_figure(f"No windows for {service_label(service)} yet")
    x = _col(part, "window_start")
    counts = _col(part, "latency_count")[:, None]
    data = [
        {
            "type": "scatter",
            "x": x,
            "y": _col(part, name),
            "customdata": counts,
            "name": name,
            "mode": "lines+markers",
            "marker": {"size": 4},
            "line": {"width": 1.8, "color": color},
            "connectgaps": False,
            "hovertemplate": f"{name} %{{y:,.1f}} ms (%{{customdata[0]:,}} latencies)",
        }
        for name, color in LATENCY_PERCENTILES.items()
    ]
    if rolling is not None and rolling_size_ms:
        roll = rolling[rolling["service"] == service] if not rolling.empty else rolling
        if not roll.empty:
            # A sliding window's point is drawn at its end, and the windows that hold the
            # newest events end up to a window's length after them: only the points up to the
            # end of the newest window drawn are figures of the past, not of the future.
            roll = roll[roll["window_end"] <= part["window_end"].max()]
        size = format_duration(rolling_size_ms)
        data.append(
            {
                "type": "scatter",
                "x": _col(roll, "window_end"),
                "y": _col(roll, "p99"),
                "customdata": _col(roll, "latency_count")[:, None],
                "name": f"p99, last {size}",
                "mode": "lines",
                "line": {"width": 2.4, "color": ROLLING_COLOR, "dash": "dash"},
                "connectgaps": False,
                "hovertemplate": f"p99 of the {size} before: %{{y:,.1f}} ms "
                "(%{customdata[0]:,} latencies)",
            }
        )
    layout = _layout(
        xaxis=_axis(_time_title(window_size_ms), type="date"),
        yaxis=_axis("latency (ms)", rangemode="tozero"),
    )
    return {"data": data, "layout": layout}


def distinct_users(
    frame: pd.DataFrame,
    *,
    services: Sequence[str] = (),
    window_size_ms: int | None = None,
    show_total: bool = True,
) -> Figure:
    """Distinct users per window and service over event time (HyperLogLog estimates).

    `frame` is a `dashboard.windows.metrics_frame` (with `users_lo`/`users_hi` from
    `windows.users_band` for the error band). Same trace order and total handling as
    `events_per_second`. The `*` line is the distinct users across all services (the merged
    HyperLogLog), which is less than the sum of the services' lines when users overlap.
    """
    if frame.empty:
        return empty_figure("No windows yet: waiting for the job to write results")
    data: list[dict[str, Any]] = []
    if "users_lo" in frame:
        # The error band first (under the lines), one filled polygon per shown line.
        parts = _by_service(frame)
        empty = frame.iloc[:0]
        for svc in [ALL_SERVICES, *[s for s in services if s != ALL_SERVICES]]:
            part = parts.get(svc, empty)
            x = _col(part, "window_start")
            data.append(
                {
                    "type": "scatter",
                    "x": np.concatenate([x, x[::-1]]),
                    "y": np.concatenate([_col(part, "users_hi"), _col(part, "users_lo")[::-1]]),
                    "fill": "toself",
                    "fillcolor": "rgba(31,119,180,0.12)",
                    "line": {"width": 0},
                    "hoverinfo": "skip",
                    "showlegend": False,
                    "name": f"{service_label(svc)} ±2 SE",
                    "visible": show_total if svc == ALL_SERVICES else True,
                }
            )
    data += _service_lines(
        frame,
        "distinct_users",
        services,
        show_total,
        customdata=None,
        hovertemplate="%{y:,} users",
    )
    layout = _layout(
        xaxis=_axis(_time_title(window_size_ms), type="date"),
        yaxis=_axis("distinct users per window (users)", rangemode="tozero"),
    )
    return {"data": data, "layout": layout}


def service_label(service: str) -> str:
    """A service name as plotly must be given it to draw it literally.

    Plotly reads a subset of HTML in trace names, titles and hover text (`<b>`, `<a href>`,
    `<br>`...); a name is producer data, so its `<`, `>` and `&` go as entities, which plotly
    draws as the characters themselves.
    """
    return TOTAL_NAME if service == ALL_SERVICES else html.escape(service, quote=False)


def time_domains(
    arrivals: pd.DataFrame, watermarks: pd.DataFrame, *, show_broker: bool = False
) -> Figure:
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
    parts = {} if arrivals.empty else {str(k): v for k, v in arrivals.groupby("domain")}
    data: list[dict[str, Any]] = []
    for domain, (name, color) in DOMAIN_STYLE.items():
        part = parts.get(domain)
        data.append(
            {
                "type": "scatter",
                "x": [] if part is None else _col(part, "window_start"),
                "y": [] if part is None else _col(part, "events_per_s"),
                "name": name,
                "mode": "lines+markers",
                "marker": {"size": 4},
                "line": {"width": 2.2 if domain == "event" else 1.8, "color": color},
                "visible": show_broker if domain == "broker" else True,
                "hovertemplate": f"{name}: %{{y:,.1f}} events/s<extra></extra>",
            }
        )
    wm = watermarks
    batch_time = _col(wm, "batch_time")
    ends = batch_time[[0, -1]] if len(wm) else batch_time
    for name, y, line, hover in (
        (
            "watermark",
            _col(wm, "watermark"),
            {"width": 2.2, "color": "#9467bd", "shape": "hv"},
            "watermark %{y|%H:%M:%S}<extra></extra>",
        ),
        (
            "max event time",
            _col(wm, "max_event_time"),
            {"width": 1.4, "color": "#8c564b", "dash": "dot", "shape": "hv"},
            "max event time %{y|%H:%M:%S}<extra></extra>",
        ),
    ):
        data.append(
            {
                "type": "scatter",
                "x": batch_time,
                "y": y,
                "name": name,
                "mode": "lines",
                "line": line,
                "hovertemplate": hover,
                "xaxis": "x2",
                "yaxis": "y2",
            }
        )
    data.append(
        {
            "type": "scatter",
            "x": ends,
            "y": ends,
            "name": "event time = processing time",
            "mode": "lines",
            "line": {"width": 1, "color": _TOTAL_COLOR, "dash": "dash"},
            "hoverinfo": "skip",
            "xaxis": "x2",
            "yaxis": "y2",
        }
    )
    axes = _stacked(
        (0.62, 0.38),
        0.06,
        x_title="time (UTC): window start, or when the batch ran",
        ys=(
            {"title": "events/s", "rangemode": "tozero"},
            {"title": "event time (UTC)", "type": "date"},
        ),
    )
    return {"data": data, "layout": _layout(height=560, **axes)}


def latency_cdf(frame: pd.DataFrame, services: Sequence[str] = ()) -> Figure:
    """The latency CDF of the selected range per service, from merged t-digests.

    `frame` is a `dashboard.latency_range.cdf_frame`; one line per service (`*` first, thick grey),
    log x axis because latencies span orders of magnitude.
    """
    if frame.empty:
        return empty_figure("No latencies in this range")
    parts = _by_service(frame)
    order = [s for s in [ALL_SERVICES, *services] if s in parts]
    order += [s for s in parts if s not in order]
    data = []
    for svc in order:
        part = parts[svc]
        total = svc == ALL_SERVICES
        data.append(
            {
                "type": "scatter",
                "x": _col(part, "latency_ms"),
                "y": _col(part, "fraction"),
                "name": service_label(svc),
                "mode": "lines",
                "line": {"width": 3, "color": _TOTAL_COLOR} if total else {"width": 1.8},
                "hovertemplate": "%{x:,.1f} ms: %{y:.1%} of requests at or below<extra></extra>",
            }
        )
    layout = _layout(
        hovermode="closest",
        xaxis=_axis("latency (ms, log scale)", type="log"),
        yaxis=_axis("fraction of requests ≤ latency", range=[0, 1.02]),
    )
    return {"data": data, "layout": layout}


def lateness_windows(frame: pd.DataFrame, *, window_size_ms: int | None = None) -> Figure:
    """Late events, stragglers and duplicates per window (bars), and each window's revision.

    `frame` is a `dashboard.lateness.lateness_frame`. Revisions count the batches that corrected
    an already emitted window; they use the right-hand axis.
    """
    if frame.empty:
        return empty_figure("No windows yet")
    x = _col(frame, "window_start")
    data = [
        {
            "type": "bar",
            "x": x,
            "y": _col(frame, "late"),
            "name": "late events",
            "marker": {"color": "#d62728"},
        },
        {
            "type": "bar",
            "x": x,
            "y": _col(frame, "stragglers"),
            "name": "stragglers",
            "marker": {"color": "#ff7f0e"},
        },
        {
            "type": "bar",
            "x": x,
            "y": _col(frame, "duplicates"),
            "name": "duplicates",
            "marker": {"color": "#7f7f7f"},
        },
        {
            "type": "scatter",
            "x": x,
            "y": _col(frame, "revision"),
            "name": "revision",
            "mode": "markers",
            "marker": {"size": 7, "symbol": "diamond", "color": "#9467bd"},
            "yaxis": "y2",
        },
    ]
    layout = _layout(
        barmode="group",
        xaxis=_axis(_time_title(window_size_ms), type="date"),
        yaxis=_axis("events", rangemode="tozero"),
        yaxis2=_axis(
            "revision",
            rangemode="tozero",
            tickformat=",d",
            overlaying="y",
            side="right",
            **_integer_ticks(_col(frame, "revision")),
        ),
    )
    return {"data": data, "layout": layout}


def _integer_ticks(values: np.ndarray, most: int = 5) -> dict[str, Any]:
    """Ticks at whole numbers on a count axis (plotly steps by 0.25 for small ones: 0, 0, 1, 1)."""
    top = int(np.nanmax(values)) if len(values) else 0
    return {"tick0": 0, "dtick": max(1, -(-top // most))}


def lateness_histogram(frame: pd.DataFrame) -> Figure:
    """How late events arrived (broker time − event time), from the merged lateness digests.

    `frame` is a `dashboard.lateness.digest_histogram` in ms; shown in seconds.
    """
    if frame.empty or not frame["count"].sum():
        return empty_figure("No lateness measured in this range")
    lo = _col(frame, "lo") / 1000.0
    width = _col(frame, "hi") / 1000.0 - lo
    data = [
        {
            "type": "bar",
            "x": lo + width / 2,
            "y": _col(frame, "count"),
            "width": width,
            "name": "events",
            "marker": {"color": "#1f77b4"},
            "hovertemplate": "%{x:,.2f} s: %{y:,.0f} events<extra></extra>",
        }
    ]
    layout = _layout(
        hovermode="closest",
        xaxis=_axis("lateness: broker time − event time (s)"),
        # Log counts: the few very late events must stay visible next to the on-time bulk.
        yaxis=_axis("events (log scale)", type="log"),
    )
    return {"data": data, "layout": layout}


def what_if(frame: pd.DataFrame, *, chosen_ms: int, job_ms: int | None = None) -> Figure:
    """Share of events that would have been late for each allowed lateness (what-if curve).

    `frame` is a `dashboard.lateness.what_if_frame`; a marker at the user's choice, and a dashed
    line at the job's real allowed lateness when known.
    """
    if frame.empty:
        return empty_figure("No events in this range")
    allowed = _col(frame, "allowed_lateness_ms")
    late = _col(frame, "fraction_late")
    nearest = int(np.abs(allowed - chosen_ms).argmin())
    data = [
        {
            "type": "scatter",
            "x": allowed / 1000.0,
            "y": late,
            "name": "would be late",
            "mode": "lines",
            "line": {"width": 2, "color": "#d62728", "shape": "hv"},
            "hovertemplate": "allowed %{x:,.1f} s: %{y:.2%} late<extra></extra>",
        },
        {
            "type": "scatter",
            "x": [chosen_ms / 1000.0],
            "y": [float(late[nearest])],
            "name": "your choice",
            "mode": "markers",
            "marker": {"size": 11, "color": "#d62728", "line": {"width": 2, "color": "white"}},
        },
    ]
    layout = _layout(
        hovermode="closest",
        height=320,
        xaxis=_axis("allowed lateness (s)", rangemode="tozero"),
        yaxis=_axis("fraction late", tickformat=".2%", rangemode="tozero"),
    )
    if job_ms is not None:
        x = job_ms / 1000.0
        layout["shapes"] = [
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dash", "color": _TOTAL_COLOR},
            }
        ]
        layout["annotations"] = [
            {
                "text": "job's allowed lateness",
                "xref": "x",
                "yref": "paper",
                "x": x,
                "y": 1,
                "xanchor": "left",
                "yanchor": "top",
                "showarrow": False,
            }
        ]
    return {"data": data, "layout": layout}


def pipeline_health(frame: pd.DataFrame) -> Figure:
    """Per batch, by batch time: rows/s (top), batch duration (middle), freshness (bottom).

    Processed below input for long means the job falls behind; duration near the trigger
    interval means it has no headroom left. Freshness is how old the batch's records were when
    its results were committed to Redis (commit time − broker timestamp; p50, p99 and the
    oldest, ms, in the order of `FRESHNESS_STYLE`): transport, waiting for the trigger and the
    batch itself; far above the batch's duration means records waited for their batch to start
    (a backlog). A batch without records leaves a gap.
    """
    if frame.empty:
        return empty_figure("No batches yet")
    t = _col(frame, "batch_time")
    batch_ids = _col(frame, "batch_id")[:, None]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "x": t,
            "y": _col(frame, col),
            "name": name,
            "mode": "lines",
            "line": {"width": 1.8, "color": color},
        }
        for name, col, color in (
            ("input rows/s", "input_rows_per_s", "#1f77b4"),
            ("processed rows/s", "processed_rows_per_s", "#2ca02c"),
        )
    ]
    data.append(
        {
            "type": "bar",
            "x": t,
            "y": _col(frame, "batch_duration_ms"),
            "name": "batch duration (ms)",
            "marker": {"color": "#7f7f7f"},
            "customdata": batch_ids,
            "hovertemplate": "batch #%{customdata[0]}: %{y:,} ms<extra></extra>",
            "xaxis": "x2",
            "yaxis": "y2",
        }
    )
    for col, (name, line) in FRESHNESS_STYLE.items():
        data.append(
            {
                "type": "scatter",
                "x": t,
                "y": _col(frame, col),
                "name": name,
                # markers too: a batch with records between two without is a lone point
                "mode": "lines+markers",
                "marker": {"size": 4, "color": line["color"]},
                "line": line,
                "connectgaps": False,
                "customdata": batch_ids,
                "hovertemplate": f"{name} %{{y:,.0f}} ms (batch #%{{customdata[0]}})"
                "<extra></extra>",
                "xaxis": "x3",
                "yaxis": "y3",
            }
        )
    axes = _stacked(
        (0.42, 0.28, 0.30),
        0.06,
        x_title="processing time (UTC), when the batch ran",
        ys=(
            {"title": "rows/s", "rangemode": "tozero"},
            {"title": "duration (ms)", "rangemode": "tozero"},
            {"title": "freshness (ms)", "rangemode": "tozero"},
        ),
    )
    return {"data": data, "layout": _layout(height=600, **axes)}


#: The breakdown's trend: which column a ranking metric draws, and its axis title.
_TREND = {
    "events": ("events_per_s", "events/s"),
    "errors": ("errors", "errors per window"),
    "p99": ("p99", "p99 latency (ms)"),
}


def breakdown_trend(frame: pd.DataFrame, members: Sequence[str], metric: str) -> Figure:
    """The drawn values (or services) of a breakdown over event time, one line each.

    `frame` is a `dashboard.breakdown.trend_frame`; `members` the ranked order (busiest first),
    which is the traces' order too, so legend toggles stay on their line.
    """
    if frame.empty:
        return empty_figure("No windows of these values in the range")
    column, title = _TREND[metric]
    parts = {str(k): v for k, v in frame.groupby("member", sort=False)}
    empty = frame.iloc[:0]
    traces = []
    for m in members:
        part = parts.get(m, empty)
        traces.append(
            {
                "type": "scatter",
                "x": _col(part, "window_start"),
                "y": _col(part, column),
                "name": m,
                "mode": "lines+markers",
                "marker": {"size": 4},
                "line": {"width": 1.8},
                "hovertemplate": f"{html.escape(m)}: %{{y:.4g}}<extra></extra>",
            }
        )
    return {"data": traces, "layout": _layout(xaxis=_axis("event time (UTC)"), yaxis=_axis(title))}
