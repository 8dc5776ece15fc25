"""The wall page: one JSON document per view and refresh, drawn by any number of screens.

A Streamlit session re-runs its page on the server at every refresh (~70 ms of the server's
CPU each, BENCHMARKS.md), so one server process keeps ~10 viewers at a 1 s refresh. The wall
page is for the many: `/tidegauge/wall` is a static page whose script polls
`/tidegauge/wall.json` (same query parameters as a page link, dashboard/view_url.py) and draws
the alerts, the top-row figures and four charts itself. The server builds each view's document
once per refresh from the snapshot every viewer of that view shares (`data.shared_snapshot`),
and answers a screen that already has it with 304: N screens cost one build plus N small
HTTP answers.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from dashboard import chart, data, figures, metrics, panels, view_url
from dashboard.breakdown import Breakdown, BreakdownView, trend_frame
from dashboard.figures import Figure
from dashboard.run import PLOTLY_JS, DashboardSettings
from dashboard.shared import Derived
from dashboard.windows import metrics_frame, services_in, windows_frame
from tidegauge.core.config import redact_url
from tidegauge.core.store import ALL_SERVICES

__all__ = ["DOC_PATH", "PAGE_PATH", "WALL_CHARTS", "document", "filters_of", "routes"]

PAGE_PATH = "/" + view_url.WALL_PAGE
DOC_PATH = PAGE_PATH + ".json"

#: The charts of the wall, in page order: key -> title.
WALL_CHARTS = {
    "events_per_s": "Events per second by service",
    "latency_ts": "Latency",
    "lateness_windows": "Lateness",
    "health": "Pipeline health",
    "breakdown": "Breakdown",  # with ?dim=: one dimension's values (dashboard/breakdown.py)
}


def filters_of(
    params: Mapping[str, str], window_range_ms: int
) -> tuple[data.Filters, view_url.View]:
    """The view a wall link asks for (as a page link would), and its `Filters`.

    What the link cannot give is left at its default and named in `View.problems`.
    """
    ranges = list(dict.fromkeys([*data.RANGES_MS.values(), window_range_ms]))
    v = view_url.from_params(
        params, data.WINDOW_KINDS, ranges, list(data.LATENCY_RANGES_MS.values())
    )
    f = data.Filters(
        services=v.services,
        kind=v.kind,
        range_ms=v.range_ms or window_range_ms,
        latency_range_ms=v.latency_range_ms or 15 * 60_000,
        top=data.DEFAULT_TOP if v.top is None else v.top,
        rank_by=v.rank_by,
        only=v.only,
        latency_service=v.latency_service,
    )
    return f, v


def document(
    snap: data.Snapshot,
    d: Derived,
    f: data.Filters,
    v: view_url.View,
    stale_after_ms: int | None,
    breakdown: Breakdown | None = None,
) -> dict[str, Any]:
    """What a wall screen shows of `snap`: notices, top-row figures and charts (plotly JSON).

    Charts are built from the same panel functions as the Streamlit page's (dashboard/panels.py)
    and shared with its sessions through `d`; services keep the order they first appear in.
    """
    out: dict[str, Any] = {
        "read_at_ms": snap.read_at_ms,
        "problems": list(v.problems),
        "notices": [],
        "headline": [],
        "charts": {},
    }
    if snap.is_empty:
        out["empty"] = "Waiting for the job's first batch: nothing in Redis under this prefix yet."
        return out
    notices = panels.alert_notices(snap)
    if snap.status is None:
        notices.append(panels.Notice("warning", panels.NO_STATUS))
    elif (stale := panels.stale_notice(snap, stale_after_ms)) is not None:
        notices.append(stale)
    out["notices"] = [{"level": n.level, "text": n.text} for n in notices]
    heads = panels.shared_headline(snap, d, f)
    out["headline"] = [{"label": h.label, "value": h.value, "help": h.help} for h in heads]
    windows = d.get("windows", lambda: windows_frame(snap.windows))
    metrics = d.get("metrics", lambda: metrics_frame(snap.windows))
    shown = d.get(
        "windows_shown", lambda: panels.with_others(panels.only_shown(windows, f), snap, f)
    )
    order = [
        s
        for s in d.get(("services_in", "windows_shown"), lambda: services_in(shown))
        if not f.services or s in f.services
    ]
    known = (ALL_SERVICES, *snap.services)
    service = v.latency_service if v.latency_service in known else ALL_SERVICES
    builds: dict[str, tuple[tuple[Hashable, ...], Callable[[], Figure]]] = {
        "events_per_s": (
            ("chart", "events_per_s", tuple(order), v.show_total),
            lambda: panels.events_figure(snap, shown, order, f, v.show_total),
        ),
        "latency_ts": (
            ("chart", "latency_ts", service),
            lambda: panels.latency_figure(
                snap,
                metrics,
                service,
                f,
                lambda: d.get("sliding_metrics", lambda: metrics_frame(snap.sliding)),
            ),
        ),
        "lateness_windows": (
            ("chart", "lateness_windows"),
            lambda: panels.lateness_figure(snap, f),
        ),
        "health": (
            ("chart", "health"),
            lambda: panels.health_figure(snap),
        ),
    }
    if breakdown is not None:
        b = breakdown
        drawn = [b.label(t.service) for t in b.ranked][: f.top or None]
        builds["breakdown"] = (
            ("chart", "breakdown_trend", b.view, b.until_ms, len(b.rows)),
            lambda: breakdown_figure(b, drawn),
        )
    # The same keys as the page's charts: one build serves both pages' viewers.
    charts: dict[str, orjson.Fragment] = {}
    for name, (key, build) in builds.items():
        charts[name] = orjson.Fragment(_figure(d, key, build))
    out["charts"] = charts
    return out


def breakdown_figure(b: Breakdown, drawn: list[str]) -> Figure:
    """The breakdown's trend, titled with what it shows (the wall has no widgets to say it)."""
    fig = figures.breakdown_trend(trend_frame(b), drawn, b.view.metric)
    v = b.view
    whose = "all services" if v.of == ALL_SERVICES else v.of
    what = f"services with {v.dimension} = {v.value}" if v.value else f"{v.dimension} of {whose}"
    fig["layout"]["title"] = {"text": f"{what}, top {len(drawn)} by {v.metric}"}
    return fig


