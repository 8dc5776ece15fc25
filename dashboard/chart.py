"""A plotly chart that keeps the user's zoom, pan and legend toggles while its data changes.

Why not `st.plotly_chart`: Streamlit 1.67 derives a chart's identity from its figure, so each
refresh that brings new data mounts a new plotly.js plot and the user's zoom is lost
(streamlit/streamlit#5107; the fix, #16052, is not released). Here a small custom component
(`st.components.v2`), keyed by the chart's name, keeps one `<div>` per chart and calls
`Plotly.react` on it with each new figure; plotly.js then keeps whatever the figure's
`layout.uirevision` protects (dashboard/figures.py sets it to a constant).

plotly.js is the copy bundled with the installed `plotly` package, served by Streamlit's static
file serving (`server.enableStaticServing`, turned on by `tidegauge dashboard`) from
`dashboard/static/`, where `dashboard.run.install_plotly_js` copies it (the launcher does; the
Docker image does it at build time because the app directory is read-only at run time).
"""

from __future__ import annotations

import json

import plotly.io as pio
import streamlit as st

from dashboard.figures import Figure
from dashboard.run import PLOTLY_JS

__all__ = ["CONFIG", "chart", "draw", "figure_json"]

#: plotly.js config of every chart: no logo, no cloud button, resize with the page.
CONFIG = {"displaylogo": False, "responsive": True}

_JS = r"""
const SRC = "app/static/__PLOTLY_JS__";
const CONFIG = __CONFIG__;

function plotly() {
  // One <script> per page, shared by every chart; retried on the next refresh if it failed.
  if (!window.__tidegaugePlotly) {
    window.__tidegaugePlotly = window.Plotly
      ? Promise.resolve(window.Plotly)
      : new Promise((resolve, reject) => {
          const s = document.createElement("script");
          s.src = new URL(SRC, document.baseURI).href;
          s.onload = () => resolve(window.Plotly);
          s.onerror = () => {
            window.__tidegaugePlotly = undefined;
            reject(new Error("cannot load plotly.js from " + s.src +
              ": start the dashboard with `tidegauge dashboard`"));
          };
          document.head.appendChild(s);
        });
  }
  return window.__tidegaugePlotly;
}

// A dark page (the dashboard's --theme dark, or a viewer's choice in its settings) gets charts
// drawn light on dark; the figure JSON itself is theme-free, shared by every viewer.
const DARK = {
  paper_bgcolor: "rgba(0,0,0,0)",
  plot_bgcolor: "rgba(0,0,0,0)",
  font: { color: "#e6e6e6" },
  xaxis: { gridcolor: "#3a3f4b", zerolinecolor: "#3a3f4b", linecolor: "#5a5f6b" },
  yaxis: { gridcolor: "#3a3f4b", zerolinecolor: "#3a3f4b", linecolor: "#5a5f6b" },
};

function isDark() {
  const m = getComputedStyle(document.body).backgroundColor.match(/\d+/g);
  return !!m && 0.299 * m[0] + 0.587 * m[1] + 0.114 * m[2] < 128;
}

function themed(layout) {
  return isDark() ? { ...layout, template: { layout: DARK } } : layout;
}

export default function ({ parentElement, data }) {
  let div = parentElement.querySelector(".tg-plot");
  if (!div) {
    div = document.createElement("div");
    div.className = "tg-plot";
    parentElement.appendChild(div);
  }
  // The figure JSON arrives as bytes (see `draw`): decoded and parsed here.
  const fig = JSON.parse(new TextDecoder().decode(data));
  plotly()
    .then((P) => P.react(div, fig.data, themed(fig.layout), CONFIG))
    .catch((e) => {
      div.className = "tg-plot tg-plot-error";
      div.textContent = "Chart unavailable: " + e.message;
    });
}
""".replace("__PLOTLY_JS__", PLOTLY_JS).replace("__CONFIG__", json.dumps(CONFIG))

_component = st.components.v2.component(
    "tidegauge_plot",
    html="",
    css=".tg-plot-error { color: #d62728; padding: 1rem; }",
    js=_JS,
    # plotly.js styles its plots with rules in the page's <head>: no shadow root.
    isolate_styles=False,
)


def figure_json(fig: Figure) -> bytes:
    """The figure as plotly.js JSON (UTF-8): numpy arrays as lists, datetimes as ISO strings.

    plotly's encoder uses orjson when it is installed (a dependency): ~0.3 ms for a chart of
    11 lines x 360 points against ~5 ms with the standard library.
    """
    return str(pio.to_json(fig, validate=False)).encode()


def chart(fig: Figure, key: str) -> None:
    """Draw `fig` under the fixed `key`; the same key across refreshes keeps the user's view."""
    draw(figure_json(fig), key)


def draw(figure: bytes, key: str) -> None:
    """`chart` of a figure already in JSON (`figure_json`), e.g. one shared by many sessions.

    Sent as bytes: Streamlit hashes them as they are, where a dict holding the JSON would be
    dumped to JSON twice more per session and refresh (a tenth of the server's CPU with ten
    viewers, BENCHMARKS.md).
    """
    _component(key=key, data=figure, height="content")
