"""The job's Prometheus figures (jobs/runtime/metrics.py) from what the job reports, and its
/healthz and /readyz answers, served by the real HTTP server on a free port."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from jobs.runtime.metrics import READY_WITHIN_REPORTS, JobMetrics
from jobs.sink.footprint import Fitted
from tidegauge.core.retention import Retention


def value(m: JobMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def summary(batch: int, records: int, **kw: object) -> dict[str, object]:
    return {"batch_id": batch, "input_rows": records, "batch_duration_ms": 400, **kw}


def test_batches_add_up_and_gauges_hold_the_last_one() -> None:
    m = JobMetrics(1_000)
    now_ms = round(time.time() * 1000)
    m.progress(
        summary(
            0,
            500,
            watermark=now_ms - 20_000,
            offsets={"0": 300, "1": 200},
            topic_end_offsets={"0": 1_000, "1": 200},
            freshness={"p50_ms": 800, "p99_ms": 1_500, "max_ms": 2_000},
        ),
        {"numInputRows": 3},
    )
    m.progress(summary(1, 250, offsets={"0": 550, "1": 200}, topic_end_offsets={"0": 1_000}), {})
    m.progress(summary(2, 0), {"numInputRows": 0})  # nothing read: a report, not a batch
    m.progress(summary(1, 250), {})  # delivered again (the job replays the last ones)
    assert value(m, "tidegauge_batches_total") == 2
    assert value(m, "tidegauge_input_records_total") == 750
    assert value(m, "tidegauge_batch_duration_seconds_count") == 2
    assert value(m, "tidegauge_batch_duration_seconds_sum") == pytest.approx(0.8)
    assert value(m, "tidegauge_consumer_lag_records", partition="0") == 450
    assert value(m, "tidegauge_consumer_lag_records", partition="1") == 0
    assert value(m, "tidegauge_freshness_seconds", quantile="0.99") == 1.5
    delay = value(m, "tidegauge_watermark_delay_seconds")
    assert delay is not None and 19 < delay < 30


def test_the_retention_in_force_and_the_store_it_projects() -> None:
    m = JobMetrics(1_000)
    kept = Retention.parse("16m,1m:7h29m,1h:4d")
    m.retention(Fitted(kept, 1.9e9, 2 << 30, "6h,1m:7d,1h:90d"))
    assert value(m, "tidegauge_retention_seconds", tier="raw") == 16 * 60
    assert value(m, "tidegauge_retention_seconds", tier="1m") == 7 * 3600 + 29 * 60
    assert value(m, "tidegauge_retention_seconds", tier="1h") == 4 * 86_400
    assert value(m, "tidegauge_store_projected_bytes") == 1.9e9
    assert value(m, "tidegauge_retention_size_bytes") == 2 << 30


def test_committed_batches_count_dead_letters_by_reason_duplicates_late_and_redis() -> None:
    m = JobMetrics(1_000)
    m.committed(0, 0.12, 0, ["wrong_type", "invalid_json", "wrong_type"], 4, 7)
    m.committed(1, 3.5, 2, [], 0, 1, {("event", 0): b"abc", ("dead", 0): b"de"})
    m.committed(1, 3.5, 2, [], 0, 1)  # the same batch again (written again after a failure)
    assert value(m, "tidegauge_dead_letters_total", reason="wrong_type") == 2
    assert value(m, "tidegauge_dead_letters_total", reason="invalid_json") == 1
    assert value(m, "tidegauge_duplicates_total") == 4
    assert value(m, "tidegauge_late_events_total") == 8
    assert value(m, "tidegauge_redis_retries_total") == 2
    assert value(m, "tidegauge_redis_write_seconds_count") == 2
    assert value(m, "tidegauge_redis_write_seconds_bucket", le="5.0") == 2
    assert value(m, "tidegauge_redis_write_seconds_bucket", le="1.0") == 1
    assert value(m, "tidegauge_state_groups") == 2  # the state the batch left
    assert value(m, "tidegauge_state_bytes") == 5


def test_ready_only_while_the_job_reports() -> None:
    m = JobMetrics(2_000)
    assert not m.ready()  # nothing reported yet
    m.idle()
    assert m.ready()
    assert m.last_report_s is not None
    window = READY_WITHIN_REPORTS * 2.0
    assert m.ready(m.last_report_s + window) and not m.ready(m.last_report_s + window + 0.1)


@pytest.fixture
def served() -> Iterator[tuple[JobMetrics, str]]:
    m = JobMetrics(1_000)
    server = m.serve("127.0.0.1", 0)
    try:
        yield m, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_server_answers_metrics_health_and_readiness(served: tuple[JobMetrics, str]) -> None:
    m, base = served
    assert get(f"{base}/healthz") == (200, "ok\n")
    assert get(f"{base}/readyz")[0] == 503  # no report yet
    m.progress(summary(0, 42), {"numInputRows": 42})
    assert get(f"{base}/readyz") == (200, "ok\n")
    status, text = get(f"{base}/metrics")
    assert status == 200
    assert "tidegauge_input_records_total 42.0" in text
    assert "# TYPE tidegauge_batch_duration_seconds histogram" in text
