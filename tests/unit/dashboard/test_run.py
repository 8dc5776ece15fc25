"""The launcher's settings, the child's command line and plotly.js (dashboard/run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard.run import (
    PLOTLY_JS,
    app_settings,
    install_plotly_js,
    plotly_js_source,
    streamlit_command,
)
from tidegauge.core.config import DashboardSettings, RedisSettings

pytestmark = pytest.mark.unit


def test_app_settings_from_argv_then_env() -> None:
    env = {"TIDEGAUGE_REDIS_URL": "redis://:secret@h:1/2"}
    s = app_settings(["--refresh", "2s", "--window-range=5m", "--prefix", "x"], env)
    assert s.redis.url == "redis://:secret@h:1/2" and s.redis.prefix == "x"
    assert (s.refresh_ms, s.window_range_ms, s.stale_after_ms) == (2000, 300_000, None)
    assert not s.demo_controls
    assert app_settings(["--stale-after", "4s", "--demo-controls"], env).stale_after_ms == 4000
    assert app_settings(["--demo-controls"], env).demo_controls
    assert app_settings(["--redis", "redis://o:3/0"], env).redis.url == "redis://o:3/0"
    assert app_settings([], {}).redis.url == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    "argv", [["--refresh", "soon"], ["--refresh", "10ms"], ["--bogus"], ["--redis", "http://x"]]
)
def test_app_settings_bad_flags_raise_value_error(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        app_settings(argv, {})


def test_streamlit_command_keeps_password_off_the_command_line() -> None:
    s = DashboardSettings(RedisSettings(url="redis://:secret@h:1/0", prefix="p"), 1500)
    cmd = streamlit_command(s, 8600, "0.0.0.0")
    assert "secret" not in " ".join(cmd)
    assert cmd[1:4] == ["-m", "streamlit", "run"]
    assert "--server.port=8600" in cmd and "--server.address=0.0.0.0" in cmd
    assert "--server.headless=true" in cmd and "--browser.gatherUsageStats=false" in cmd
    assert "--server.enableStaticServing=true" in cmd  # dashboard/chart.py loads plotly.js
    # served, not developed: no source watching, no full GC after every session's rerun
    assert "--server.fileWatcherType=none" in cmd and "--runner.postScriptGC=false" in cmd
    app_args = cmd[cmd.index("--") + 1 :]
    assert app_settings(app_args, {"TIDEGAUGE_REDIS_URL": s.redis.url}) == s


def test_install_plotly_js_copies_the_bundle_once(tmp_path: Path) -> None:
    dest = install_plotly_js(tmp_path / "static")
    assert dest.read_bytes() == plotly_js_source().read_bytes()
    assert dest.name == PLOTLY_JS
    stamp = dest.stat().st_mtime_ns
    assert install_plotly_js(tmp_path / "static") == dest
    assert dest.stat().st_mtime_ns == stamp  # identical: left alone
    dest.write_bytes(b"stale")
    install_plotly_js(tmp_path / "static")
    assert dest.read_bytes() == plotly_js_source().read_bytes()  # replaced when it differs
