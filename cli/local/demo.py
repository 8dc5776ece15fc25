"""`tidegauge demo`: the whole pipeline as local processes, started and stopped by one command.

Start order: a Kafka-protocol broker (Tansu, in memory) unless one is given, a private
redis-server unless one is given, the events topic, then four children running this same
interpreter: the generator (`tidegauge produce`), the Spark job (`tidegauge job`), the alert
evaluator (`tidegauge alerts` with `DEMO_RULES`) and the dashboard (`tidegauge dashboard`).
Each child is the leader of its own process group (`start_new_session=True`), so:

- a Ctrl-C on the terminal reaches only this process, which then stops the children in order;
- a stop signal goes to the child's leader alone (the job must stop its query before its Spark JVM
  goes away), and whatever is still alive in the group after a grace period (the JVM, Python
  workers, the Streamlit server) is killed with SIGKILL, by group, so nothing is left behind.

Connection settings reach the children through their environment (`TIDEGAUGE_KAFKA_BOOTSTRAP`,
`TIDEGAUGE_REDIS_URL`), never their command lines, so a Redis password does not show up in `ps`.
The generator runs with `--live-commands` and the dashboard with `--demo-controls`: the
dashboard's demo buttons write commands into `{prefix}:control` (`tidegauge.core.control`),
which the generator and the job obey.
Everything here runs in the `tidegauge demo` process; nothing is imported from PySpark except the
Java check.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TextIO, TypeVar

import redis

from cli.local.services import (
    Service,
    parent_death_signal,
    start_broker,
    start_redis,
    wait_for_port,
)
from dashboard.view_url import WALL_PAGE
from tidegauge.catalog.entry import CatalogEntry, Slo
from tidegauge.catalog.topic import CatalogError
from tidegauge.catalog.topic import write as write_catalog
from tidegauge.core.config import (
    ENV_BOOTSTRAP,
    ENV_REDIS_URL,
    KafkaSettings,
    RedisSettings,
    given,
    redact_url,
)
from tidegauge.core.store import Keys, connect, read_status
from tidegauge.traffic.topics import DEFAULT_PARTITIONS, ensure_topic

__all__ = ["DemoError", "add_arguments", "run"]

T = TypeVar("T")

#: How long a child gets to stop after its stop signal before its whole group is killed.
STOP_GRACE_S = 15.0
#: How long a child's exit waits for the demo's own stop signal before it counts as a death.
SIGNAL_GRACE_S = 1.0
#: How long the rest of a group (JVM, Streamlit server) gets once its leader has exited.
GROUP_GRACE_S = 5.0
#: Lines of a child's log shown when it dies.
LOG_TAIL_LINES = 20

# Demo-friendly traffic: a little of every kind of disorder the job handles, so each panel of
# the dashboard has something to show (lateness equals the job's allowed lateness: late events
# arrive 30-60 s after their event time, i.e. after their window closed).
_GENERATOR_KNOBS = (
    "--out-of-order-fraction",
    "0.05",
    "--max-delay",
    "5s",
    "--late-fraction",
    "0.005",
    "--lateness",
    "30s",
    "--malformed-fraction",
    "0.002",
    "--heartbeat-interval",
    "1s",
    # Tansu, the demo's broker, keeps every record batch in memory and pays ~1 ms per 1,000
    # batches in the topic on every request (the job asks for the end and fetches every
    # batch): batched for 100 ms, the generator writes 27 batches/s instead of 91, so a demo
    # slows down 3.4x later (BENCHMARKS.md, "The demo"). Freshness pays ~50 ms.
    "--kafka-option",
    "linger_ms=100",
    "--connect-timeout",
    "10s",
    "--quiet",
)
#: The demo's own alert rules (`tidegauge alerts`, docs/alerts.md): the dashboard's "latency
#: incident" lifts the all-services p99 from ~500 ms to ~2 s, which fires the first.
DEMO_RULES = (
    "p99 > 1500 for 2",
    "error_rate > 10% for 3",
    "freshness > 5s for 5",
)

#: The record formats the demo can run with, and the dimensions its job slices by (in each).
DEMO_FORMATS = ("tidegauge", "otlp_proto", "otlp_json")
DEMO_DIMENSIONS = ("route", "region", "version", "status_class", "team")

#: The demo's service catalog (docs/catalog.md): teams, tiers and SLOs whose budgets the
#: generator's normal traffic keeps (1 % errors, the latencies of `DEFAULT_LATENCY`) and the
#: incident buttons burn (a 5x latency incident sends most of a service's requests over).
DEMO_CATALOG: dict[str, CatalogEntry] = {
    "api": CatalogEntry("platform", "1", slo=Slo(98.5, 250.0, 99.0)),
    "web": CatalogEntry("frontend", "1", slo=Slo(98.5, 800.0, 99.0)),
    "search": CatalogEntry("discovery", "2", slo=Slo(98.0, 500.0, 99.0)),
    "auth": CatalogEntry("platform", "1", slo=Slo(98.5, 150.0, 99.0)),
    "payments": CatalogEntry("payments", "1", slo=Slo(98.5, 1_200.0, 99.0)),
}


def format_flags(record_format: str) -> tuple[list[str], list[str]]:
    """(the generator's, the job's) flags for the demo's `--format`.

    The same format on both sides, the requests' attributes in the records (spans carry them,
    the contract's JSON with `--attributes`), the job's dimensions, and no heartbeats or
    malformed records where the format has none.
    """
    dims = [x for d in DEMO_DIMENSIONS for x in ("--dimension", d)]
    if record_format == "tidegauge":
        return ["--attributes"], dims
    quiet = ["--heartbeat-interval", "0", "--malformed-fraction", "0"]
    return ["--format", record_format, *quiet], ["--format", record_format, *dims]


_JOB_KNOBS = (
    "--trigger",
    "1s",
    "--window",
    "10s",
    "--window",  # the busiest minute and the rolling p99 of the last minute (docs/time.md)
    "60s/sliding",
    "--allowed-lateness",
    "30s",
    "--master",
    "local[2]",
    "--verbose",
)


class DemoError(RuntimeError):
    """A component could not start or died; the message says which and why."""


class _Interrupted(Exception):
    """SIGINT/SIGTERM arrived while starting up."""


@dataclass
class _Child:
    """A child process that leads its own process group, with its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    stopping: bool = False
    exit_code: int | None = None

    def poll(self) -> int | None:
        """Exit code of the leader, or None while it runs."""
        return self.proc.poll()

    def request_stop(self) -> None:
        """SIGTERM to the leader only; it stops its own children (query, JVM, server)."""
        self.stopping = True
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def kill_group(self) -> None:
        """SIGKILL everything still in the group (the leader's pid is the group id)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


@dataclass
class _Stack:
    """What has been started so far, so that any failure can stop exactly that."""

    services: list[Service] = field(default_factory=list)
    children: list[_Child] = field(default_factory=list)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is `pgid` (Linux /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():  # elsewhere: all we can ask is whether the group still exists
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    """The last `n` lines of a log file (empty if it cannot be read)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=n)]
    except OSError:
        return []


