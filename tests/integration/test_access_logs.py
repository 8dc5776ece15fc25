"""A real nginx's JSON access log, tailed into the broker, read by the job as it is.

nginx (Debian's package) proxies a load of requests to a small backend that answers with the
status and after the delay each request asks for; its access log is written in the
`log_format` docs/events.md gives, and `tail -F | kcat -P` (Debian's kcat) ships each line to
the topic as one record. (Debian bookworm's kcat is linked to librdkafka 2.0.2, which cannot
read the test broker's ApiVersions v3 answer; it runs here on the librdkafka 2.x that the
confluent-kafka wheel bundles, the same ABI.) A line that is not JSON joins the log on the
way. The job reads the topic with `--format access-log`, the README's field map and
`--field route=uri`, sliced by `--dimension route --dimension status_class`; Redis must then
hold, per 10 s window and service, path or status class, exactly the requests and errors a
count over nginx's own log file gives, latency percentiles close to the logged ones, and the
bad line as one dead letter.

Then the generator's own stream as nginx lines (`produce --format access-log`): the same time
rules and de-duplication as the contract's records, against an independent replay.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterator
from decimal import Decimal
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from cli.local.services import free_port, wait_for_port
from tests.integration.helpers import (
    batch_rows,
    deduplicated,
    expected_windows,
    load_truth,
    tidegauge,
)
from tests.procs import wait_until
from tidegauge.core.dimensions import SEP
from tidegauge.core.field_map import NGINX_FIELDS
from tidegauge.core.store import (
    Keys,
    read_batches,
    read_dead_counts,
    read_dead_letters,
    read_windows,
)
from tidegauge.core.windows import WindowSpec

TOPIC = "nginx-access"
WINDOW_MS = 10_000
SERVICES = ("checkout", "search", "login")
ROUTES = ("/api/items", "/api/cart", "/api/pay", "/health")
LOG_FORMAT = (
    "log_format tidegauge escape=json\n"
    """  '{"msec":$msec,"host":"$host","request_time":$request_time,"status":$status,'\n"""
    """  '"remote_user":"$remote_user","request_id":"$request_id","uri":"$uri"}';"""
)
BAD_LINE = "nginx: log rotated by a cron job at 03:00"


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if path is None:
        pytest.fail(f"{name} is not installed: run `make setup` (scripts/setup.sh installs it)")
    return path


class _Backend(BaseHTTPRequestHandler):
    """Answers GET /anything?ms=N&status=S with status S after N ms."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        time.sleep(int(query.get("ms", ["0"])[0]) / 1000)
        body = b"ok\n"
        self.send_response(int(query.get("status", ["200"])[0]))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """nginx on a free port, proxying to the backend, its JSON access log in a temp dir."""
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    root = tmp_path_factory.mktemp("nginx")
    port = free_port()
    log = root / "access.json"
    temp = " ".join(
        f"{kind}_temp_path {root / kind};" for kind in ("proxy", "fastcgi", "uwsgi", "scgi")
    )
    (root / "nginx.conf").write_text(
        f"""
worker_processes 1;
error_log {root / "error.log"};
pid {root / "nginx.pid"};
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {root / "body"}; {temp}
  {LOG_FORMAT}
  server {{
    listen 127.0.0.1:{port};
    access_log {log} tidegauge;
    location / {{ proxy_pass http://127.0.0.1:{backend.server_port}; }}
  }}
}}
"""
    )
    proc = subprocess.Popen(
        [_binary("nginx"), "-p", str(root), "-c", str(root / "nginx.conf"), "-g", "daemon off;"],
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port("127.0.0.1", port, timeout_s=20)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)
        backend.shutdown()


