"""Kafka over TLS, end to end: topic, producer and the job's source with `--kafka-option`.

The test broker cannot serve TLS itself (Tansu 0.6.0 takes `--cert` but never completes a
handshake), so a TLS-terminating proxy process (tests/tls_proxy.py) sits in front of it with a
certificate from a fresh CA, and the broker advertises the proxy's address: every connection
a client makes, bootstrap and after, is TLS, and a client without TLS gets nothing. `tidegauge
topic` (flags), `tidegauge produce` (TIDEGAUGE_KAFKA_OPTIONS) and `tidegauge job` (flags; its
source's clients on the driver and in the Python workers) go through it; the job's windows
must equal the ground truth, and a password given as an option appears nowhere: not in any
output, not in Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from cli.local.services import Service, free_port, start_broker, wait_for_port
from tests.integration.helpers import batch_rows, expected_windows, load_truth, tidegauge
from tests.tls_proxy import make_certificates
from tidegauge.core.store import Keys, read_batches

SECRET = "s3cret-kafka-pa55word"
TOPIC = "secure-events"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    d = tmp_path_factory.mktemp("kafka-tls")
    certs = make_certificates(d)
    proxy_port = free_port()
    broker: Service = start_broker(log_path=d / "broker.log", advertised_port=proxy_port)
    proxy = subprocess.Popen(
        [sys.executable, "-m", "tests.tls_proxy", "--listen", str(proxy_port)]
        + ["--to", str(broker.port), "--cert", str(certs.cert), "--key", str(certs.key)],
        cwd=ROOT,
    )
    try:
        wait_for_port("127.0.0.1", proxy_port, proc=proxy)
        yield {
            "address": f"127.0.0.1:{proxy_port}",
            "options": ["security_protocol=SSL", f"ssl_cafile={certs.ca}"],
        }
    finally:
        proxy.terminate()
        proxy.wait(10)
        broker.stop()


@pytest.fixture(scope="module")
def run(
    tls_broker: dict[str, Any], module_redis_db, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("kafka-tls-run")
    address, options = tls_broker["address"], tls_broker["options"]
    flags = [x for o in options for x in ("--kafka-option", o)]
    url = module_redis_db().url
    topic = tidegauge(
        *("topic", "--bootstrap", address, "--topic", TOPIC, "--partitions", "2"), *flags
    )
    produced = tidegauge(
        *("produce", "--bootstrap", address, "--topic", TOPIC, "--pace", "fast", "--quiet"),
        *("--start-time", "2026-02-01T00:00:00Z", "--count", "3000", "--rate", "100"),
        *("--seed", "5", "--out-of-order-fraction", "0.1", "--max-delay", "5s"),
        *("--late-fraction", "0.03", "--lateness", "20s", "--malformed-fraction", "0.01"),
        *("--duplicate-fraction", "0", "--truth", str(tmp / "truth.jsonl")),
        env={"TIDEGAUGE_KAFKA_OPTIONS": ",".join(options)},
    )
    job = tidegauge(
        *("job", "--bootstrap", address, "--topic", TOPIC, "--redis", url),
        *("--checkpoint", str(tmp / "checkpoint"), "--trigger", "available-now"),
        *("--master", "local[2]", "--window", "10s", "--allowed-lateness", "20s"),
        *("--max-records-per-trigger", "1000", *flags),
        *("--kafka-option", f"sasl_plain_password={SECRET}"),  # not used by SSL: must not show
    )
    r = redis.Redis.from_url(url)
    accepted, late = expected_windows(
        batch_rows(load_truth(tmp / "truth.jsonl"), read_batches(r, Keys())), 10_000, 20_000
    )
    return {
        "url": url,
        "client": r,
        "accepted": accepted,
        "late": late,
        "output": topic.stdout + topic.stderr + produced.stdout + produced.stderr,
        "job": job,
    }


def test_a_client_without_tls_gets_nothing(tls_broker: dict[str, Any]) -> None:
    with pytest.raises(KafkaError):
        KafkaAdminClient(bootstrap_servers=tls_broker["address"], bootstrap_timeout_ms=3_000)


def test_the_job_reads_the_stream_over_tls_and_its_windows_equal_the_truth(
    run: dict[str, Any],
) -> None:
    out = tidegauge("query", "windows", "--redis", run["url"], "--json").stdout
    rows = json.loads(out)
    got = {(w["window_start"], w["service"]): w["count"] for w in rows if w["count"]}
    got_late = {(w["window_start"], w["service"]): w["late"] for w in rows if w["late"]}
    assert got == dict(run["accepted"]) and sum(got.values()) > 2000
    assert got_late == dict(run["late"]) and sum(got_late.values()) > 10


def test_the_start_line_names_the_options_and_hides_the_password(run: dict[str, Any]) -> None:
    job = run["job"]
    assert "kafka security_protocol=SSL" in job.stdout
    assert "sasl_plain_password=***" in job.stdout
    for text in (job.stdout, job.stderr, run["output"]):
        assert SECRET not in text
    r: redis.Redis = run["client"]
    for key in r.scan_iter(count=1000):
        assert SECRET.encode() not in key
        kind = r.type(key)
        if kind == b"hash":
            values = [*r.hkeys(key), *r.hvals(key)]
        elif kind == b"string":
            values = [r.get(key) or b""]
        elif kind in (b"zset", b"set"):
            values = r.zrange(key, 0, -1) if kind == b"zset" else list(r.smembers(key))
        else:
            values = []
        assert all(SECRET.encode() not in v for v in values), key


def test_a_misspelt_option_stops_the_job_before_it_starts(
    tls_broker: dict[str, Any], tmp_path: Path
) -> None:
    got = tidegauge(
        *("job", "--bootstrap", tls_broker["address"], "--topic", TOPIC),
        *("--checkpoint", str(tmp_path / "checkpoint")),
        *("--kafka-option", "secuirty_protocol=SSL"),
        check=False,
    )
    assert got.returncode == 2
    assert "--kafka-option secuirty_protocol: no Kafka client knows this setting" in got.stderr
