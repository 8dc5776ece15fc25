"""Fixtures of the integration tests that serve the dashboard."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from cli.local.services import free_port
from tidegauge.core.config import RedisSettings


@pytest.fixture
def served(redis_settings: RedisSettings, request: pytest.FixtureRequest) -> Iterator[str]:
    """`tidegauge dashboard` (with the flags of an indirect parameter, if any): its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "dashboard", "--port", str(port)]
        + ["--redis", redis_settings.url, "--demo-controls", *getattr(request, "param", [])],
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
