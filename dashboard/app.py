"""The Streamlit script: layout only; reads, tables and charts come from the modules beside it.

Reads in `data`; what the shared panels say and draw in `panels`; tables by concept in
`windows`, `time_domains`, `latency_range`, `lateness`, `health`, `job_status` and
`dead_letters`; charts in `figures`, with `marks` drawn over them.

Run it through `tidegauge dashboard` (or `streamlit run dashboard/app.py -- FLAGS`). Settings come
from the flags after `--`, else from `TIDEGAUGE_REDIS_URL` and defaults. The filters live in the
sidebar; the live part is one `st.fragment` that re-reads Redis every `--refresh`, so only it
redraws. Every chart has a fixed key and a constant plotly `uirevision`, so zoom survives.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Hashable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import redis
import streamlit as st

from dashboard import chart, data, figures, panels, view_url
from dashboard.breakdown import BreakdownView, breakdown_table, trend_frame
from dashboard.copy_button import copy_button
from dashboard.dead_letters import dead_counts_frame, dead_letters_frame
from dashboard.health import job_starts
from dashboard.job_status import CATCH_UP_WINDOW_MS, catch_up, offsets_frame, offsets_summary
from dashboard.latency_range import cdf_frame, range_table
from dashboard.lateness import digest_histogram, late_events_frame, what_if_frame
from dashboard.marks import annotation_marks, clip, mark
from dashboard.run import SERVER_PATH, app_settings
from dashboard.shared import Derived
from dashboard.slo import slo_table
from dashboard.time_domains import arrivals_frame, watermark_frame
from dashboard.windows import (
    HLL_RELATIVE_ERROR,
    metrics_frame,
    services_in,
    stable_order,
    users_band,
    windows_frame,
)
from tidegauge.core import control
from tidegauge.core.config import DEFAULT_REDIS_URL, plugins_from_env, redact_url
from tidegauge.core.dimensions import OTHER_VALUE, split_member
from tidegauge.core.durations import format_duration, to_iso
from tidegauge.core.events import OVERFLOW_SERVICE
from tidegauge.core.plugins import PluginError, load_plugins
from tidegauge.core.store import (
    ALL_SERVICES,
    Keys,
    dimension_values,
    overflow_summary,
    read_services,
)
from tidegauge.core.store.ranking import RANK_BY

st.set_page_config(page_title="Tidegauge", page_icon="🌊", layout="wide")
try:  # the same plugin metrics as the job and `tidegauge query` (TIDEGAUGE_PLUGINS)
    load_plugins(plugins_from_env())
except PluginError as e:
    st.error(str(e))
    st.stop()

#: Time range choices of the sidebar (a --window-range outside them is added as a choice).
RANGES_MS = dict(data.RANGES_MS)

#: Top-row figures per line: the stream's six, then the job's three under them. Nine in one
#: line would cut labels ("Watermark d…") at 1600 px with the sidebar open.
HEADLINES_PER_ROW = 6

#: How many services the sidebar offers to draw when none are chosen (0: every service).
TOP_CHOICES = (5, 10, 20, 50, 0)


def _own_argv() -> list[str]:
    # `streamlit run server.py -- FLAGS` (or app.py) makes sys.argv [server.py, *FLAGS]; under
    # AppTest sys.argv is the test runner's, which is not ours to parse.
    ours = (Path(__file__).resolve(), SERVER_PATH.resolve())
    if sys.argv and Path(sys.argv[0]).resolve() in ours:
        return sys.argv[1:]
    return []


try:
    settings = app_settings(_own_argv())
except ValueError as e:
    st.title("Tidegauge")
    st.error(f"Bad dashboard settings: {e}")
    st.stop()

keys = Keys(settings.redis.prefix)
shown_url = redact_url(settings.redis.url)


def _label_of(ms: int | None, labels: dict[str, int]) -> str | None:
    return next((label for label, x in labels.items() if x == ms), None)


def _restore_view() -> None:
    """On a session's first run, read the view the page URL asks for (dashboard/view_url.py).

    The widgets take it as their *defaults* (never preset in session state: Streamlit gives a
    re-mounted widget its default, so a preset value would be lost at the next re-mount).
    """
    if "link" in st.session_state:
        return
    _range_default()  # a --window-range outside RANGES_MS becomes a choice first
    v = view_url.from_params(
        st.query_params.to_dict(),
        data.WINDOW_KINDS,
        list(RANGES_MS.values()),
        list(data.LATENCY_RANGES_MS.values()),
    )
    st.session_state["link"] = v
    st.session_state["view_problems"] = v.problems


def _link() -> view_url.View:
    """The view the page was opened with (its widgets' defaults)."""
    v: view_url.View = st.session_state.get("link", view_url.View())
    return v


def _current_view() -> view_url.View:
    """The view the widgets show now (a widget not drawn yet shows the link's choice)."""
    state, link = st.session_state, _link()
    range_ms = RANGES_MS.get(state.get("range", ""), link.range_ms or settings.window_range_ms)
    latency = data.LATENCY_RANGES_MS.get(state.get("latency_range", ""), link.latency_range_ms)
    top = state.get("top", data.DEFAULT_TOP if link.top is None else link.top)
    return view_url.View(
        services=tuple(state.get("services", link.services)),
        kind=state.get("kind", link.kind),
        range_ms=None if range_ms == settings.window_range_ms else range_ms,
        latency_range_ms=None if latency in (None, 15 * 60_000) else latency,
        latency_service=state.get("latency_service", link.latency_service),
        show_broker=bool(state.get("show_broker", link.show_broker)),
        show_total=bool(state.get("show_total", link.show_total)),
        wall=bool(state.get("wall", link.wall)),
        top=None if top == data.DEFAULT_TOP else top,
        rank_by=state.get("rank_by", link.rank_by),
        dimension=state.get("dim", link.dimension),
        dimension_of=state.get("dim_of", link.dimension_of),
        dimension_value=state.get("dim_value", link.dimension_value),
        dimension_by=state.get("dim_by", link.dimension_by),
        only=_only_of(state, link),
    )


def _only_of(state: Any, link: view_url.View) -> tuple[str, str] | None:
    """The "Only events with" choice of the widgets (or the link's, before they are drawn)."""
    if "only_dim" not in state:
        return link.only
    dim, value = state.get("only_dim"), state.get("only_value")
    return None if dim is None or value is None else (dim, value)


def _keep_view_in_url() -> None:
    """Write the current view into the page URL (only when it changed: no extra reruns)."""
    params = view_url.to_params(_current_view())
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


#: Wall mode: no sidebar or toolbar, large figures, legible across a room (`?wall=1`).
WALL_CSS = """
<style>
section[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"],
header[data-testid="stHeader"] { display: none !important; }
[data-testid="stMetricValue"] { font-size: 3.2rem !important; }
[data-testid="stMetricLabel"] p { font-size: 1.3rem !important; }
[data-testid="stAlert"] p { font-size: 1.4rem !important; }
.block-container { padding-top: 1rem !important; max-width: 100% !important; }
</style>
"""


def _range_default() -> str:
    for label, ms in RANGES_MS.items():
        if ms == settings.window_range_ms:
            return label
    label = format_duration(settings.window_range_ms)
    RANGES_MS[label] = settings.window_range_ms
    return label


def _sidebar() -> data.Filters:
    """Filters (services, window kind, time range) and, with --demo-controls, the demo buttons."""
    st.sidebar.header("Filters")
    try:
        known = read_services(data.client(settings.redis.url), keys)
    except redis.exceptions.RedisError:
        known = []  # the live part says what is wrong
    chosen = st.sidebar.multiselect(
        "Services",
        known,
        default=[x for x in _link().services if x in known],  # a link's, if the store has them
        key="services",
        placeholder="all services (type to search)",
        help="Lines and counts of these services only; empty = the busiest ones below.",
    )
    linked_top = data.DEFAULT_TOP if _link().top is None else _link().top
    tops = list(dict.fromkeys([*TOP_CHOICES, linked_top]))
    top = st.sidebar.selectbox(
        "Draw",
        tops,
        index=tops.index(linked_top),
        key="top",
        format_func=lambda n: "every service" if n == 0 else f"the top {n}",
        help="With no services chosen, the page reads and draws only the busiest services and "
        "the rest as one line, so it stays fast with thousands of services.",
    )
    rank_by = st.sidebar.radio(
        "ranked by",
        RANK_BY,
        index=RANK_BY.index(_link().rank_by),
        key="rank_by",
        horizontal=True,
        help="Events or errors over the time range (exact sums of the windows), or p99 "
        "latency (the windows' t-digests merged per service).",
    )
    kind = st.sidebar.radio(
        "Window kind",
        data.WINDOW_KINDS,
        index=data.WINDOW_KINDS.index(_link().kind),
        key="kind",
        horizontal=True,
        help="Which of the job's window specs the per-window charts show (the smallest of that "
        "kind). Sliding: one point per primary window, the figures of the interval of the "
        "sliding window's length before it. Sessions: count = sessions closed, latency = "
        "session length.",
    )
    labels = list(RANGES_MS)
    range_label = st.sidebar.selectbox(
        "Time range",
        labels,
        index=labels.index(_label_of(_link().range_ms, RANGES_MS) or _range_default()),
        key="range",
        help="How much event time the charts show, ending at the newest window.",
    )
    st.sidebar.toggle(
        "Wall mode",
        value=_link().wall,
        key="wall",
        help="No sidebar, large figures and the alert banner on top, for a screen across the "
        "room (?wall=1 in the link; remove it to leave)",
    )
    with st.sidebar.expander("Share this view"):
        st.caption("This link opens the page with the same filters, ranges and toggles:")
        url = view_url.link(st.context.url or "", _current_view())
        st.code(url, language=None)
        copy_button(url, key="copy_link")
        wall = view_url.wall_link(st.context.url or "", _current_view())
        st.caption(
            f"For many screens (a wall, a whole rotation): [the wall page]({wall}) shows this "
            "view's alerts, top-row figures and four charts, and all its screens share one "
            "read and one rendering per refresh (docs/dashboard.md)."
        )
    only = _only_filter()
    if settings.demo_controls:
        _demo_controls(known)
    return data.Filters(
        services=tuple(chosen),
        kind=kind or "tumbling",
        range_ms=RANGES_MS[range_label],
        top=int(top if top is not None else data.DEFAULT_TOP),
        rank_by=rank_by or "events",
        only=only,
    )


def _only_filter() -> tuple[str, str] | None:
    """The sidebar's "Only events with" (dimension, value), when the job slices by any."""
    r = data.client(settings.redis.url)
    try:
        dims = data.stored_dimensions(settings.redis.url, keys.prefix)
    except redis.exceptions.RedisError:
        return None  # the live part says what is wrong
    if not dims:
        return None
    linked = _link().only
    dim = st.sidebar.selectbox(
        "Only events with",
        [None, *dims],
        index=1 + dims.index(linked[0]) if linked and linked[0] in dims else 0,
        key="only_dim",
        format_func=lambda d: "(every event)" if d is None else d,
        help="The per-window charts (events, latency, users) of the events with one value of "
        "a dimension only, per service and for all services (docs/dimensions.md); the time "
        "domains, lateness and health panels stay the whole stream's.",
    )
    if dim is None:
        return None
    values = [split_member(m)[1] for m in dimension_values(r, keys.by(dim), ALL_SERVICES)]
    if not values:
        return None
    want = linked[1] if linked and linked[0] == dim else None
    value = st.sidebar.selectbox(
        f"{dim} =",
        values,
        index=values.index(want) if want in values else 0,
        key="only_value",
    )
    return (dim, value) if value is not None else None


def _demo_controls(known: list[str]) -> None:
    st.sidebar.header("Demo controls")
    st.sidebar.caption(
        "Commands for the generator (`tidegauge produce --live-commands`) and the job, "
        "through Redis."
    )
    r = data.client(settings.redis.url)
    now = time.time_ns() // 1_000_000
    target = st.sidebar.selectbox(
        "Incident service",
        [ALL_SERVICES, *known],
        key="demo_service",
        format_func=lambda s: "all services" if s == ALL_SERVICES else s,
    )
    where = _incident_where(r)
    try:
        if st.sidebar.button("Start a latency incident (60 s, ×5)", key="demo_incident"):
            incident = control.start_incident(
                r, keys, now, duration_ms=60_000, factor=5.0, service=target, where=where
            )
            st.sidebar.success(f"Latency incident on {incident.describe()} for 60 s.")
        if st.sidebar.button("Late burst (1 h of buffered events)", key="demo_burst"):
            control.request_late_burst(r, keys, now, span_ms=3_600_000)
            st.sidebar.success("A device comes back online with an hour of buffered events.")
        if st.sidebar.button("Backlog: pause the job 30 s", key="demo_pause"):
            control.request_pause(r, keys, now, pause_ms=30_000)
            st.sidebar.success("The job pauses for 30 s, then catches up.")
    except redis.exceptions.RedisError as e:
        st.sidebar.error(f"Cannot send the command to Redis at `{shown_url}`: {e}")


def _incident_where(r: redis.Redis) -> tuple[str, str] | None:
    """The demo incident's "only where": one value of a dimension the job slices by.

    Only the dimensions the generator's requests carry (route, method, region, version) are
    offered; None is every request.
    """
    try:
        dims = data.stored_dimensions(settings.redis.url, keys.prefix)
        options: list[tuple[str, str] | None] = [None]
        for dim in (d for d in dims if d in control.INCIDENT_DIMENSIONS):
            members = dimension_values(r, keys.by(dim), ALL_SERVICES)
            options += [(dim, v) for _, v in map(split_member, members) if v != OTHER_VALUE]
    except redis.exceptions.RedisError:
        return None  # the live part says what is wrong
    if len(options) == 1:
        return None
    return st.sidebar.selectbox(
        "Incident only where",
        options,
        key="demo_where",
        format_func=lambda o: "(every request)" if o is None else f"{o[0]} = {o[1]}",
        help="Slow down one route, region or version only (the generator's requests carry "
        "them: OpenTelemetry spans, or `tidegauge produce --attributes` as the demo runs it), "
        "and find it with the breakdown panel.",
    )


def _job_command() -> str:
    cmd = "tidegauge job"
    if settings.redis.url != DEFAULT_REDIS_URL:
        cmd += f" --redis {shown_url}"
    if keys.prefix != "tg":
        cmd += f" --redis-prefix {keys.prefix}"
    return cmd + " --checkpoint var/checkpoints/job"


def _alert_banner(snap: data.Snapshot) -> None:
    """Ongoing alert firings on top of the page (docs/alerts.md); nothing when there are none."""
    for n in panels.alert_notices(snap):
        if n.level == "error":
            st.error(n.text, icon="🚨")
        else:
            st.warning(n.text, icon="⏳")


def _status(snap: data.Snapshot, d: Derived, f: data.Filters) -> None:
    if snap.status is None:
        st.info(panels.NO_STATUS)
    elif (stale := panels.stale_notice(snap, settings.stale_after_ms)) is not None:
        st.warning(stale.text, icon="⚠️")
    heads = panels.shared_headline(snap, d, f)
    for first in range(0, len(heads), HEADLINES_PER_ROW):
        line = heads[first : first + HEADLINES_PER_ROW]
        for col, h in zip(st.columns(HEADLINES_PER_ROW)[: len(line)], line, strict=True):
            col.metric(h.label, h.value, help=h.help)
    if snap.status is not None:
        wm = "none yet" if snap.status.watermark <= 0 else to_iso(snap.status.watermark)
        offsets = d.get("offsets_summary", lambda: offsets_summary(_offsets(snap, d)))
        st.caption(
            f"Watermark {wm} · last batch #{snap.status.batch_id}, "
            f"{snap.status.input_rows:,} input rows · Kafka offsets by partition: {offsets}"
        )


def _table(d: Derived, key: str, build: Callable[[], pd.DataFrame]) -> None:
    """Draw the table `key`: built and converted to Arrow once per snapshot for every session.

    Given a pandas frame, Streamlit converts it to Arrow for each session and refresh (a fifth
    of the server's CPU with ten viewers, BENCHMARKS.md); an Arrow table it only serialises.
    """
    table = d.get(("table", key), lambda: pa.Table.from_pandas(build(), preserve_index=False))
    st.dataframe(table, hide_index=True, key=key)


def _chart(d: Derived, key: str, build: Callable[[], figures.Figure], *choices: Hashable) -> None:
    """Draw the chart `key`: its JSON built once per snapshot and `choices` for every session."""
    chart.draw(d.get(("chart", key, *choices), lambda: chart.figure_json(build())), key)


def _time_domains(snap: data.Snapshot, d: Derived, f: data.Filters) -> None:
    st.subheader("Event time vs processing time")
    show_broker = st.toggle(
        "Also count by the broker's timestamp", value=_link().show_broker, key="show_broker"
    )
    _chart(
        d,
        "time_domains",
        lambda: mark(
            figures.time_domains(
                arrivals_frame(snap.arrivals, panels.shown_services(f)),
                watermark_frame(snap.batches),
                show_broker=show_broker,
            ),
            clip(
                annotation_marks(
                    [a for a in snap.annotations if a.domain == "processing"]
                    + job_starts(snap.batches)
                ),
                snap.read_at_ms - f.range_ms,
                snap.read_at_ms,
            ),
        ),
        show_broker,
    )
    st.caption(
        "Top: the same events counted per window by when they happened (event time) and by "
        "when the job processed them. A backlog is a processing-time spike over a flat "
        "event-time line. Bottom: the watermark after each batch (docs/time.md)."
    )


def _events_chart(snap: data.Snapshot, d: Derived, f: data.Filters, windows: pd.DataFrame) -> None:
    st.subheader("Events per second by service")
    show_total = st.toggle(
        "Show the all-services total (*)", value=_link().show_total, key="show_total"
    )
    frame = d.get(
        "windows_shown", lambda: panels.with_others(panels.only_shown(windows, f), snap, f)
    )
    order = _order(d, "windows_shown", frame, f)
    _chart(
        d,
        "events_per_s",
        lambda: panels.events_figure(snap, frame, order, f, show_total),
        tuple(order),
        show_total,
    )
    if snap.resolution:
        st.caption(f"Resolution: {snap.resolution} (older windows live on as roll-ups)")


def _picked(key: str, is_value: bool) -> None:
    """A pick of the breakdown's selectbox `key` (its callback): a value, or a service."""
    picked = st.session_state.get(key)
    st.session_state[key] = None  # a pick is an action, not a setting
    if picked is None:
        return
    if is_value:
        _drill(ALL_SERVICES, picked)
    else:
        _drill(picked, None)


def _drill(of: str, value: str | None) -> None:
    """Drill the breakdown: into a service's values, or back out (a button's callback)."""
    st.session_state["dim_of"] = of
    st.session_state["dim_value"] = value


def _breakdown(snap: data.Snapshot, d: Derived, f: data.Filters) -> None:
    """Top values of a dimension over the range, with their trend; drill into a service."""
    dims = d.get("dimensions", lambda: data.stored_dimensions(settings.redis.url, keys.prefix))
    if not dims:
        return  # the job slices by nothing (`--dimension`): no panel
    st.subheader("Breakdown")
    link = _link()
    cols = st.columns([1, 1, 1, 1.4])
    dim = cols[0].selectbox(
        "By",
        dims,
        index=dims.index(link.dimension) if link.dimension in dims else 0,
        key="dim",
        help="A dimension the job slices by (`tidegauge job --dimension`, docs/dimensions.md).",
    )
    ofs = [ALL_SERVICES, *snap.services]
    if st.session_state.get("dim_of", link.dimension_of) not in ofs:
        st.session_state.pop("dim_of", None)
    of = cols[1].selectbox(
        "Of",
        ofs,
        index=ofs.index(link.dimension_of) if link.dimension_of in ofs else 0,
        key="dim_of",
        format_func=lambda s: "all services" if s == ALL_SERVICES else s,
        help="Whose values: one service's, or all services' together.",
    )
    by = cols[2].radio(
        "Ranked by",
        RANK_BY,
        index=RANK_BY.index(link.dimension_by),
        key="dim_by",
        horizontal=True,
    )
    value = st.session_state.get("dim_value", link.dimension_value)
    view = BreakdownView(dim, of, value, by, f.top or 0, f.range_ms)
    b = data.shared_breakdown(settings.redis.url, keys.prefix, settings.refresh_ms, view)
    labels = [b.label(t.service) for t in b.ranked]
    if value is None:
        cols[3].selectbox(
            "Only the value",
            [None, *labels],
            key="dim_pick",
            on_change=_picked,
            args=("dim_pick", True),
            format_func=lambda x: "(every value)" if x is None else x,
            help="One value: which services its events come from.",
        )
    else:
        cols[3].button(
            f"← every {dim}",
            key="dim_back",
            on_click=_drill,
            args=(of, None),
            help="Back to every value",
        )
    what = (
        f"services with {dim} = {value}"
        if value is not None
        else f"values of {dim} of {'all services' if of == ALL_SERVICES else of}"
    )
    if not b.ranked:
        st.info(f"No {what} in the last {format_duration(f.range_ms)}.")
        return
    drawn = labels[: f.top] if f.top else labels
    st.caption(
        f"{len(b.ranked)} {what} over the last {format_duration(f.range_ms)}, by {by}"
        + (f"; the top {len(drawn)} drawn" if len(drawn) < len(labels) else "")
    )
    left, right = st.columns([1, 1.3])
    with left:
        st.dataframe(breakdown_table(b), hide_index=True, key="breakdown")  # a few rows
        if value is not None:
            st.selectbox(
                "Drill into a service's values",
                [None, *labels],
                key="dim_into",
                on_change=_picked,
                args=("dim_into", False),
                format_func=lambda x: "(pick a service)" if x is None else x,
            )
        elif of != ALL_SERVICES:
            st.button("← all services", key="dim_out", on_click=_drill, args=(ALL_SERVICES, None))
    with right:
        _chart(
            d,
            "breakdown_trend",
            lambda: figures.breakdown_trend(trend_frame(b), drawn, by),
            view,
            b.until_ms,
            len(b.rows),
        )


def _order(d: Derived, name: str, frame: pd.DataFrame, f: data.Filters) -> list[str]:
    """Services in the order this session first saw them, limited to the chosen ones.

    A stable order keeps legend toggles on their line; a service that left the range keeps its
    (empty) place.
    """
    order = stable_order(
        st.session_state.get("service_order", []),
        d.get(("services_in", name), lambda: services_in(frame)),
    )
    st.session_state["service_order"] = order
    return [s for s in order if not f.services or s in f.services]


#: The SLO panel's team filter: every team.
ALL_TEAMS = "all teams"


def _slos() -> None:
    """Budget and burn of every catalogued SLO (`tidegauge job --catalog`, docs/slo.md)."""
    rows = data.shared_slos(settings.redis.url, keys.prefix, settings.refresh_ms)
    if not rows:
        return  # no catalog published: no panel
    st.subheader("SLOs")
    table = slo_table(rows)
    teams = sorted({t for t in table["team"] if t})
    if len(teams) > 1:
        team = st.selectbox(
            "Team",
            [ALL_TEAMS, *teams],
            key="slo_team",
            help="The services of one team (the catalog's owner of each service).",
        )
        if team != ALL_TEAMS:
            table = table[table["team"] == team]
    st.dataframe(table, hide_index=True, key="slos")
    st.caption(
        "Budget left over each SLO's period, burn rate over the last hour (1 = the budget lasts "
        "the period exactly) and when the budget runs out at it; rules firing: the SRE "
        "workbook's burn-rate pairs (`tidegauge alerts --slo`). Exact counts; windows still "
        "open are provisional."
    )


def _latency(snap: data.Snapshot, d: Derived, f: data.Filters, metrics: pd.DataFrame) -> None:
    st.subheader("Latency")
    shown = snap.drawn
    left, right = st.columns([1, 1])
    with left:
        options = [ALL_SERVICES, *shown]
        if st.session_state.get("latency_service", ALL_SERVICES) not in options:
            del st.session_state["latency_service"]  # a service that left: back to the default
        linked = _link().latency_service
        service = st.selectbox(
            "Service",
            options,
            index=options.index(linked) if linked in options else 0,
            key="latency_service",
            format_func=lambda s: figures.TOTAL_NAME if s == ALL_SERVICES else s,
        )
        _chart(
            d,
            "latency_ts",
            lambda: panels.latency_figure(
                snap,
                metrics,
                service,
                f,
                lambda: d.get("sliding_metrics", lambda: metrics_frame(snap.sliding)),
            ),
            service,
        )
    with right:
        choices = list(data.LATENCY_RANGES_MS)
        st.radio(
            "Range",
            choices,
            index=choices.index(
                _label_of(_link().latency_range_ms, data.LATENCY_RANGES_MS) or "15 min"
            ),
            key="latency_range",
            horizontal=True,
            help="Merged t-digests of the tumbling windows in this range.",
        )
        services = [ALL_SERVICES, *shown]
        if snap.range_from_ms is not None and snap.range_to_ms is not None:
            span = snap.range_to_ms - snap.range_from_ms
            _table(d, "latency_table", lambda: range_table(snap.range_aggs, services, span))
        _chart(
            d,
            "latency_cdf",
            lambda: figures.latency_cdf(cdf_frame(snap.range_aggs, services), shown),
        )


def _users(
    snap: data.Snapshot, d: Derived, f: data.Filters, windows: pd.DataFrame, metrics: pd.DataFrame
) -> None:
    st.subheader("Distinct users")
    order = _order(d, "windows", windows, f)
    _chart(
        d,
        "users",
        lambda: figures.distinct_users(
            panels.only_shown(users_band(metrics), f),
            services=order,
            window_size_ms=snap.window_size_ms,
        ),
        tuple(order),
    )
    st.caption(
        "HyperLogLog estimates per window; the band is ±2 standard errors (1.04/√m = "
        f"{100 * HLL_RELATIVE_ERROR:.2f} % each)."
    )


def _lateness(snap: data.Snapshot, d: Derived, f: data.Filters) -> None:
    st.subheader("Lateness")
    _chart(d, "lateness_windows", lambda: panels.lateness_figure(snap, f))
    res = snap.lateness
    if res is None:
        st.caption("No tumbling windows yet: lateness needs them.")
        return
    left, right = st.columns([1, 1])
    with left:
        st.caption(
            f"How late events arrived in the latency range ({res.events:,} events, "
            f"{res.late:,} late, {res.stragglers:,} stragglers; "
            f"{res.duplicates:,} duplicates dropped)"
        )
        _chart(
            d,
            "lateness_hist",
            lambda: figures.lateness_histogram(digest_histogram(res.lateness)),
        )
    with right:
        job_ms = snap.status.allowed_lateness_ms if snap.status else None
        top = max(int(res.overdue.max) if res.overdue.count else 0, job_ms or 0, 60_000)
        chosen_s = st.slider(
            "What if the allowed lateness were (s)",
            0,
            -(-top // 1000),
            value=(job_ms or 0) // 1000,
            key="what_if",
        )
        chosen = int(chosen_s) * 1000
        st.metric(
            "Would have been late",
            f"{100 * res.fraction_late(chosen):.2f} %",
            help="From the lateness digests: an event is late with allowed lateness L when "
            "the event-time frontier had passed its window's end by at least L on arrival.",
        )
        _chart(
            d,
            "what_if_chart",
            lambda: figures.what_if(
                d.get("what_if", lambda: what_if_frame(res)), chosen_ms=chosen, job_ms=job_ms
            ),
            chosen,
        )
    if snap.late_events:
        st.caption(f"Latest {len(snap.late_events)} late events kept")
        _table(d, "late_events", lambda: late_events_frame(snap.late_events))


def _health(snap: data.Snapshot, d: Derived) -> None:
    st.subheader("Pipeline health")
    _chart(d, "health", lambda: panels.health_figure(snap))
    st.caption(
        "Per batch, by when it ran: input vs processed rows/s; the batch's duration; its "
        "freshness, how old its records were when its results were committed to Redis (commit "
        "time − broker timestamp: p50, p99, oldest). Freshness far above the duration means "
        "records waited for their batch to start: a backlog, or a long trigger interval."
    )
    behind = catch_up(snap.batches)
    if behind is not None:
        pace = (
            f"{behind.processed_per_s:,.0f} records/s taken, "
            f"{behind.arriving_per_s:,.0f} arriving, over the last "
            f"{format_duration(CATCH_UP_WINDOW_MS)}"
        )
        if behind.eta_s is None:
            st.warning(
                f"The job is {behind.backlog:,} records behind the topic's end and not gaining "
                f"on it ({pace})."
            )
        else:
            st.info(
                f"Catching up: {behind.backlog:,} records behind the topic's end; caught up in "
                f"~{format_duration(max(1, round(behind.eta_s)) * 1000)} at this pace ({pace})."
            )
    over = overflow_summary(snap.batches)
    if over["max_names"]:
        st.warning(
            f"Service names over the job's --max-services: {over['last_names']:,} in the last "
            f"batch, up to {over['max_names']:,} per batch; {over['events']:,} events counted "
            f"under the service '{OVERFLOW_SERVICE}' in the last {over['batches']} batches. A "
            "producer may be putting request ids into `service` (docs/events.md)."
        )
    spark = snap.status.spark if snap.status is not None else None
    if spark:
        where = (
            f"{spark['executors']} executor(s), {spark['cores']} core(s)"
            if spark["executors"]
            else f"{spark['cores']} core(s) in the job's own process"
        )
        st.caption(f"Spark `{spark['master']}`: {where}")
    left, right = st.columns([1, 2])
    with left:
        st.caption("Kafka offsets and lag by partition")
        if snap.status is not None:
            _table(d, "offsets", lambda: _offsets(snap, d))
    with right:
        _dead_letters(snap, d)


def _offsets(snap: data.Snapshot, d: Derived) -> pd.DataFrame:
    """Offsets and lag by partition, built once per snapshot (the status line and the table)."""
    assert snap.status is not None
    status = snap.status
    frame: pd.DataFrame = d.get("offsets", lambda: offsets_frame(status))
    return frame


def _dead_letters(snap: data.Snapshot, d: Derived) -> None:
    st.caption("Dead letters")
    if not snap.dead_counts:
        st.caption("None so far: every record met the event contract.")
        return
    left, right = st.columns([1, 3])
    with left:
        st.caption(f"By reason (total {sum(snap.dead_counts.values()):,})")
        _table(d, "dead_counts", lambda: dead_counts_frame(snap.dead_counts))
    with right:
        st.caption(f"Latest {len(snap.dead_letters)}")
        _table(d, "dead_latest", lambda: dead_letters_frame(snap.dead_letters))


_restore_view()
if st.session_state.get("wall", _link().wall):
    st.markdown(WALL_CSS, unsafe_allow_html=True)
else:
    st.title("Tidegauge")
    st.caption(
        f"Redis `{shown_url}` · prefix `{keys.prefix}` · refresh every "
        f"{format_duration(settings.refresh_ms)} · all times UTC"
    )
if st.session_state.get("view_problems"):
    st.warning(
        "Parts of this link were ignored: " + "; ".join(st.session_state["view_problems"]),
        icon="🔗",
    )
    st.session_state["view_problems"] = ()  # said once; the URL no longer has them

filters = _sidebar()


@st.fragment(run_every=timedelta(milliseconds=settings.refresh_ms))
def live() -> None:
    """Re-read Redis and redraw every panel."""
    # The range picker lives inside this fragment; its value is known before it is drawn.
    latency_label = st.session_state.get("latency_range", "15 min")
    f = dataclasses.replace(
        filters,
        latency_range_ms=data.LATENCY_RANGES_MS.get(latency_label, 15 * 60_000),
        latency_service=st.session_state.get("latency_service", _link().latency_service),
    )
    try:
        snap, d = data.shared_snapshot(settings.redis.url, keys.prefix, settings.refresh_ms, f)
    except redis.exceptions.RedisError as e:
        st.error(
            f"Cannot read Redis at `{shown_url}`: {e}\n\n"
            "Check that redis-server is running and reachable from here, and that `--redis` "
            "(or `TIDEGAUGE_REDIS_URL`) names the right host, port, database and password. "
            "This page retries on every refresh."
        )
        return
    except (ValueError, KeyError, TypeError) as e:
        st.error(
            f"Redis at `{shown_url}` holds data under prefix `{keys.prefix}` that this dashboard "
            f"cannot read ({type(e).__name__}: {e}). Is another application using that prefix?"
        )
        return
    if snap.is_empty:
        st.info(
            f"Connected to Redis at `{shown_url}`; waiting for the job's first batch "
            f"(nothing under prefix `{keys.prefix}` yet). Start the job with:"
        )
        st.code(_job_command(), language="bash")
        st.caption("or run the whole pipeline locally with `tidegauge demo`.")
        return
    # Built once per snapshot, shared by the panels that draw windows (and by every session).
    windows = d.get("windows", lambda: windows_frame(snap.windows))
    metrics = d.get("metrics", lambda: metrics_frame(snap.windows))
    _keep_view_in_url()
    _alert_banner(snap)
    _status(snap, d, f)
    _time_domains(snap, d, f)
    _events_chart(snap, d, f, windows)
    _breakdown(snap, d, f)
    _slos()
    _latency(snap, d, f, metrics)
    _users(snap, d, f, windows, metrics)
    _lateness(snap, d, f)
    _health(snap, d)


live()
