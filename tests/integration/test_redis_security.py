"""Redis with access control and TLS: the job, `query` and the dashboard as a production would run
them, and no password anywhere it could leak.

A redis-server of the test's own, with the default user off and two ACL users: `job`, limited
to the key prefix `tg:*` and the command groups the job needs, and `viewer`, read-only on the
same keys. The job writes through `job`, `tidegauge query` reads through `viewer`, and a viewer
cannot write. A second redis-server speaks only TLS (`tls-port`), with a CA and a server
certificate the test makes with openssl; the job and `query` use `rediss://`. The passwords are
passed in TIDEGAUGE_REDIS_URL and must not appear in the job's output, any process's command
line while it runs, the status in Redis, or the dashboard's page.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cli.local.services import free_port, wait_for_port
from tests.integration.helpers import tidegauge
from tests.tls_proxy import make_certificates

JOB_PW = "job-Secret-4711"
VIEWER_PW = "viewer-Secret-0815"
TLS_PW = "tls-Secret-2718"
#: What the job may do: its own keys only; reading, writing, transactions, connecting.
JOB_ACL = f"on >{JOB_PW} ~tg:* resetchannels -@all +@read +@write +@transaction +@connection"
VIEWER_ACL = f"on >{VIEWER_PW} ~tg:* resetchannels -@all +@read +@connection"


def _redis_server(*args: str) -> subprocess.Popen:
    exe = shutil.which("redis-server")
    assert exe, "redis-server is missing: run `make setup`"
    return subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@contextlib.contextmanager
def _serving(port: int, *args: str) -> Iterator[None]:
    """A redis-server of this module with `args`, answering on `port`, until the block ends."""
    proc = _redis_server(*args)
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[int]:
    port = free_port()
    with _serving(
        port,
        *("--port", str(port)),
        *("--user", "default", "off"),
        *("--user", "job", *JOB_ACL.split()),
        *("--user", "viewer", *VIEWER_ACL.split()),
    ):
        yield port


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    d = tmp_path_factory.mktemp("tls")
    make_certificates(d)
    port = free_port()
    with _serving(
        port,
        *("--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no"),
        *("--tls-cert-file", str(d / "server.crt"), "--tls-key-file", str(d / "server.key")),
        *("--tls-ca-cert-file", str(d / "ca.crt"), "--requirepass", TLS_PW),
    ):
        yield port, d / "ca.crt"


@pytest.fixture(scope="module")
def stream(broker) -> str:  # type: ignore[no-untyped-def]
    topic = "secured-events"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic)
    tidegauge(
        *("produce", "--bootstrap", broker.address, "--topic", topic, "--pace", "fast"),
        *("--start-time", "2026-04-01T00:00:00Z", "--count", "2000", "--rate", "100"),
        *("--seed", "5", "--malformed-fraction", "0.01", "--quiet"),
    )
    return topic


def _job(broker: str, topic: str, checkpoint: Path, url: str) -> subprocess.Popen:
    """The job with its Redis URL in the environment, as `tidegauge demo` passes it."""
    env = dict(os.environ, TIDEGAUGE_REDIS_URL=url, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "job", "--bootstrap", broker, "--topic", topic]
        + ["--checkpoint", str(checkpoint), "--trigger", "available-now", "--master", "local[2]"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


def _command_lines() -> list[str]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                out.append(
                    (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                pass
    return out


def _run_job_watching_ps(broker: str, topic: str, checkpoint: Path, url: str, secret: str) -> str:
    proc = _job(broker, topic, checkpoint, url)
    seen_in_ps = []
    while proc.poll() is None:
        seen_in_ps += [c[:200] for c in _command_lines() if secret in c]
        time.sleep(0.5)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, out
    assert seen_in_ps == [], seen_in_ps
    assert secret not in out, out
    return out


def test_job_and_readers_with_acl_users(
    acl_redis: int, stream: str, broker, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    job_url = f"redis://job:{JOB_PW}@127.0.0.1:{acl_redis}/0"
    viewer_url = f"redis://viewer:{VIEWER_PW}@127.0.0.1:{acl_redis}/0"
    out = _run_job_watching_ps(broker.address, stream, tmp_path / "cp", job_url, JOB_PW)
    assert "redis://job:***@" in out  # the job says where it writes, without the password
    env = {"TIDEGAUGE_REDIS_URL": viewer_url}
    status = tidegauge("query", "status", env=env).stdout
    assert "watermark" in status and VIEWER_PW not in status
    windows = tidegauge("query", "windows", "--json", env=env).stdout
    assert '"count"' in windows
    # the viewer reads, never writes; the job's user reaches nothing outside its prefix
    viewer = redis.Redis.from_url(viewer_url)
    with pytest.raises(redis.exceptions.NoPermissionError):
        viewer.set("tg:x", "1")
    job = redis.Redis.from_url(job_url)
    with pytest.raises(redis.exceptions.NoPermissionError):
        job.set("other:x", "1")
    # no password in anything the job stored (its status names the Redis it writes to)
    admin_view = [job.dump(k) or b"" for k in job.scan_iter("tg:*")]
    assert all(JOB_PW.encode() not in v and VIEWER_PW.encode() not in v for v in admin_view)


def test_job_and_query_over_tls(
    tls_redis: tuple[int, Path], stream: str, broker, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    port, ca = tls_redis
    url = f"rediss://:{TLS_PW}@127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    _run_job_watching_ps(broker.address, stream, tmp_path / "cp", url, TLS_PW)
    status = tidegauge("query", "status", env={"TIDEGAUGE_REDIS_URL": url}).stdout
    assert "watermark" in status
    # the server takes TLS only: the same port without TLS is refused
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis(host="127.0.0.1", port=port, password=TLS_PW, socket_timeout=3).ping()


def test_dashboard_reads_as_the_viewer_and_shows_no_password(  # type: ignore[no-untyped-def]
    acl_redis: int, stream: str, broker, tmp_path: Path
) -> None:
    from playwright import sync_api as playwright

    from tests.integration.fixtures import CHROMIUM

    viewer_url = f"redis://viewer:{VIEWER_PW}@127.0.0.1:{acl_redis}/0"
    if not redis.Redis.from_url(viewer_url).exists("tg:status"):  # the ACL test's job ran first
        job_url = f"redis://job:{JOB_PW}@127.0.0.1:{acl_redis}/0"
        _run_job_watching_ps(broker.address, stream, tmp_path / "cp", job_url, JOB_PW)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "dashboard", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, TIDEGAUGE_REDIS_URL=viewer_url),
        start_new_session=True,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc, timeout_s=30)
        assert not [c for c in _command_lines() if VIEWER_PW in c]
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1600, "height": 3000})
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_selector(".js-plotly-plot g.trace", timeout=60_000)
            page.wait_for_timeout(1_500)
            body = page.inner_text("body")
            html = page.content()
            browser.close()
        assert "Events per second" in body and "Cannot read Redis" not in body
        assert VIEWER_PW not in body and VIEWER_PW not in html
        assert page_has_no_exception(html)
    finally:
        proc.terminate()
        proc.wait(10)


def page_has_no_exception(html: str) -> bool:
    return 'data-testid="stException"' not in html


#: Passwords without a word Spark's own redaction looks for in values ("secret", "password",
#: "token", ...: `spark.redaction.regex`), so that only keeping them out of Spark hides them: a
#: Redis password in the job's URL, and a Kafka SASL password given as a client option (the
#: test broker speaks plaintext: the clients ignore it, and it must still appear nowhere).
PLAIN_PW = "h7Fq2-Lm9x-30"
KAFKA_PW = "k4Rt9-Vb2w-71"

#: Spark UI pages and REST endpoints of a running streaming job ("{app}": the application id);
#: every page they link to within the UI is read too.
UI_PAGES = (
    "/jobs/",
    "/stages/",
    "/storage/",
    "/environment/",
    "/executors/",
    "/SQL/",
    "/StreamingQuery/",
    "/api/v1/applications",
    "/api/v1/applications/{app}/jobs",
    "/api/v1/applications/{app}/stages?details=true",
    "/api/v1/applications/{app}/environment",
    "/api/v1/applications/{app}/executors",
    "/api/v1/applications/{app}/sql?details=true&planDescription=true",
)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 (the job's own UI)
        return resp.read().decode(errors="replace")


def _crawl(base: str, app: str, most: int = 150) -> dict[str, str]:
    """The UI pages above and every page of the UI they link to (at most `most`)."""
    todo = [p.format(app=app) for p in UI_PAGES]
    seen: dict[str, str] = {}
    while todo and len(seen) < most:
        path = todo.pop(0)
        if path in seen or "kill" in path:  # (kill links stop jobs: never followed)
            continue
        seen[path] = _get(base + path)
        for link in re.findall(r'href="(/[^"#]*)"', seen[path]):
            link = html.unescape(link)
            if not link.startswith(("/static", "/api/v1")) and link not in seen:
                todo.append(link)
    return seen


@pytest.fixture(scope="module")
def password_redis() -> Iterator[int]:
    port = free_port()
    with _serving(port, "--port", str(port), "--requirepass", PLAIN_PW):
        yield port


def test_a_running_jobs_ui_rest_event_log_and_log_show_no_password(
    password_redis: int, stream: str, broker, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The job with a Redis password in its URL and a Kafka SASL password as an option, live
    (1 s trigger): no Spark UI page or REST answer, no line of Spark's event log and no line of
    its output holds either (docs/deploy.md says how to expose the UI on purpose)."""
    job_url = f"redis://:{PLAIN_PW}@127.0.0.1:{password_redis}/0"
    ui_port = free_port()
    events = tmp_path / "events"
    events.mkdir()
    log = tmp_path / "job.log"
    argv = [
        *("job", "--bootstrap", broker.address, "--topic", stream),
        *("--checkpoint", str(tmp_path / "cp"), "--trigger", "1s", "--master", "local[2]"),
        *("--kafka-option", f"sasl_plain_password={KAFKA_PW}", "--verbose"),
        *("--conf", f"spark.ui.port={ui_port}", "--conf", "spark.eventLog.enabled=true"),
        *("--conf", f"spark.eventLog.dir=file://{events}"),
        *("--conf", "spark.eventLog.compress=false"),  # JSON lines a test can read
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, TIDEGAUGE_REDIS_URL=job_url, PYTHONUNBUFFERED="1"),
            start_new_session=True,
        )
    job = redis.Redis.from_url(job_url)
    try:
        deadline = time.monotonic() + 180
        while not job.exists("tg:status") and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.5)
        time.sleep(3)  # a few batches more: every page has something to show
        base = f"http://127.0.0.1:{ui_port}"
        (app,) = [a["id"] for a in json.loads(_get(base + "/api/v1/applications"))]
        pages = _crawl(base, app)
        assert any("StreamingQuery" in p for p in pages) and len(pages) >= len(UI_PAGES)
        assert any("/SQL/execution/" in p for p in pages)  # the queries' plans were read
        for path, text in pages.items():
            for secret in (PLAIN_PW, KAFKA_PW):
                assert secret not in text, (path, secret)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    written = [f.read_text(errors="replace") for f in events.rglob("*") if f.is_file()]
    assert written and any("SparkListenerSQLExecutionStart" in t for t in written)
    output = log.read_text()
    assert "tidegauge job: stopped" in output or proc.returncode == 0, output[-2000:]
    for text in (*written, output):
        assert PLAIN_PW not in text and KAFKA_PW not in text
