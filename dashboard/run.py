"""`tidegauge dashboard`: the dashboard's flags, the settings they build, and the launcher.

The launcher runs `streamlit run dashboard/server.py` (the page, dashboard/app.py, plus the wall
page's routes) as a child process (same interpreter) and forwards SIGINT/SIGTERM to it, so
Ctrl-C stops the server cleanly and leaves no process behind. The app receives its own flags
after `--`; the Redis URL travels in the child's environment (`TIDEGAUGE_REDIS_URL`) rather
than on its command line, so a password never shows up in `ps`.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

import plotly

from tidegauge.core.config import (
    ENV_REDIS_URL,
    DashboardSettings,
    dashboard_settings_from_args,
)
from tidegauge.core.durations import parse_duration

__all__ = [
    "APP_PATH",
    "SERVER_PATH",
    "PLOTLY_JS",
    "STATIC_DIR",
    "DashboardSettings",
    "add_app_arguments",
    "add_arguments",
    "app_settings",
    "install_plotly_js",
    "plotly_js_source",
    "run",
    "streamlit_command",
]

#: The Streamlit script of the page, and the server the launcher runs: the page plus the wall
#: page's routes (dashboard/server.py).
APP_PATH = Path(__file__).with_name("app.py")
SERVER_PATH = APP_PATH.with_name("server.py")

#: Where Streamlit's static file serving looks (next to the script; served at `app/static/`),
#: and the plotly.js file dashboard/chart.py loads from there.
STATIC_DIR = APP_PATH.with_name("static")
PLOTLY_JS = "plotly.min.js"


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_app_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by the launcher and the Streamlit app (which reads them after `--`)."""
    parser.add_argument(
        "--redis",
        metavar="URL",
        default=None,
        help=f"Redis URL (default: ${ENV_REDIS_URL} or redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--redis-prefix",
        "--prefix",
        dest="prefix",
        default="tg",
        help="Redis key prefix (default: tg)",
    )
    parser.add_argument(
        "--refresh",
        type=_duration,
        default="1s",
        metavar="DURATION",
        help="how often the live part of the page re-reads Redis (default: 1s)",
    )
    parser.add_argument(
        "--window-range",
        type=_duration,
        default="15m",
        metavar="DURATION",
        help="how much event time the chart shows, ending at the newest window (default: 15m)",
    )
    parser.add_argument(
        "--stale-after",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="warn when the job has not reported for this long (default: 3 of the job's "
        "trigger intervals, at least 3s, as the job reports them)",
    )
    parser.add_argument(
        "--demo-controls",
        action="store_true",
        help="show sidebar buttons that start a latency incident, a late burst or a backlog "
        "pause (for live demos; the generator must run with --live-commands)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge dashboard`."""
    add_app_arguments(parser)
    parser.add_argument("--port", type=int, default=8501, help="HTTP port (default: 8501)")
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 exposes it to the network)",
    )
    parser.add_argument(
        "--theme",
        choices=("auto", "light", "dark"),
        default="auto",
        help="page theme (default auto: the viewer's system setting; each viewer may change it "
        "in the page's settings); the charts follow it",
    )


def app_settings(argv: Sequence[str], env: Mapping[str, str] | None = None) -> DashboardSettings:
    """Settings of the Streamlit app from its argv (after `--`) and the environment.

    Raises ValueError (never SystemExit) on bad flags, so the app can show the message.
    """
    parser = argparse.ArgumentParser(prog="dashboard/app.py", exit_on_error=False, add_help=False)
    add_app_arguments(parser)
    try:
        args, unknown = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as e:
        raise ValueError(str(e)) from None
    except SystemExit:  # argparse still exits on a few errors despite exit_on_error=False
        raise ValueError(f"cannot parse dashboard flags: {' '.join(argv)}") from None
    if unknown:
        raise ValueError(f"unknown dashboard flags: {' '.join(unknown)}")
    return dashboard_settings_from_args(args, os.environ if env is None else env)


def plotly_js_source() -> Path:
    """The plotly.js bundle shipped inside the installed `plotly` Python package."""
    return Path(plotly.__file__).resolve().parent / "package_data" / PLOTLY_JS


def install_plotly_js(static_dir: Path = STATIC_DIR) -> Path:
    """Copy plotly.js where Streamlit serves static files, unless an identical copy is there.

    Raises OSError with the path when the directory is not writable (a read-only install
    must run this once at build time, as the Dockerfile does).
    """
    src = plotly_js_source()
    dest = static_dir / PLOTLY_JS
    if dest.exists() and filecmp.cmp(src, dest, shallow=False):
        return dest
    static_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")  # two launchers at once copy apart
    shutil.copyfile(src, tmp)
    tmp.replace(dest)  # atomic: a browser never gets half a file
    return dest


def streamlit_command(
    settings: DashboardSettings, port: int, address: str, theme: str = "auto"
) -> list[str]:
    """The child's command line: this interpreter running Streamlit on `server.py`."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(SERVER_PATH),
        f"--server.port={port}",
        f"--server.address={address}",
        "--server.headless=true",
        "--browser.gatherUsageStats=false",
        "--client.toolbarMode=viewer",
        # dashboard/chart.py loads plotly.js from app/static/ (dashboard/static/)
        "--server.enableStaticServing=true",
        # A served dashboard: no watching of its source files, and no full garbage collection
        # after every rerun of every session (~9 % of a busy server's CPU, measured).
        "--server.fileWatcherType=none",
        "--runner.postScriptGC=false",
        *([f"--theme.base={theme}"] if theme in ("light", "dark") else []),
        "--",
        *settings.app_argv(),
    ]


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until the server exits or we get SIGINT/SIGTERM."""
    try:
        settings = dashboard_settings_from_args(args, os.environ)
    except ValueError as e:
        print(f"tidegauge dashboard: {e}", file=sys.stderr)
        return 2
    try:
        install_plotly_js()
    except OSError as e:
        print(f"tidegauge dashboard: cannot copy plotly.js for the charts: {e}", file=sys.stderr)
        return 1
    env = {**os.environ, ENV_REDIS_URL: settings.redis.url}
    print(f"Tidegauge dashboard: http://{args.address}:{args.port}", flush=True)
    print(f"  reading {settings.redis!r}", flush=True)
    child = subprocess.Popen(
        streamlit_command(settings, args.port, args.address, args.theme), env=env
    )

    received: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        # On a terminal Ctrl-C reaches the child too (same process group); stopping Streamlit
        # twice is harmless, and forwarding covers `kill PID` aimed at this process alone.
        # SIGTERM either way: uvicorn shuts down gracefully on both, then re-raises the signal,
        # and a re-raised SIGINT ends Streamlit's CLI with "Aborted!" and status 1.
        received.append(signum)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if child.poll() is None:  # only when wait() itself was interrupted by an exception
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    if received:  # stopped as asked (Ctrl-C, a supervisor's SIGTERM): a clean stop
        print("tidegauge dashboard: stopped", flush=True)
        return 0
    return 128 - code if code < 0 else code
