"""The wall page (dashboard/wall.py) served by `tidegauge dashboard`, read by many screens.

Real parts: the dashboard process, a real redis-server seeded through the job's sink code
(tests/integration/seed.py), Debian's Chromium driven by Playwright for the page itself, and
plain HTTP clients for the many screens. What the screens must see is the seeded ground truth;
what they must cost is one Redis read per view and refresh, however many they are.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from playwright import sync_api as playwright

from cli.local.services import free_port
from jobs.sink.redis_sink import SinkBatch, write_batch
from jobs.sink.status import touch_status
from tests.integration.fixtures import CHROMIUM
from tests.integration.helpers import trace, values
from tests.integration.seed import job_reporting, seed_live, seeded_window
from tidegauge.core.dimensions import member
from tidegauge.core.store import Keys

#: The wall's charts (dashboard/wall.py WALL_CHARTS).
WALL_CHARTS = ("events_per_s", "latency_ts", "lateness_windows", "health")


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def _commands(r: redis.Redis) -> int:
    return int(r.info("stats")["total_commands_processed"])


def test_wall_screens_show_the_seeded_truth_and_share_one_read_per_refresh(
    served: str, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    touch_status(redis_client, Keys(), time.time_ns() // 1_000_000)
    doc_url = served + "/tidegauge/wall.json"
    status, headers, body = _get(doc_url)
    assert status == 200 and headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    tiles = {h["label"]: h["value"] for h in doc["headline"]}
    assert tiles["Late events"] == f"{truth.late:,}"
    assert tiles["Stragglers"] == f"{truth.stragglers:,}"
    assert doc["problems"] == [] and set(doc["charts"]) == set(WALL_CHARTS)
    # the events chart's total line: the seeded events per window, as events per second
    total = trace(doc["charts"]["events_per_s"], "all services (*)")
    assert values(total["y"])[-1] == pytest.approx(truth.events[truth.newest_start] / 10)
    # a screen that has this refresh's document gets 304 and no body
    status, _, body = _get(doc_url, {"If-None-Match": headers["etag"]})
    assert (status, body) == (304, b"")

    # One screen's read, then thirty screens at once: the thirty cost Redis what one did.
    time.sleep(1.2)  # past the refresh interval (1 s): the next request reads anew
    before = _commands(redis_client)
    assert _get(doc_url)[0] == 200
    one = _commands(redis_client) - before
    time.sleep(1.2)
    before = _commands(redis_client)
    with ThreadPoolExecutor(30) as pool:
        answers = list(pool.map(lambda _: _get(doc_url), range(30)))
    thirty = _commands(redis_client) - before
    assert all(a[0] == 200 for a in answers)
    assert len({a[1]["etag"] for a in answers}) == 1  # one document for all of them
    assert one > 10  # a real read of the store...
    assert thirty <= one + 5  # ...done once for thirty screens (+ INFO itself)


def test_wall_page_draws_its_charts_and_follows_new_windows_without_reloading(
    served: str, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    requests: list[str] = []
    errors: list[str] = []
    with job_reporting(redis_client, Keys()), playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1400})
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(served + "/tidegauge/wall")
            page.wait_for_function(
                "(keys) => keys.every(k => { const e = document.getElementById('chart-' + k);"
                " return e && e.querySelector('g.trace') !== null; })",
                arg=list(WALL_CHARTS),
                timeout=60_000,
            )
            tiles = _tiles(page)
            assert tiles["Late events"] == f"{truth.late:,}"
            assert tiles["Stragglers"] == f"{truth.stragglers:,}"
            body = page.inner_text("body")
            assert "Stale" not in body and "Cannot" not in body
            shown = page.evaluate(NEWEST_JS)
            # the job writes the next window: the page shows it without a reload
            start = truth.newest_start + 10_000
            write_batch(
                redis_client,
                Keys(),
                SinkBatch(10_000, [seeded_window(start, s) for s in truth.services]),
            )
            page.wait_for_function(f"(old) => ({NEWEST_JS})() !== old", arg=shown, timeout=20_000)
        finally:
            browser.close()
    assert errors == []
    pages = [u for u in requests if u.endswith("/tidegauge/wall")]
    polls = [u for u in requests if "/tidegauge/wall.json" in u]
    assert len(pages) == 1 and len(polls) >= 2  # one page load, then polls


#: The newest x of the events chart's first line.
NEWEST_JS = """() => {
  const xs = document.getElementById('chart-events_per_s').data[0].x;
  return String(xs[xs.length - 1]);
}"""


def _tiles(page: Any) -> dict[str, str]:
    out: dict[str, str] = page.evaluate(
        "() => Object.fromEntries(Array.from(document.querySelectorAll('.tile .value'))"
        ".map(e => [e.dataset.label, e.textContent]))"
    )
    return out


@pytest.mark.parametrize(
    "served", [["--redis", f"redis://127.0.0.1:{free_port()}/0"]], indirect=True
)
def test_wall_document_says_when_redis_is_unreachable(served: str) -> None:
    status, _, body = _get(served + "/tidegauge/wall.json")
    assert status == 503
    assert "Cannot read Redis at redis://127.0.0.1:" in json.loads(body)["error"]
    status, _, body = _get(served + "/tidegauge/readyz")  # not ready: it says why
    assert status == 503 and body.startswith(b"Redis does not answer")


def test_wall_link_parts_it_cannot_read_are_named(served: str, redis_client: redis.Redis) -> None:
    seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    status, _, body = _get(served + "/tidegauge/wall.json?range=7x&kind=hourly")
    doc = json.loads(body)
    assert status == 200
    assert any(p.startswith("range=7x") for p in doc["problems"])
    assert any(p.startswith("kind=hourly") for p in doc["problems"])
    assert set(doc["charts"]) == set(WALL_CHARTS)  # the rest of the view is shown
    # the page loads plotly.js from Streamlit's static files, relative to its own path
    status, _, page = _get(served + "/tidegauge/wall")
    assert status == 200 and b'src="../app/static/plotly.min.js"' in page
    assert _get(served + "/app/static/plotly.min.js")[0] == 200


def test_wall_of_an_empty_store_says_it_waits_for_the_job(served: str) -> None:
    status, _, body = _get(served + "/tidegauge/wall.json")
    doc = json.loads(body)
    assert status == 200
    assert doc["empty"].startswith("Waiting for the job's first batch")
    assert doc["charts"] == {} and doc["headline"] == []


def test_a_wall_link_with_a_dimension_shows_its_breakdown(
    served: str, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    starts = truth.starts[-3:]
    # /cart in three windows, /pay in two, /login in one (50 events each, as the job writes)
    slices = [
        seeded_window(start, member("*", route))
        for route, n in (("/cart", 3), ("/pay", 2), ("/login", 1))
        for start in starts[-n:]
    ]
    write_batch(
        redis_client, Keys(), SinkBatch(99, []), dimensions={"route": SinkBatch(99, slices)}
    )
    status, _, body = _get(served + "/tidegauge/wall.json?dim=route&top=2")
    doc = json.loads(body)
    assert status == 200 and doc["problems"] == []
    fig = doc["charts"]["breakdown"]
    assert [t["name"] for t in fig["data"]] == ["/cart", "/pay"]  # the top 2 by events
    assert values(fig["data"][0]["y"]) == [5.0, 5.0, 5.0]  # 50 events a 10 s window
    assert fig["layout"]["title"]["text"] == "route of all services, top 2 by events"
    plain = json.loads(_get(served + "/tidegauge/wall.json")[2])
    assert "breakdown" not in plain["charts"]


def test_the_servers_metrics_count_its_reads_and_wall_documents_and_readyz_asks_redis(
    served: str, redis_client: redis.Redis
) -> None:
    """`/tidegauge/metrics` (Prometheus text): one read per view and refresh however many
    screens, the 200 and 304 answers to them; `/tidegauge/readyz` 200 while Redis answers."""
    seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)

    def figures() -> dict[str, float]:
        status, headers, body = _get(served + "/tidegauge/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    before = figures()
    time.sleep(1.2)  # past the refresh interval: the next document is read anew
    _, headers, _ = _get(served + "/tidegauge/wall.json?range=1h")
    for _ in range(5):  # five screens that have it
        assert (
            _get(served + "/tidegauge/wall.json?range=1h", {"If-None-Match": headers["etag"]})[0]
            == 304
        )
    after = figures()

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta('tidegauge_dashboard_reads_total{view="page"}') == 1
    assert delta('tidegauge_dashboard_wall_documents_total{status="200"}') == 1
    assert delta('tidegauge_dashboard_wall_documents_total{status="304"}') == 5
    assert delta('tidegauge_dashboard_read_seconds_count{view="page"}') == 1
    assert after["tidegauge_dashboard_views"] >= 1
    assert after["tidegauge_dashboard_last_read_timestamp_seconds"] > time.time() - 60
    status, _, body = _get(served + "/tidegauge/readyz")
    assert (status, body) == (200, b"ok\n")
