"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright.

`tidegauge dashboard` serves the page against a real redis-server seeded through the job's sink
code (a backlog story, tests/integration/seed.py); the browser must show every panel with data,
no error or exception element, and the screenshot is saved (set TIDEGAUGE_SCREENSHOT to keep it,
e.g. as docs/img/dashboard.png).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright import sync_api as playwright

from jobs.sink.redis_sink import SinkBatch, write_batch
from tests.integration.fixtures import CHROMIUM
from tests.integration.seed import PANELS, W, job_reporting, seed_live, seeded_window
from tidegauge.core import control
from tidegauge.core.store import Keys

#: Charts with data, by Streamlit element key (each panel has at least one).
CHARTS = 9


def test_every_panel_renders_with_data_in_a_real_browser(
    served: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: run `make setup`"
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    shot = Path(os.environ.get("TIDEGAUGE_SCREENSHOT") or tmp_path / "dashboard.png")
    with job_reporting(redis_client, Keys()):  # an idle job reports (jobs/sink/status.py)
        _check_page(served, truth.late, truth.stragglers, shot)
    assert shot.stat().st_size > 50_000  # a real picture, not a blank page


@contextlib.contextmanager
def _page(
    served: str, query: str = "", width: int = 1600, charts: int = CHARTS
) -> Iterator[playwright.Page]:
    """Headless Chromium on the served page (`query`: "?a=b"), once every chart has drawn."""
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(
                viewport={"width": width, "height": 5200},
                permissions=["clipboard-read", "clipboard-write"],
            )
            page.goto(served + query)
            # Streamlit draws in steps: wait until every chart has drawn its traces.
            page.wait_for_function(
                "(n) => { const p = document.querySelectorAll('.js-plotly-plot');"
                " return p.length >= n &&"
                " Array.from(p).every(e => e.querySelector('g.trace') !== null); }",
                arg=charts,
                timeout=60_000,
            )
            yield page
        finally:
            browser.close()


def _check_page(served: str, late: int, stragglers: int, shot: Path) -> None:
    with _page(served) as page:
        for title in PANELS:
            assert page.get_by_role("heading", name=title).count() >= 1, title
        plots = page.locator(".js-plotly-plot")
        assert plots.count() >= CHARTS
        for i in range(plots.count()):
            assert plots.nth(i).locator("g.trace").count() > 0, f"chart {i} drew no data"
        assert page.locator('[data-testid="stException"]').count() == 0
        body = page.inner_text("body")
        assert "Cannot read Redis" not in body and "Traceback" not in body
        assert "Chart unavailable" not in body  # plotly.js was served
        # the live figures show the seeded truth
        assert f"{late:,}" in body and f"{stragglers:,}" in body
        assert "Stale" not in body  # the job reports: no stale banner
        assert "Demo controls" in body  # --demo-controls shows the sidebar buttons
        page.wait_for_timeout(1500)  # one refresh later the page is still whole
        assert page.locator('[data-testid="stException"]').count() == 0
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)


#: What the events/s chart shows: its x range, the newest window start, and trace visibility.
VIEW_JS = """() => {
  const e = document.querySelector('.st-key-events_per_s .js-plotly-plot');
  const xs = e.data[0].x;
  return {range: e.layout.xaxis.range, newest: String(xs[xs.length - 1]),
          visible: e.data.map(t => t.visible === undefined ? true : t.visible)};
}"""


def test_zoom_and_legend_toggles_survive_refreshes_that_bring_new_data(
    served: str, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    with _page(served) as page:
        chart = page.locator(".st-key-events_per_s .js-plotly-plot")
        before = page.evaluate(VIEW_JS)
        # the user drags a box over the middle third of the plot (plotly's default zoom)...
        box = chart.locator(".nsewdrag").first.bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] / 3, y)
        page.mouse.down()
        page.mouse.move(box["x"] + 2 * box["width"] / 3, y, steps=8)
        page.mouse.up()
        # ...and hides the second service's line from the legend
        chart.locator("g.legend g.traces").nth(2).click()
        page.wait_for_function(
            "(r) => { const e = document.querySelector('.st-key-events_per_s .js-plotly-plot');"
            " return String(e.layout.xaxis.range) !== String(r) &&"
            " e.data[2].visible === 'legendonly'; }",
            arg=before["range"],
        )
        zoomed = page.evaluate(VIEW_JS)
        # the job writes the next window: the chart must show it without undoing the user's view
        start = truth.newest_start + W
        write_batch(
            redis_client,
            Keys(),
            SinkBatch(10_000, [seeded_window(start, s) for s in truth.services]),
        )
        page.wait_for_function(
            "(old) => { const e = document.querySelector('.st-key-events_per_s .js-plotly-plot');"
            " const xs = e.data[0].x; return String(xs[xs.length - 1]) !== old; }",
            arg=zoomed["newest"],
            timeout=20_000,
        )
        page.wait_for_timeout(2_500)  # two more refreshes (1 s each)
        after = page.evaluate(VIEW_JS)
    assert after["newest"] > zoomed["newest"]  # new data arrived...
    assert after["range"] == zoomed["range"] != before["range"]  # ...under the same zoom
    assert after["visible"] == zoomed["visible"]
    assert after["visible"][2] == "legendonly"


#: Service names a producer could send (each within the contract's 128 characters).
HOSTILE = [
    "<b>bold</b>",
    '<a href="javascript:alert(1)">link</a>',
    "<script>alert(2)</script>",
    "<img src=x onerror=alert(3)>",
    "a & b &amp; <br> c",
    "שירות-תשלומים",  # right-to-left
    "n" * 120,
]


