"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright.

`tidegauge dashboard` serves the page against a real redis-server seeded through the job's sink
code (a backlog story, tests/integration/seed.py); the browser must show every panel with data,
no error or exception element, and the screenshot is saved (set TIDEGAUGE_SCREENSHOT to keep it,
e.g. as docs/img/dashboard.png).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright import sync_api as playwright

from jobs.redis_sink import touch_status
from tests.integration.seed import seed_live
from tidegauge.config import RedisSettings
from tidegauge.services import free_port
from tidegauge.store import Keys

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PANELS = [
    "Event time vs processing time",
    "Events per second by service",
    "Latency",
    "Distinct users",
    "Lateness",
    "Pipeline health",
]
#: Charts with data, by Streamlit element key (each panel has at least one).
CHARTS = 9



@pytest.fixture
def served(redis_settings: RedisSettings) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegauge.cli", "dashboard", "--port", str(port)]
        + ["--redis", redis_settings.url, "--demo-controls"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as resp:
                    if resp.status == 200:
                        break
            assert proc.poll() is None, "the dashboard exited"
            time.sleep(0.2)
        else:
            pytest.fail("the dashboard did not answer /_stcore/health within 30 s")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_every_panel_renders_with_data_in_a_real_browser(
    served: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: run `make setup`"
    truth = seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    shot = Path(os.environ.get("TIDEGAUGE_SCREENSHOT") or tmp_path / "dashboard.png")
    alive = threading.Event()

    def job_is_alive() -> None:  # an idle job reports every second (jobs/job.py)
        while not alive.wait(0.5):
            touch_status(redis_client, Keys(), time.time_ns() // 1_000_000)

    heartbeat = threading.Thread(target=job_is_alive, daemon=True)
    heartbeat.start()
    try:
        _check_page(served, truth.late, truth.stragglers, shot)
    finally:
        alive.set()
        heartbeat.join()
    assert shot.stat().st_size > 50_000  # a real picture, not a blank page


def _check_page(served: str, late: int, stragglers: int, shot: Path) -> None:
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
            page = browser.new_page(viewport={"width": 1600, "height": 5200})
            page.goto(served)
            # Streamlit draws in steps: wait until every chart has drawn its traces.
            page.wait_for_function(
                "(n) => { const p = document.querySelectorAll('.js-plotly-plot');"
                " return p.length >= n &&"
                " Array.from(p).every(e => e.querySelector('g.trace') !== null); }",
                arg=CHARTS,
                timeout=60_000,
            )
            for title in PANELS:
                assert page.get_by_role("heading", name=title).count() >= 1, title
            plots = page.locator(".js-plotly-plot")
            assert plots.count() >= CHARTS
            for i in range(plots.count()):
                assert plots.nth(i).locator("g.trace").count() > 0, f"chart {i} drew no data"
            assert page.locator('[data-testid="stException"]').count() == 0
            body = page.inner_text("body")
            assert "Cannot read Redis" not in body and "Traceback" not in body
            # the live figures show the seeded truth
            assert f"{late:,}" in body and f"{stragglers:,}" in body
            assert "Stale" not in body  # the job reports: no stale banner
            assert "Demo controls" in body  # --demo-controls shows the sidebar buttons
            page.wait_for_timeout(1500)  # one refresh later the page is still whole
            assert page.locator('[data-testid="stException"]').count() == 0
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