def _load(port: int, n: int, seed: int) -> None:
    """`n` requests from 4 threads: three services, four paths, three users or none,
    2xx/4xx/5xx, 0-30 ms."""
    rng = np.random.default_rng(seed)
    plan = [
        (
            SERVICES[int(rng.integers(len(SERVICES)))],
            ROUTES[int(rng.integers(len(ROUTES)))],
            int(rng.choice([200, 200, 200, 201, 404, 500, 503])),
            int(rng.integers(0, 30)),
            [None, "alice", "bob", "carol"][int(rng.integers(4))],
        )
        for _ in range(n)
    ]

    def worker(part: list[tuple[str, str, int, int, str | None]]) -> None:
        conn = HTTPConnection("127.0.0.1", port, timeout=10)
        for host, path, status, ms, user in part:
            headers = {"Host": host}
            if user:
                headers["Authorization"] = (
                    "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()
                )
            conn.request("GET", f"{path}?ms={ms}&status={status}", headers=headers)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == status
        conn.close()

    threads = [threading.Thread(target=worker, args=(plan[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


#: How much of its input kcat 1.7 (Debian bookworm's) reads at a time.
KCAT_BLOCK = 1024


def _kcat(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Debian's kcat, and an environment whose librdkafka can talk to the test broker.

    librdkafka before 2.1 misreads the ApiVersions v3 answer of the Kafka-protocol broker the
    tests run ("Read underflow"); the confluent-kafka wheel bundles a current librdkafka of the
    same ABI (`librdkafka.so.1`), so kcat is pointed at that one through LD_LIBRARY_PATH.
    """
    import confluent_kafka

    kcat = _binary("kcat")
    bundled = sorted(
        (Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob(
            "librdkafka*.so*"
        )
    )
    if not bundled:
        pytest.fail("confluent-kafka's wheel bundles no librdkafka: run `make setup`")
    libs = tmp / "librdkafka"
    libs.mkdir(exist_ok=True)
    (libs / "librdkafka.so.1").unlink(missing_ok=True)
    (libs / "librdkafka.so.1").symlink_to(bundled[0])
    env = {**os.environ, "LD_LIBRARY_PATH": str(libs)}
    version = subprocess.run([kcat, "-V"], env=env, capture_output=True, text=True, timeout=30)
    assert f"librdkafka {confluent_kafka.libversion()[0]}" in version.stdout, version.stdout
    return [kcat], env


def _records(broker: str) -> list[bytes]:
    """Every record's value on the topic."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    try:
        parts = [TopicPartition(TOPIC, p) for p in range(3)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        out: list[bytes] = []
        idle = 0
        while idle < 3:
            got = consumer.poll(timeout_ms=300)
            idle = 0 if got else idle + 1
            out += [m.value for v in got.values() for m in v]
        return out
    finally:
        consumer.close()


#: Lines on the topic more than once, and how many times more: a send retried under load that
#: the broker wrote twice (kcat asks for idempotence; the test broker may not keep it). The job
#: counts such a line once, as a duplicate of its request id (`shipped` fills it in).
SHIPPED_TWICE: Counter[bytes] = Counter()


@pytest.fixture(scope="module")
def shipped(broker, nginx: tuple[int, Path]) -> Path:  # type: ignore[no-untyped-def]
    """The load served and every line of nginx's log (and the bad one) on the topic."""
    port, log = nginx
    tidegauge("topic", "--bootstrap", broker.address, "--topic", TOPIC, "--partitions", "3")
    log.touch()
    tail = subprocess.Popen(["tail", "-n", "+1", "-F", str(log)], stdout=subprocess.PIPE)
    kcat, env = _kcat(log.parent)
    # -P: produce each line of stdin as one record; at the end of its input kcat delivers
    # what it holds and exits (non-zero if a record was not delivered). kcat 1.7 reads its
    # input in blocks of 1 KiB (kcat 1.8 reads what is there): lines reach the topic as the
    # log grows, the last block's at the end of the input.
    ship = subprocess.Popen(
        # idempotent: a send retried under load is not written twice ("each line once")
        [*kcat, "-P", "-b", broker.address, "-t", TOPIC, "-X", "linger.ms=20"]
        + ["-X", "enable.idempotence=true"],
        stdin=tail.stdout,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert tail.stdout is not None
    tail.stdout.close()  # kcat holds the pipe now
    try:
        _load(port, 300, seed=7)
        with log.open("a") as f:  # something else writes into the log on the way
            f.write(BAD_LINE + "\n")
        _load(port, 300, seed=8)
        # nginx writes a request's line in its log phase, after the response has gone out: the
        # client can be done before the last lines are in the file
        wait_until(lambda: log.read_bytes().count(b"\n") == 601, 20, "every request in the log")
        text = log.read_bytes()
        lines = text.count(b"\n")
        read_whole = text[: len(text) - len(text) % KCAT_BLOCK].count(b"\n")
        wait_until(
            lambda: len(_records(broker.address)) >= read_whole,
            60,
            f"the {read_whole} lines of the log's whole 1 KiB blocks shipped while it grows",
        )
        time.sleep(1)  # tail -F has passed the rest on
    finally:
        tail.terminate()  # kcat sees the end of its input, delivers and exits
        tail.wait(10)
        _, err = ship.communicate(timeout=60)
    assert ship.returncode == 0, err.decode()[-2000:]
    records = Counter(_records(broker.address))
    assert set(records) == set(text.splitlines()) and len(text.splitlines()) == lines
    SHIPPED_TWICE.clear()  # every line at least once; more only as a real shipper may
    SHIPPED_TWICE.update({line: n - 1 for line, n in records.items() if n > 1})
    return log


def _slices(obj: dict[str, Any]) -> dict[str, list[str]]:
    """The store names one logged request counts under, per store: its service; its service's
    and all services' path (`$uri`, without the query) and status class."""
    host, status_class = obj["host"], f"{obj['status'] // 100}xx"
    return {
        "": [host],
        "route": [host + SEP + obj["uri"], "*" + SEP + obj["uri"]],
        "status_class": [host + SEP + status_class, "*" + SEP + status_class],
    }


def _truth(log: Path) -> tuple[dict[str, dict[tuple[int, str], dict[str, Any]]], int]:
    """Per store ("" for services, then each dimension), per (window, name), from nginx's own
    log: requests, errors, latencies, users."""
    out: dict[str, dict[tuple[int, str], dict[str, Any]]] = defaultdict(
        lambda: defaultdict(lambda: {"count": 0, "errors": 0, "latency": [], "users": set()})
    )
    bad = 0
    for line in log.read_text().splitlines():
        try:
            obj = json.loads(line, parse_float=Decimal)
        except json.JSONDecodeError:
            bad += 1
            continue
        ms = int(obj["msec"] * 1000)  # exact: nginx logs milliseconds
        for store, names in _slices(obj).items():
            for name in names:
                cell = out[store][(ms - ms % WINDOW_MS, name)]
                cell["count"] += 1
                cell["errors"] += obj["status"] >= 500
                cell["latency"].append(float(obj["request_time"] * 1000))
                if obj["remote_user"]:
                    cell["users"].add(obj["remote_user"])
    return {store: dict(cells) for store, cells in out.items()}, bad


def test_an_nginx_access_log_counts_as_the_log_file_says(
    job, shipped: Path, redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Per (10 s window, service), per path inside a service and across services (`--field
    route=uri --dimension route`) and per status class: requests, errors and users exactly as
    nginx logged them, latency percentiles within the logged ones' ranks."""
    proc = job(
        TOPIC,
        redis_settings.url,
        tmp_path / "checkpoint",
        format="access-log",
        field=[*NGINX_FIELDS, "route=uri"],
        dimension=["route", "status_class"],
        window="10s",
        allowed_lateness="1h",  # the whole log counts: four threads finish out of order
    )
    assert "access log: event_time=msec:s service=host" in proc.stdout
    truth, bad = _truth(shipped)
    assert bad == 1 and sum(c["count"] for c in truth[""].values()) == 600
    bad_twice = SHIPPED_TWICE[BAD_LINE.encode()]
    r = redis.Redis.from_url(redis_settings.url)
    for store in ("", "route", "status_class"):
        keys = Keys().by(store) if store else Keys()
        rows = {(w.window_start, w.service): w for w in read_windows(r, keys)}
        if not store:
            rows = {k: w for k, w in rows.items() if k[1] != "*"}
        assert set(rows) == set(truth[store]), store
        for key, want in truth[store].items():
            got = rows[key]
            assert (got.count, got.errors, got.late) == (want["count"], want["errors"], 0), key
            assert got.distinct_users == len(want["users"])  # a handful: the sketch is exact
            lat = np.array(want["latency"])
            if len(lat) >= 20:  # t-digest quantiles of the logged latencies: within their ranks
                assert np.quantile(lat, 0.35) <= got.p50 <= np.quantile(lat, 0.65), key
                assert np.quantile(lat, 0.9) <= got.p99 <= lat.max(), key
            assert got.p50 is not None and 0 <= got.p50 < 1_000
        if not store:  # a line shipped twice counts once, as a duplicate
            dups = sum(w.duplicates for w in rows.values())
            assert dups == sum(SHIPPED_TWICE.values()) - bad_twice
    assert {m.decode() for m in r.smembers(Keys().dimensions)} == {"route", "status_class"}
    assert read_dead_counts(r, Keys()) == {"invalid_json": 1 + bad_twice}
    letters = read_dead_letters(r, Keys())
    assert len(letters) == 1 + bad_twice
    assert all(x.raw == BAD_LINE.encode() and "not a JSON log line" in x.detail for x in letters)


def test_generated_access_logs_obey_the_same_time_rules_and_de_duplication(
    broker, produce, job, redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`produce --format access-log` writes the generator's stream as nginx lines (no
    heartbeats): out of order, late and retried requests, read through the README's map in
    several batches. Windows, late counts and duplicates equal an independent replay of the
    watermark and de-duplication rules over the ground truth."""
    topic, truth_path, lateness_ms = "nginx-generated", tmp_path / "truth.jsonl", 20_000
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    produce(
        topic,
        format="access-log",
        start_time="2026-01-01T00:00:00Z",
        count="4000",
        rate="100",
        seed="11",
        out_of_order_fraction="0.1",
        max_delay="8s",
        late_fraction="0.03",
        lateness="20s",
        duplicate_fraction="0.03",
        truth=str(truth_path),
    )
    job(
        topic,
        redis_settings.url,
        tmp_path / "checkpoint",
        format="access-log",
        field=list(NGINX_FIELDS),
        window="10s",
        allowed_lateness="20s",
        max_records_per_trigger="700",
    )
    truth = load_truth(truth_path)
    assert not [t for t in truth if t["kind"] == "heartbeat"]
    r = redis.Redis.from_url(redis_settings.url)
    kept, dups = deduplicated(
        batch_rows(truth, read_batches(r, Keys())), [WindowSpec.tumbling(10_000)], lateness_ms
    )
    accepted, late = expected_windows(kept, 10_000, lateness_ms)
    assert sum(late.values()) > 20 and sum(dups.values()) > 20  # the stream tests what it claims
    rows = read_windows(r, Keys())
    assert {(w.window_start, w.service): w.count for w in rows if w.count} == dict(accepted)
    assert {(w.window_start, w.service): w.late for w in rows if w.late} == dict(late)
    got_dups = {(w.window_start, w.service): w.duplicates for w in rows if w.duplicates}
    assert got_dups == {(s, svc): n for (_, s, svc), n in dups.items()}
    assert read_dead_counts(r, Keys()) == {}