def _port_in_use(host: str, port: int) -> bool:
    """True when a server already listens on host:port (bind fails as the server's would)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _first_server(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    return host.strip("[]"), int(port)


class _Demo:
    """One run of `tidegauge demo`: start, watch, stop."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.stack = _Stack()
        self.stop_requested = threading.Event()
        self.signals = 0
        self.state_dir = Path(args.state_dir).expanduser().resolve()
        self.log_dir = self.state_dir / "logs"
        self.own_checkpoint: Path | None = None
        self.started_at = time.monotonic()

    # -- output ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def line(self, name: str, state: str, detail: str) -> None:
        self.say(f"  {name:<10} {state:<8} {detail}")

    def _rel(self, path: Path) -> str:
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
        return str(path)

    def _see(self, log: Path) -> str:
        """The hint "; see LOG", when that log has something to read."""
        with contextlib.suppress(OSError):
            if log.stat().st_size > 0:
                return f"; see {self._rel(log)}"
        return ""

    # -- signals ---------------------------------------------------------------------------

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """First SIGINT/SIGTERM/SIGHUP: stop cleanly. Second: stop now (kill the groups)."""
        self.signals += 1
        self.stop_requested.set()

    def check_stop(self) -> None:
        if self.stop_requested.is_set():
            raise _Interrupted

    def wait_until(
        self, what: str, ready: Callable[[], bool], timeout_s: float, interval_s: float = 0.25
    ) -> None:
        """Poll `ready()` until true; fail on timeout, on a stop signal or when a child dies."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_stop()
            self.check_children()
            if ready():
                return
            if time.monotonic() >= deadline:
                raise DemoError(f"{what} not ready after {timeout_s:.0f}s")
            time.sleep(interval_s)

    def in_thread(self, fn: Callable[[], T], what: str, timeout_s: float) -> T:
        """Run a blocking client call (no child processes) so a stop signal need not wait for it."""
        result: dict[str, T] = {}
        error: dict[str, BaseException] = {}

        def target() -> None:
            try:
                result["value"] = fn()
            except BaseException as e:  # handed to the caller's thread
                error["e"] = e

        worker = threading.Thread(target=target, name=f"demo-{what}", daemon=True)
        worker.start()
        self.wait_until(what, lambda: not worker.is_alive(), timeout_s, interval_s=0.1)
        if "e" in error:
            raise error["e"]
        return result["value"]

    # -- start -----------------------------------------------------------------------------

    def prepare_state_dir(self) -> Path:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for name in ("broker", "redis", "generator", "job", "alerts", "dashboard"):
            with contextlib.suppress(FileNotFoundError):
                (self.log_dir / f"{name}.log").unlink()
        if self.args.checkpoint:
            return Path(self.args.checkpoint).expanduser().resolve()
        # A fresh checkpoint per run: offsets from an earlier run would point past the end of a
        # freshly started in-memory broker. Leftovers of runs that were killed are removed.
        parent = self.state_dir / "checkpoint"
        parent.mkdir(parents=True, exist_ok=True)
        for old in parent.glob("run-*"):
            pid = old.name.removeprefix("run-")
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
        self.own_checkpoint = parent / f"run-{os.getpid()}"
        shutil.rmtree(self.own_checkpoint, ignore_errors=True)
        return self.own_checkpoint

    def start_kafka(self) -> str:
        setting = given(self.args.bootstrap, ENV_BOOTSTRAP, "--bootstrap")
        if setting:
            bootstrap, source = setting
            host, port = _first_server(bootstrap)
            try:
                self.in_thread(lambda: wait_for_port(host, port, timeout_s=10), "Kafka", 15)
            except (TimeoutError, OSError) as e:
                raise DemoError(
                    f"cannot reach the Kafka broker at {bootstrap} (from {source}): {e}"
                ) from e
            self.line("broker", "ready", f"{bootstrap}  (external, from {source})")
            return bootstrap
        log = self.log_dir / "broker.log"
        try:
            svc = start_broker(log_path=log)
        except (RuntimeError, TimeoutError) as e:
            raise DemoError(f"the Kafka broker (Tansu) did not start: {e}{self._see(log)}") from e
        self.stack.services.append(svc)
        self.line("broker", "ready", f"{svc.address}  (Tansu, in memory, pid {svc.proc.pid})")
        return svc.address

    def start_redis(self) -> str:
        setting = given(self.args.redis, ENV_REDIS_URL, "--redis")
        if setting:
            url, source = setting
        else:
            log = self.log_dir / "redis.log"
            try:
                svc = start_redis(log_path=log)
            except (RuntimeError, TimeoutError) as e:
                raise DemoError(f"redis-server did not start: {e}{self._see(log)}") from e
            self.stack.services.append(svc)
            url = f"redis://{svc.address}/0"
            source = f"redis-server pid {svc.proc.pid}"
        client = connect(RedisSettings(url=url))
        last: list[Exception] = []

        def pong() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError as e:  # still loading, or nothing there
                last[:] = [e]
                return False

        try:
            self.wait_until("Redis", pong, timeout_s=5)
        except DemoError:
            reason = last[0] if last else "no answer to PING"
            raise DemoError(
                f"cannot reach Redis at {redact_url(url)} ({source}): {reason}"
            ) from None
        finally:
            client.close()
        self.line("redis", "ready", f"{redact_url(url)}  ({source})")
        return url

    def start_cluster(self, workers: int) -> str:
        """A Spark standalone master and `workers` one-core workers here; the master URL."""
        from cli.local.cluster import start_cluster

        root = self.state_dir / "spark"
        # In this thread: a child's parent-death signal fires when the thread that started it
        # ends, so the JVMs must not be started from a helper thread.
        cluster = start_cluster(workers, root, cores=1, memory="1g")
        self.stack.services += [cluster.master, *cluster.workers]  # stopped in reverse
        self.line(
            "spark",
            "ready",
            f"master {cluster.url} (web UI {cluster.webui}), {workers} workers of 1 core; "
            f"logs in {self._rel(root)}/",
        )
        return cluster.url

    def create_topic(self, kafka: KafkaSettings) -> None:
        try:
            n = self.in_thread(lambda: ensure_topic(kafka, DEFAULT_PARTITIONS, 20), "topic", 25)
        except (RuntimeError, OSError) as e:
            raise DemoError(f"cannot create topic {kafka.topic!r}: {e}") from e
        note = "" if n == DEFAULT_PARTITIONS else f" (existing topic; wanted {DEFAULT_PARTITIONS})"
        self.line("topic", "ready", f"{kafka.topic!r}, {n} partitions{note}")

    def write_catalog(self, kafka: KafkaSettings) -> str:
        """The demo's catalog (`DEMO_CATALOG`) in a topic of its own; returns its name."""
        topic = f"{kafka.topic}-catalog"
        target = replace(kafka, topic=topic)
        entries = list(DEMO_CATALOG.items())
        try:
            self.in_thread(lambda: write_catalog(target, list(entries)), "catalog", 25)
        except (CatalogError, OSError) as e:
            raise DemoError(f"cannot write the catalog to {topic!r}: {e}") from e
        teams = sorted({e.team for _, e in entries if e.team})
        self.line(
            "catalog", "ready", f"{topic!r}: {len(entries)} services, teams {', '.join(teams)}"
        )
        return topic

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> _Child:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
            )
        child = _Child(name, proc, log_path)
        self.stack.children.append(child)
        return child

    def check_children(self) -> None:
        """Raise DemoError naming the first service or child that exited on its own."""
        for svc in self.stack.services:
            code = svc.proc.poll()
            if code is not None:
                raise DemoError(self._died(svc.name, code, svc.log_path))
        for child in self.stack.children:
            code = child.poll()
            if code is not None and not child.stopping:
                raise DemoError(self._died(child.name, code, child.log_path))

    def _died(self, name: str, code: int, log: Path | None) -> str:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        text = f"{name} {how} unexpectedly"
        if log is None:
            return text
        lines = _tail(log)
        if not lines:
            return f"{text}; its log {self._rel(log)} is empty"
        shown = "\n".join(f"    | {line}" for line in lines)
        return f"{text}. Last {len(lines)} lines of {self._rel(log)}:\n{shown}"

    def child_env(self, bootstrap: str, redis_url: str) -> dict[str, str]:
        env = dict(os.environ)
        env[ENV_BOOTSTRAP] = bootstrap
        env[ENV_REDIS_URL] = redis_url
        env["PYTHONUNBUFFERED"] = "1"
        # Without these Spark may start another interpreter for its Python workers, which then
        # time out ("Timed out while waiting for the Python worker to connect back").
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # Nobody edits the app during a demo; watching files would only cost CPU on small boxes.
        env.setdefault("STREAMLIT_SERVER_FILE_WATCHER_TYPE", "none")
        return env

    def start(self) -> tuple[str, str]:
        """Start everything and wait until it is ready; return (dashboard URL or '', Redis URL)."""
        args = self.args
        checkpoint = self.prepare_state_dir()
        self.say(
            f"tidegauge demo: state in {self._rel(self.state_dir)}, "
            f"logs in {self._rel(self.log_dir)}/"
        )
        # Fail before starting anything when the job could never run.
        from jobs.runtime.session import ensure_java

        try:
            java = ensure_java()
        except RuntimeError as e:
            raise DemoError(f"the Spark job needs Java: {e}") from None
        bootstrap = self.start_kafka()
        self.check_stop()
        redis_url = self.start_redis()
        self.check_stop()
        kafka = KafkaSettings.from_env(bootstrap=bootstrap)
        self.create_topic(kafka)
        self.check_stop()
        catalog = self.write_catalog(kafka)
        self.check_stop()

        keys = Keys(args.redis_prefix)
        status_client = connect(RedisSettings(url=redis_url, prefix=args.redis_prefix))
        before = read_status(status_client, keys)  # a reused Redis may hold an older run's status
        env = self.child_env(bootstrap, redis_url)
        rate = f"{args.rate:g}"
        self.spawn(
            "generator",
            [
                "produce",
                "--pace",
                "realtime",
                "--rate",
                rate,
                "--topic",
                kafka.topic,
                "--partitions",
                str(DEFAULT_PARTITIONS),
                # The dashboard's demo buttons write commands into Redis; the generator obeys
                # them (Redis URL from the environment, like every child's).
                "--live-commands",
                "--redis-prefix",
                args.redis_prefix,
                *_GENERATOR_KNOBS,
                *format_flags(args.format)[0],  # (later flags win)
            ],
            env,
        )
        self.line("generator", "started", f"{rate} events/s of event time, now (realtime)")
        master = "local[2]"
        if args.workers:
            master = self.start_cluster(args.workers)
            self.check_stop()
        self.spawn(
            "job",
            [
                "job",
                "--topic",
                kafka.topic,
                "--checkpoint",
                str(checkpoint),
                "--starting-offsets",
                args.starting_offsets,
                "--redis-prefix",
                args.redis_prefix,
                *_JOB_KNOBS,
                *format_flags(args.format)[1],
                "--catalog",
                catalog,
                "--master",  # the last --master wins
                master,
            ],
            env,
        )
        self.line(
            "job", "started", f"Spark {master} (java: {java}), checkpoint {self._rel(checkpoint)}"
        )
        self.spawn(
            "alerts",
            [
                "alerts",
                "--redis-prefix",
                args.redis_prefix,
                *[x for rule in DEMO_RULES for x in ("--rule", rule)],
                "--slo",
            ],
            env,
        )
        self.line("alerts", "started", f"{len(DEMO_RULES)} rules ({'; '.join(DEMO_RULES)})")
        url = ""
        if not args.no_dashboard:
            url = f"http://127.0.0.1:{args.port}"
            self.spawn(
                "dashboard",
                [
                    "dashboard",
                    "--port",
                    str(args.port),
                    "--address",
                    "127.0.0.1",
                    "--prefix",
                    args.redis_prefix,
                    "--demo-controls",  # its buttons drive the generator's --live-commands
                ],
                env,
            )

            def healthy() -> bool:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as resp:
                        return bool(resp.status == 200)
                except (OSError, urllib.error.URLError):
                    return False

            self.wait_until("the dashboard (Streamlit)", healthy, args.ready_timeout)
            self.line("dashboard", "ready", f"{url}  (/_stcore/health answers 200)")

        def first_batch() -> bool:
            try:
                status = read_status(status_client, keys)
            except (redis.RedisError, KeyError, ValueError):
                return False
            return status is not None and (before is None or status.query_id != before.query_id)

        self.line("job", "waiting", "for its first micro-batch (Spark takes ~20-60 s to start)")
        remaining = max(5.0, args.ready_timeout - (time.monotonic() - self.started_at))
        try:
            self.wait_until(
                "the Spark job (no micro-batch status in Redis)",
                first_batch,
                remaining,
                interval_s=0.5,
            )
        finally:
            status_client.close()
        self.line(
            "job",
            "ready",
            f"first micro-batch in Redis after {time.monotonic() - self.started_at:.1f}s",
        )
        return url, redis_url

    # -- watch and stop --------------------------------------------------------------------

    def banner(self, url: str, redis_url: str) -> None:
        rule = "=" * 64
        self.say(rule)
        if url:
            self.say(f"  Tidegauge dashboard:  {url}")
            self.say(f"  Wall page (screens):  {url.rstrip('/')}/{WALL_PAGE}")
        else:
            self.say(
                "  Tidegauge is running (no dashboard).  Try: "
                f"TIDEGAUGE_REDIS_URL={redact_url(redis_url)} tidegauge query status"
            )
        self.say(f"  Redis: {redact_url(redis_url)}   Logs: {self._rel(self.log_dir)}/")
        self.say("  Ctrl-C to stop.")
        self.say(rule)

    def watch(self) -> None:
        """Block until a stop signal (returns) or a component dies (raises DemoError).

        A supervisor that stops every process at once (systemd's control group, a container)
        signals the demo and its children together: a child that exits in that moment is a
        stop, not a death, so a death is only reported if no stop signal follows within
        `SIGNAL_GRACE_S`.
        """
        while not self.stop_requested.is_set():
            try:
                self.check_children()
            except DemoError:
                if self.stop_requested.wait(SIGNAL_GRACE_S):
                    return
                raise
            self.stop_requested.wait(0.5)

    def stop(self) -> bool:
        """Stop the children (generator, job, alerts, dashboard), then Redis and the broker.

        Returns True when every child exited by itself within the grace period.
        """
        clean = True
        children = list(self.stack.children)
        already_gone = {child.name for child in children if child.poll() is not None}
        for child in children:
            child.request_stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            started = time.monotonic()
            if child.name in already_gone:
                self.line(child.name, "exited", f"code {child.poll()} (before the stop)")
                continue
            while child.poll() is None and time.monotonic() < deadline and self.signals < 2:
                time.sleep(0.1)
            if child.poll() is None:
                clean = False
                self.line(child.name, "killed", f"did not stop within {STOP_GRACE_S:.0f}s")
                child.kill_group()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(5)
            else:
                self.line(
                    child.name,
                    "stopped",
                    f"exit {child.poll()} ({time.monotonic() - started:.1f}s)",
                )
        # The rest of each group (the job's JVM and Python workers, the Streamlit server) exits
        # once its leader has: the JVM on EOF of its gateway pipe. Give it a moment, then kill.
        deadline = time.monotonic() + GROUP_GRACE_S
        for child in children:
            while _group_members(child.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = _group_members(child.proc.pid)
            if left:
                self.line(child.name, "killed", f"{len(left)} leftover process(es) {left}")
                child.kill_group()
        for svc in reversed(self.stack.services):
            svc.stop()
            self.line(svc.name, "stopped", svc.address)
        self.stack = _Stack()
        if self.own_checkpoint is not None:
            shutil.rmtree(self.own_checkpoint, ignore_errors=True)
        return clean


#: Signals that stop the demo cleanly. SIGHUP too: closing the terminal must not orphan the stack.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_to(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    old = {s: signal.signal(s, handler) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge demo`."""
    p.add_argument("--port", type=int, default=8501, help="dashboard HTTP port (default 8501)")
    p.add_argument(
        "--rate",
        type=float,
        default=200.0,
        help="events per second the generator sends (default 200)",
    )
    p.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help=f"use this Kafka instead of starting Tansu (env {ENV_BOOTSTRAP})",
    )
    p.add_argument(
        "--redis",
        metavar="URL",
        help=f"use this Redis instead of starting redis-server (env {ENV_REDIS_URL})",
    )
    p.add_argument("--redis-prefix", default="tg", help="Redis key prefix (default tg)")
    p.add_argument(
        "--format",
        choices=DEMO_FORMATS,
        default="tidegauge",
        help="what the generator writes and the job reads: the event contract's JSON "
        "(default, with each request's route, region and version) or OpenTelemetry spans "
        "(otlp_proto, otlp_json); sliced by route, region, version and status_class either "
        "way (docs/dimensions.md)",
    )
    p.add_argument(
        "--state-dir",
        default="./var/demo",
        metavar="DIR",
        help="logs and the Spark checkpoint go here (default ./var/demo)",
    )
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="Spark checkpoint to use (and keep); default: a fresh one per run, "
        "under the state dir, removed on exit",
    )
    p.add_argument(
        "--starting-offsets",
        choices=["earliest", "latest"],
        default="earliest",
        help="where a fresh checkpoint starts reading the topic (default earliest)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="run the job on a Spark standalone cluster of N one-core workers started here "
        "(tidegauge cluster), instead of local[2]",
    )
    p.add_argument(
        "--no-dashboard",
        action="store_true",
        help="do not start the dashboard (headless runs, tests)",
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up when the dashboard or the job's first batch takes longer (default 120)",
    )