def test_service_names_are_shown_literally_and_nothing_runs(
    served: str, redis_client: redis.Redis
) -> None:
    seed_live(redis_client, Keys(), time.time_ns() // 1_000_000, names=HOSTILE)
    dialogs: list[str] = []
    with _page(served) as page:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        # legends: every name's text is the name itself, and no markup became an element
        legend = page.evaluate(
            "() => Array.from(document.querySelectorAll("
            "'.st-key-events_per_s g.legend text.legendtext')).map(t => t.textContent)"
        )
        assert set(HOSTILE) <= set(legend), legend
        for tag in ("a", "b", "script", "img"):
            assert page.locator(f".js-plotly-plot svg {tag}").count() == 0, tag
        # hover labels: the unified hover over the events/s chart names every service literally
        plot = page.locator(".st-key-events_per_s .js-plotly-plot .nsewdrag").first
        box = plot.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
        page.wait_for_selector(".st-key-events_per_s .hoverlayer text", timeout=10_000)
        hover = page.evaluate(
            "() => Array.from(document.querySelectorAll("
            "'.st-key-events_per_s .hoverlayer text')).map(t => t.textContent).join('\\n')"
        )
        for name in HOSTILE:
            assert name in hover, (name, hover)
        # tables: the latency table's cells (its grid's accessible table) hold the names as text
        # (the grid draws its cells after the charts: on a busy machine, a moment later)
        page.wait_for_selector(
            "[data-testid=stDataFrame] [role=gridcell], [data-testid=stDataFrame] td",
            state="attached",  # the grid's accessible copy of its cells is never drawn
            timeout=15_000,
        )
        cells = page.evaluate(
            "() => Array.from(document.querySelectorAll("
            "'[data-testid=stDataFrame] [role=gridcell], [data-testid=stDataFrame] td'))"
            ".map(e => e.textContent)"
        )
        assert set(HOSTILE) <= {c.strip() for c in cells}, cells
        # selectors: the services filter lists the names as they are
        page.locator(".st-key-services").click()
        options = page.locator('[role="option"]').all_inner_texts()
        assert set(HOSTILE) <= {o.strip() for o in options}, options
        page.keyboard.press("Escape")
        page.wait_for_timeout(1_500)  # a refresh later
        assert page.locator('[data-testid="stException"]').count() == 0
    assert dialogs == []


#: Top-row figures whose text does not fit their box (the browser cuts them with an ellipsis).
CUT_JS = """() => Array.from(document.querySelectorAll(
    '[data-testid="stMetricLabel"] p, [data-testid="stMetricValue"] div,'
    + '[data-testid="stMetricValue"]'))
  .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_a_link_restores_its_view_and_no_figure_is_cut(
    served: str, redis_client: redis.Redis, width: int
) -> None:
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    one = truth.services[1]
    with _page(served, f"?svc={one}&range=1h&total=0&lrange=5m", width) as page:
        sidebar = page.locator('section[data-testid="stSidebar"]')
        assert sidebar.is_visible()
        assert one in sidebar.locator('[data-testid="stMultiSelect"]').inner_text()
        assert page.locator(".st-key-range input").input_value() == "1 h"
        shown = page.evaluate(
            "() => document.querySelector('.st-key-events_per_s .js-plotly-plot').data"
            ".map(t => [t.name, t.visible === undefined ? true : t.visible])"
        )
        assert shown[0] == ["all services (*)", False]  # total=0: the total line hidden
        assert [n for n, v in shown if v is True] == [one]
        assert "svc=" in page.url and "range=1h" in page.url and "lrange=5m" in page.url
        assert page.evaluate(CUT_JS) == []
        labels = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
        assert "Watermark delay" in labels, labels
        # "Copy link" puts the link of this very view on the clipboard
        page.get_by_text("Share this view").click()
        button = page.locator(".st-key-copy_link button")  # in the component's shadow root
        button.click()
        playwright.expect(button).to_have_text("Copied ✓")
        copied = page.evaluate("() => navigator.clipboard.readText()")
        shown = sidebar.locator('[data-testid="stCode"]').inner_text().strip()
        assert copied == shown and copied.startswith(served)
        assert f"svc={one}" in copied and "range=1h" in copied and "total=0" in copied


@pytest.mark.parametrize("served", [["--theme", "dark"]], indirect=True)
def test_wall_mode_in_the_dark_theme_hides_the_sidebar_and_keeps_every_figure_whole(
    served: str, redis_client: redis.Redis
) -> None:
    now = time.time_ns() // 1_000_000
    seed_live(redis_client, Keys(), now)
    # an annotated incident on the charts (it once made the total toggle come back off)
    control.start_incident(redis_client, Keys(), now - 200_000, 60_000, 5.0, "*")
    with _page(served, "?wall=1", 1280) as page:
        assert not page.locator('section[data-testid="stSidebar"]').is_visible()
        page.wait_for_timeout(2_500)  # a few refreshes
        assert page.locator(".st-key-show_total input").is_checked()  # the default: on
        big = page.evaluate(
            "() => parseFloat(getComputedStyle(document.querySelector("
            "'[data-testid=\"stMetricValue\"]')).fontSize)"
        )
        assert big >= 40  # legible across a room
        assert page.evaluate(CUT_JS) == []
        assert "wall=1" in page.url
        # the charts follow the page's dark theme: light text on a transparent background
        fonts = page.evaluate(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".map(e => [e._fullLayout.font.color, e._fullLayout.paper_bgcolor])"
        )
        assert fonts and all(f == ["#e6e6e6", "rgba(0,0,0,0)"] for f in fonts), fonts[:3]