def _figure(d: Derived, key: Hashable, build: Callable[[], Figure]) -> bytes:
    figure: bytes = d.get(key, lambda: chart.figure_json(build()))
    return figure


def _encoded(settings: DashboardSettings, params: Mapping[str, str]) -> tuple[bytes, str]:
    """The view's document as JSON and its ETag, built once per snapshot for every screen."""
    f, v = filters_of(params, settings.window_range_ms)
    snap, d = data.shared_snapshot(
        settings.redis.url, settings.redis.prefix, settings.refresh_ms, f
    )

    breakdown = None
    if v.dimension is not None:
        bv = BreakdownView(
            v.dimension, v.dimension_of, v.dimension_value, v.dimension_by, f.top, f.range_ms
        )
        breakdown = data.shared_breakdown(
            settings.redis.url, settings.redis.prefix, settings.refresh_ms, bv
        )

    def encode() -> tuple[bytes, str]:
        body = orjson.dumps(document(snap, d, f, v, settings.stale_after_ms, breakdown))
        return body, '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'

    encoded: tuple[bytes, str] = d.get(
        ("wall", v, breakdown and (breakdown.until_ms, len(breakdown.rows))), encode
    )
    return encoded


def routes(settings: DashboardSettings) -> list[Route]:
    """The wall page and its document, for `st.App(routes=...)` (dashboard/server.py)."""
    shown_url = redact_url(settings.redis.url)

    async def doc(request: Request) -> Response:
        try:
            body, etag = await run_in_threadpool(_encoded, settings, request.query_params)
        except redis.exceptions.RedisError as e:
            return _error(503, f"Cannot read Redis at {shown_url}: {e}. Retrying every refresh.")
        except (ValueError, KeyError, TypeError) as e:
            return _error(
                500,
                f"Redis at {shown_url} holds data under prefix {settings.redis.prefix} that "
                f"this dashboard cannot read ({type(e).__name__}: {e}).",
            )
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == etag:
            metrics.wall_document(304)
            return Response(status_code=304, headers=headers)
        metrics.wall_document(200)
        return Response(body, media_type="application/json", headers=headers)

    async def page(request: Request) -> Response:
        return HTMLResponse(_page(settings.refresh_ms))

    return [Route(PAGE_PATH, page), Route(DOC_PATH, doc)]


def _error(status: int, message: str) -> Response:
    return JSONResponse(
        {"error": message}, status_code=status, headers={"Cache-Control": "no-cache"}
    )