def _validate(args: argparse.Namespace) -> str | None:
    if not 0 < args.port < 65536:
        return f"--port must be 1-65535, got {args.port}"
    if not args.rate > 0:
        return f"--rate must be positive, got {args.rate:g}"
    if not args.ready_timeout > 0:
        return "--ready-timeout must be positive"
    if args.workers < 0:
        return f"--workers must be 0 (local[2]) or more, got {args.workers}"
    try:
        if given(args.bootstrap, ENV_BOOTSTRAP, "--bootstrap"):
            KafkaSettings.from_env(bootstrap=args.bootstrap)
        if given(args.redis, ENV_REDIS_URL, "--redis"):
            RedisSettings.from_env(url=args.redis, prefix=args.redis_prefix)
        else:
            RedisSettings(prefix=args.redis_prefix)
    except ValueError as e:
        return str(e)
    if not args.no_dashboard and _port_in_use("127.0.0.1", args.port):
        return (
            f"port {args.port} is in use (another dashboard or demo?): pass --port to pick another"
        )
    return None


def run(args: argparse.Namespace) -> int:
    """`tidegauge demo`: exit 0 after a clean stop, 1 when something failed, 2 on bad flags."""
    problem = _validate(args)
    if problem:
        print(f"tidegauge demo: error: {problem}", file=sys.stderr)
        return 2
    demo = _Demo(args, sys.stdout, sys.stderr)
    code = 0
    with _signals_to(demo.on_signal):
        try:
            url, redis_url = demo.start()
            demo.banner(url, redis_url)
            demo.watch()
            demo.say("tidegauge demo: stopping ...")
        except _Interrupted:
            demo.say("tidegauge demo: interrupted while starting; stopping ...")
        except DemoError as e:
            print(f"tidegauge demo: error: {e}", file=sys.stderr, flush=True)
            code = 1
        except BaseException:
            demo.stop()
            raise
        clean = demo.stop()
    if code == 0:
        demo.say(
            "tidegauge demo: stopped cleanly."
            if clean
            else "tidegauge demo: stopped (some processes had to be killed)."
        )
    return code
