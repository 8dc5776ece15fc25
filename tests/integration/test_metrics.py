"""The job's Prometheus metrics, scraped by a real Prometheus server (Debian's package).

A seeded stream with malformed records and retries goes through `tidegauge job
--metrics-port`, live (500 ms trigger), while `prometheus` scrapes it every second. Once the job
has read the whole topic, Prometheus's own query API must answer with the job's figures: the
records it read (the topic's size), its dead letters by reason and its duplicates (what Redis
holds), no lag, a recent batch; and /readyz says ready. The job then stops and its endpoint
goes with it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.local.services import free_port, wait_for_port
from tests.integration.helpers import tidegauge
from tests.integration.seed import seed_live
from tests.procs import wait_until
from tidegauge.core.store import Keys, read_batches, read_dead_counts, read_status

TOPIC = "metrics-events"
COUNT = 3_000


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


class Prometheus:
    """A prometheus server of the test's own, scraping one target every second."""

    def __init__(self, target: str, workdir: Path, path: str = "/metrics") -> None:
        exe = shutil.which("prometheus")
        if exe is None:
            pytest.fail("prometheus is not installed: run `make setup` (scripts/setup.sh)")
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: tidegauge\n"
            f"    metrics_path: {path}\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "prometheus.log").open("wb"),
        )
        wait_for_port("127.0.0.1", self.port, timeout_s=30, proc=self.proc)
        # The port opens before the TSDB is up: queries answer 503 until /-/ready says 200.
        wait_until(
            lambda: _get(f"http://127.0.0.1:{self.port}/-/ready")[0] == 200,
            60,
            "Prometheus to be ready",
        )

    def query(self, expr: str) -> dict[str, float]:
        """Instant query: {label set as text: value} of each series."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        status, text = _get(url)
        assert status == 200, text
        out: dict[str, float] = {}
        for series in json.loads(text)["data"]["result"]:
            labels = {
                k: v
                for k, v in series["metric"].items()
                if k not in ("__name__", "job", "instance")
            }
            out[json.dumps(labels, sort_keys=True)] = float(series["value"][1])
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)


@pytest.fixture(scope="module")
def stream(broker, produce) -> str:  # type: ignore[no-untyped-def]
    tidegauge("topic", "--bootstrap", broker.address, "--topic", TOPIC, "--partitions", "3")
    produce(
        TOPIC,
        start_time="2026-02-01T00:00:00Z",
        count=str(COUNT),
        rate="100",
        seed="4",
        malformed_fraction="0.03",
        duplicate_fraction="0.03",
        heartbeat_interval="1s",
    )
    return TOPIC


@pytest.fixture
def job_with_metrics(
    broker, stream: str, redis_settings, tmp_path: Path
) -> Iterator[tuple[Any, int]]:  # type: ignore[no-untyped-def]
    port = free_port()
    log = tmp_path / "job.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "job", "--bootstrap", broker.address, "--topic", stream]
        + ["--redis", redis_settings.url, "--checkpoint", str(tmp_path / "cp")]
        + ["--trigger", "500ms", "--master", "local[2]", "--max-records-per-trigger", "800"]
        + ["--metrics-port", str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
        print(log.read_text(errors="replace")[-3000:])


def test_prometheus_scrapes_the_jobs_figures(
    job_with_metrics: tuple[Any, int], redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    proc, port = job_with_metrics
    target = f"127.0.0.1:{port}"
    wait_until(lambda: _get(f"http://{target}/healthz")[0] == 200, 120, "the metrics endpoint")
    prom = Prometheus(target, tmp_path)
    try:
        r = redis.Redis.from_url(redis_settings.url)

        def drained() -> bool:
            status = read_status(r, Keys())
            return status is not None and sum(status.offsets.values()) >= COUNT

        wait_until(drained, 180, "the job to read the whole topic")
        records = sum(b["input_rows"] for b in read_batches(r, Keys()))
        dead = read_dead_counts(r, Keys())
        duplicates = sum(b.get("duplicates") or 0 for b in read_batches(r, Keys()))
        assert sum(dead.values()) > 20 and duplicates > 20  # the stream has what it tests

        def scraped() -> bool:
            got = prom.query("tidegauge_input_records_total")
            return bool(got) and max(got.values()) >= records

        wait_until(scraped, 60, "Prometheus to scrape the last batch")
        assert prom.query("tidegauge_input_records_total") == {"{}": records}
        by_reason = prom.query("tidegauge_dead_letters_total")
        assert {json.loads(k)["reason"]: int(v) for k, v in by_reason.items()} == dead
        assert prom.query("tidegauge_duplicates_total") == {"{}": duplicates}
        lag = prom.query("tidegauge_consumer_lag_records")
        assert lag and set(lag.values()) == {0.0}, lag
        batches = prom.query("tidegauge_batches_total")["{}"]
        assert batches == len([b for b in read_batches(r, Keys()) if b["input_rows"]])
        stalled = prom.query("time() - tidegauge_last_report_timestamp_seconds > 60")
        assert stalled == {}  # the docs' "job stalled" alert would not fire
        assert _get(f"http://{target}/readyz")[0] == 200
    finally:
        prom.stop()
    proc.terminate()
    assert proc.wait(60) == 0
    assert _get(f"http://{target}/healthz")[0] == 0  # gone with the job


def test_prometheus_scrapes_the_alert_evaluator(redis_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`tidegauge alerts --metrics-port`: its evaluations and rules through Prometheus, ready
    while it evaluates, and gone with it when it stops."""
    port = free_port()
    log = tmp_path / "alerts.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "alerts", "--redis", redis_settings.url]
        + ["--rule", "p99 > 800 for 3 on api", "--rule", "error_rate > 0.05 for 2"]
        + ["--interval", "500ms", "--metrics-port", str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    target = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(f"http://{target}/readyz")[0] == 200, 60, "alerts to evaluate")
        prom = Prometheus(target, tmp_path)
        try:
            wait_until(
                lambda: prom.query("tidegauge_alerts_evaluations_total").get("{}", 0) >= 3,
                60,
                "Prometheus to scrape three evaluations",
            )
            assert prom.query("tidegauge_alert_rules") == {"{}": 2}
            assert prom.query("tidegauge_alerts_evaluation_errors_total") == {"{}": 0}
        finally:
            prom.stop()
    finally:
        if proc.poll() is None:
            proc.terminate()
        code = proc.wait(30)
    assert code == 0, log.read_text()
    assert _get(f"http://{target}/healthz")[0] == 0


def test_prometheus_scrapes_the_dashboard_server(served, redis_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The dashboard's `/tidegauge/metrics` on its own port: Redis reads per view and the wall
    documents served, through Prometheus."""
    seed_live(redis_client, Keys(), time.time_ns() // 1_000_000)
    for _ in range(3):
        assert _get(served + "/tidegauge/wall.json")[0] == 200
        time.sleep(1.1)  # each past the refresh interval: a read of its own
    prom = Prometheus(served.removeprefix("http://"), tmp_path, path="/tidegauge/metrics")
    try:
        wait_until(
            lambda: (
                prom.query("tidegauge_dashboard_wall_documents_total").get(
                    json.dumps({"status": "200"}), 0
                )
                >= 3
            ),
            60,
            "Prometheus to scrape the wall documents",
        )
        reads = prom.query("tidegauge_dashboard_reads_total")
        assert reads[json.dumps({"view": "page"})] >= 3
        assert prom.query("tidegauge_dashboard_read_errors_total") == {}
    finally:
        prom.stop()