def _page(refresh_ms: int) -> str:
    slots = "\n".join(
        f'<section><h2>{html.escape(t)}</h2><div class="plot" id="chart-{k}"></div></section>'
        for k, t in WALL_CHARTS.items()
    )
    return (
        _PAGE.replace("__SLOTS__", slots)
        .replace("__REFRESH_MS__", str(int(refresh_ms)))
        .replace("__PLOTLY_JS__", PLOTLY_JS)
        .replace("__CHARTS__", json.dumps(list(WALL_CHARTS)))
        .replace("__CONFIG__", json.dumps(chart.CONFIG))
    )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tidegauge wall</title>
<style>
body { margin: 0; padding: 1rem 1.5rem; background: #0e1117; color: #e6e6e6;
  font-family: "Source Sans Pro", system-ui, sans-serif; }
#notices div { padding: .8rem 1rem; margin-bottom: .6rem; border-radius: .4rem; font-size: 1.4rem; }
.error { background: #5c1a1a; } .warning { background: #5c4a12; }
#tiles { display: grid; grid-template-columns: repeat(auto-fill, minmax(13rem, 1fr));
  gap: .6rem 1.2rem; margin: .4rem 0 1rem; }
.tile .label { font-size: 1.2rem; color: #b0b3b8; } .tile .value { font-size: 2.8rem; }
#charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(36rem, 1fr)); gap: 1rem; }
h2 { font-size: 1.3rem; font-weight: 600; margin: .3rem 0; }
.plot { min-height: 22rem; }
#foot { color: #8b8f96; margin-top: .8rem; font-size: .95rem; }
</style>
<script src="../app/static/__PLOTLY_JS__"></script>
</head><body>
<div id="notices"></div><div id="tiles"></div>
<div id="charts">
__SLOTS__
</div>
<div id="foot">Loading…</div>
<script>
const REFRESH_MS = __REFRESH_MS__;
const CHARTS = __CHARTS__;
const CONFIG = __CONFIG__;
const DOC = "wall.json" + location.search;
const DARK = { paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  font: { color: "#e6e6e6" },
  xaxis: { gridcolor: "#3a3f4b", zerolinecolor: "#3a3f4b", linecolor: "#5a5f6b" },
  yaxis: { gridcolor: "#3a3f4b", zerolinecolor: "#3a3f4b", linecolor: "#5a5f6b" } };
let etag = null, shownAt = null, failure = null;

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
}
function md(s) { return esc(s).replace(/\\*\\*(.+?)\\*\\*/g, "<b>$1</b>"); }

function render(doc) {
  const notes = doc.notices.map((n) => `<div class="${n.level}">${md(n.text)}</div>`);
  if (doc.empty) notes.push(`<div class="warning">${esc(doc.empty)}</div>`);
  if (doc.problems.length)
    notes.push(`<div class="warning">Parts of this link were ignored: ` +
      `${esc(doc.problems.join("; "))}</div>`);
  document.getElementById("notices").innerHTML = notes.join("");
  document.getElementById("tiles").innerHTML = doc.headline.map((h) =>
    `<div class="tile" title="${esc(h.help)}"><div class="label">${esc(h.label)}</div>` +
    `<div class="value" data-label="${esc(h.label)}">${esc(h.value)}</div></div>`).join("");
  for (const key of CHARTS) {
    const fig = doc.charts[key];
    const div = document.getElementById("chart-" + key);
    div.parentElement.style.display = fig ? "" : "none";  // the breakdown: with ?dim= only
    if (fig) Plotly.react(div, fig.data, { ...fig.layout, template: { layout: DARK } }, CONFIG);
  }
  shownAt = doc.read_at_ms;
}

function foot() {
  const age = shownAt === null ? "" :
    `read ${new Date(shownAt).toISOString().slice(11, 19)} UTC · `;
  document.getElementById("foot").textContent = (failure ? failure + " · " : "") + age +
    `refresh every ${REFRESH_MS / 1000} s · every screen of this view shares one read`;
}

async function tick() {
  try {
    const headers = etag ? { "If-None-Match": etag } : {};
    const r = await fetch(DOC, { cache: "no-store", headers });
    if (r.status === 200) {
      etag = r.headers.get("ETag");
      render(await r.json());
      failure = null;
    } else if (r.status !== 304) {
      failure = (await r.json()).error || `HTTP ${r.status}`;
    } else {
      failure = null;
    }
  } catch (e) {
    failure = "Cannot reach the dashboard server: " + e.message;
  }
  foot();
  setTimeout(tick, REFRESH_MS);
}
tick();
</script>
</body></html>
"""
