"""Event time vs processing time, live: the backlog scenario and a quiet stream.

These run the job the way ops teams do (`tidegauge job` with a processing-time trigger) while
`tidegauge produce --pace realtime` sends traffic, so processing time is real wall-clock time.

- Backlog: the generator asks the job (through Redis) to pause for 20 s and then lets it catch
  up. The textbook picture must appear: the processing-time series spikes at catch-up (peak
  >= 3 x the steady rate) while the event-time series stays flat (every full window within
  +-10 % of the steady rate).
- Quiet stream: traffic stops, only heartbeats keep coming; they alone must close the last
  event-time window within window + allowed lateness + 2 triggers.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests import procs
from tests.integration.helpers import tidegauge
from tidegauge.core.store import Keys, read_arrivals, read_status, read_windows

WINDOW_MS = 5_000


@contextmanager
def running_job(*args: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`tidegauge job ARGS` in the background; stopped with SIGTERM (as Ctrl-C would) at exit."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "job", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait(what: str, cond, timeout_s: float, log: Path) -> None:  # type: ignore[no-untyped-def]
    procs.wait_until(cond, timeout_s, what, lambda: f"job log:\n{log.read_text()[-4000:]}", 0.2)


def test_backlog_spikes_processing_time_but_not_event_time(
    broker,
    redis_settings,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    topic, url = "backlog-events", redis_settings.url
    r = redis.Redis.from_url(url)
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    log = tmp_path / "job.log"
    job = [
        "--bootstrap",
        broker.address,
        "--topic",
        topic,
        "--redis",
        url,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--window",
        "5s",
        "--allowed-lateness",
        "10s",
        "--trigger",
        "1s",
        "--master",
        "local[2]",
        "--shuffle-partitions",
        "2",
    ]
    with running_job(*job, log=log):
        # Let Spark start and the first batch run before traffic: a cold start is a backlog too.
        tidegauge(
            "produce",
            "--bootstrap",
            broker.address,
            "--topic",
            topic,
            "--pace",
            "realtime",
            "--duration",
            "2s",
            "--rate",
            "50",
            "--quiet",
            "--seed",
            "1",
        )
        _wait("the job's first batch", lambda: read_status(r, Keys()) is not None, 120, log)
        started = time.time() * 1000
        tidegauge(
            "produce",
            "--bootstrap",
            broker.address,
            "--topic",
            topic,
            "--pace",
            "realtime",
            "--duration",
            "50s",
            "--rate",
            "300",
            "--seed",
            "2",
            "--quiet",
            "--out-of-order-fraction",
            "0.05",
            "--max-delay",
            "2s",
            "--heartbeat-interval",
            "500ms",
            "--scenario",
            "backlog",
            "--backlog-at",
            "12s",
            "--backlog-pause",
            "20s",
            "--redis",
            url,
            timeout=180,
        )
        ended = time.time() * 1000
        # A generous wait: on two busy cores (another test worker) batches take 1-2 s and the
        # catch-up once took longer than 90 s. How fast it catches up is a benchmark's matter.
        _wait(
            "the job to catch up",
            lambda: (s := read_status(r, Keys())) is not None and s.watermark >= ended - 11_000,
            180,
            log,
        )
    event = {
        w.window_start: w.events
        for w in read_arrivals(r, Keys(), "event", service="*")
        if started + WINDOW_MS <= w.window_start and w.window_end <= ended - WINDOW_MS
    }
    processing = {
        w.window_start: w.events
        for w in read_arrivals(r, Keys(), "processing", service="*")
        if w.window_start >= started
    }
    assert len(event) >= 7, event
    steady = 300 * WINDOW_MS / 1000
    for start, n in event.items():
        assert abs(n - steady) <= 0.1 * steady, (start, n, event)
    peak = max(processing.values())
    typical = statistics.median(processing.values())
    assert typical <= 1.3 * steady, processing
    assert peak >= 3 * steady, processing
    # The spike is the catch-up: it comes after the 20 s pause began.
    peak_at = max(processing, key=lambda s: processing[s])
    assert peak_at >= started + 12_000 + 20_000 - WINDOW_MS, (peak_at - started, processing)


def test_heartbeats_alone_close_the_last_window(
    broker,
    redis_settings,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    topic, url = "quiet-events", redis_settings.url
    r = redis.Redis.from_url(url)
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    log = tmp_path / "job.log"
    trigger_ms, lateness_ms = 2_000, 5_000
    job = [
        "--bootstrap",
        broker.address,
        "--topic",
        topic,
        "--redis",
        url,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--window",
        "5s",
        "--allowed-lateness",
        "5s",
        "--trigger",
        "2s",
        "--master",
        "local[2]",
        "--shuffle-partitions",
        "2",
    ]
    with running_job(*job, log=log):
        tidegauge(
            "produce",
            "--bootstrap",
            broker.address,
            "--topic",
            topic,
            "--pace",
            "realtime",
            "--duration",
            "2s",
            "--rate",
            "50",
            "--quiet",
            "--seed",
            "1",
            "--heartbeat-interval",
            "0",
        )
        _wait("the job's first batch", lambda: read_status(r, Keys()) is not None, 120, log)
        producer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli.main",
                "produce",
                "--bootstrap",
                broker.address,
                "--topic",
                topic,
                "--pace",
                "realtime",
                "--duration",
                "10s",
                "--rate",
                "100",
                "--seed",
                "3",
                "--quiet",
                "--out-of-order-fraction",
                "0",
                "--heartbeat-interval",
                "200ms",
                "--heartbeat-tail",
                "30s",
            ],
        )
        try:
            stop = time.time() * 1000 + 10_000  # traffic ends 10 s of event time from now
            last_end = stop - stop % WINDOW_MS + WINDOW_MS

            def last_closed() -> bool:
                rows = read_windows(r, Keys(), service="*", since_ms=last_end - WINDOW_MS)
                return any(w.window_end >= last_end - WINDOW_MS and w.closed for w in rows) and (
                    (s := read_status(r, Keys())) is not None and s.watermark >= last_end
                )

            budget = WINDOW_MS + lateness_ms + 2 * trigger_ms
            _wait("the last window to close", last_closed, 60, log)
            closed_after = time.time() * 1000 - stop
        finally:
            producer.terminate()
            producer.wait(timeout=30)
    assert closed_after <= budget, f"closed {closed_after:.0f} ms after traffic stopped"
    # Nothing was counted for the heartbeats: the windows hold exactly the events sent.
    rows = read_windows(r, Keys(), service="*")
    assert all(w.closed for w in rows if w.window_end <= last_end)
