"""What several integration tests share, so that no test module imports another.

The browser the dashboard tests drive; `job_args` and `snapshot`, the exactly-once checks of
test_job_replay.py and outages/; and the three hours of event time test_retention.py
writes batch by batch as the job would, which the dashboard's roll-up test reads too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import redis

from cli.local.services import wait_for_port
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch
from jobs.sink.rollup import BatchTime
from jobs.state.rows import ArrivalUpdate, LateUpdate, WindowCount, WindowUpdate
from tests.fixtures import M, S, T
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.retention import Retention
from tidegauge.core.store import Keys
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

#: Debian's headless Chromium, which Playwright drives.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


# --- exactly-once: the job's flags, and a store's content without its wall-clock times ----------


MAX_PER_TRIGGER = 400


#: Times of day live in the status and batch history; the epoch is a random token per store.
EXCLUDED = {"tg:status", "tg:batches", "tg:epoch"}
#: Measurements of the store itself (`MEMORY USAGE` at a batch's time of day), not results.
MEASURED = ":retention:sizes"


def snapshot(r: redis.Redis) -> dict[str, Any]:
    """Every key's full content, type-aware, except what records wall-clock times.

    That is the status keys, the store's measured sizes, and the processing-time series: a
    replayed batch keeps its timestamp (Spark stores it in the offset log), but two separate
    runs process the same batch at different times of day, so only the event- and broker-time
    content must match.
    """
    out: dict[str, Any] = {}
    for raw_key in sorted(r.keys("*")):
        key = raw_key.decode()
        if key in EXCLUDED or key.startswith("tg:arr:processing:") or key.endswith(MEASURED):
            continue
        kind = r.type(key).decode()
        if kind == "hash":
            out[key] = sorted(r.hgetall(key).items())
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            out[key] = sorted(r.smembers(key))
        else:
            out[key] = r.dump(key)
    return out


def job_args(bootstrap: str, topic: str, url: str, checkpoint: Path, trigger: str) -> list[str]:
    return [
        "job",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--redis",
        url,
        "--checkpoint",
        str(checkpoint),
        "--window",
        "10s",
        "--window",  # sliding rows (timelines, peaks) must replay byte for byte too
        "30s/sliding",
        "--allowed-lateness",
        "15s",
        "--trigger",
        trigger,
        "--max-records-per-trigger",
        str(MAX_PER_TRIGGER),
        "--master",
        "local[2]",
    ]


# --- three hours of event time, written with short retention tiers ------------------------------

W = 10 * S
SRC = WindowSpec.tumbling(W)
KEYS = Keys("tg")
LATENESS = 30 * S
TIERS = Retention.parse("30m,1m:2h,10m:1d")
SERVICES = ("api", "web")
BATCHES = 180  # one minute of event time each: three hours


@dataclass
class Truth:
    """Every event of the stream by (window start, service), and the per-window facts."""

    latency: dict[tuple[int, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    users: dict[tuple[int, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    late: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    stragglers: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    duplicates: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))


@dataclass
class Batch:
    batch_id: int
    at: BatchTime
    windows: list[WindowUpdate]
    late: list[LateUpdate]
    stragglers: list[WindowCount]
    duplicates: list[WindowCount]
    arrivals: list[ArrivalUpdate]


def _stream(seed: int = 7) -> tuple[list[Batch], Truth]:
    """Batch k brings the windows of minute k; its watermark is the frontier minus 30 s.

    Also in batch k: stragglers for the previous minute's windows still open (their update is
    rewritten with the extra events, as the job does), duplicates, and late rows for windows
    2 to 50 minutes old (after 30 minutes a window's raw copy has expired: those late rows
    reach the roll-ups only).
    """
    rng = np.random.default_rng(seed)
    truth = Truth()
    events: dict[tuple[int, str], list[tuple[float, int, str]]] = defaultdict(list)
    batches = []
    updates: dict[tuple[int, str], None] = {}  # the (window, service)s a batch rewrites
    for k in range(BATCHES):
        wm = T + k * M - LATENESS if k else 0
        updates.clear()

        def add(start: int, svc: str, n: int) -> None:
            for _ in range(n):
                lat = float(rng.lognormal(np.log(40 if svc == "api" else 120), 0.7))
                user = f"user-{int(rng.integers(0, 400))}"
                events[(start, svc)].append((lat, 200 if rng.random() > 0.03 else 500, user))
                truth.latency[(start, svc)].append(lat)
                truth.users[(start, svc)].add(user)
            updates[(start, svc)] = None

        for j in range(6):
            for svc in SERVICES:
                add(T + k * M + j * W, svc, int(rng.integers(5, 40)))
        stragglers, duplicates, late = [], [], []
        if k:
            for j in (3, 4, 5):  # ends k*M - 20s.. k*M: after the watermark, before the frontier
                start, svc = T + (k - 1) * M + j * W, SERVICES[j % 2]
                n = int(rng.integers(1, 4))
                add(start, svc, n)
                stragglers.append(WindowCount(SRC.key, start, svc, n))
                truth.stragglers[(start, svc)] += n
                d = int(rng.integers(0, 3))
                if d:
                    duplicates.append(WindowCount(SRC.key, start, svc, d))
                    truth.duplicates[(start, svc)] += d
        if k >= 2:
            for _ in range(3):
                age = int(rng.integers(12, 300))  # 2 to 50 minutes, in 10 s windows
                start = T + k * M - LATENESS - age * W - W
                start -= (start - T) % W
                if start < T:
                    continue
                svc = SERVICES[int(rng.integers(0, 2))]
                n = int(rng.integers(1, 5))
                if any((u.start_ms, u.service) == (start, svc) for u in late):
                    continue  # the job sends one late row per window and service a batch
                agg = LateAgg()
                agg.add(rng.uniform(1e5, 3e6, n), float(age * W))
                late.append(LateUpdate(SRC.key, start, svc, n, agg.to_bytes()))
                truth.late[(start, svc)] += n
        windows = []
        for start, svc in updates:
            lat, status, users = zip(*events[(start, svc)], strict=True)
            agg = WindowAgg()
            agg.add(np.array(lat), np.array(status), np.array(users, dtype=object))
            windows.append(WindowUpdate(SRC.key, start, svc, agg.to_bytes()))
        proc = T + k * S  # processing time moves a second per batch, event time a minute
        arrivals = [
            ArrivalUpdate("processing", proc - proc % W, "api", 5, _arrival(proc)),
            ArrivalUpdate("broker", T + k * M, "api", 7, _arrival(proc)),
        ]
        batches.append(
            Batch(k, BatchTime(k, wm, proc), windows, late, stragglers, duplicates, arrivals)
        )
    return batches, truth


def _arrival(proc_ms: int) -> dict[str, int]:
    return {"late": 0, "stragglers": 0, "proc_ms": proc_ms}


def _write(r: redis.Redis, b: Batch, retention: Retention) -> None:
    write_batch(
        r,
        KEYS,
        SinkBatch(
            b.batch_id,
            b.windows,
            late=b.late,
            stragglers=b.stragglers,
            duplicates=b.duplicates,
            arrivals=b.arrivals,
            at=b.at,
        ),
        SinkConfig(arrival_window_ms=W, retention=retention, source=SRC),
    )


@dataclass
class PersistentRedis:
    """A redis-server of a test's own (the session's is shared), persistent on disk.

    Append-only file with `appendfsync always`: a restart on the same port and directory keeps
    everything it acknowledged, as a production Redis set up for Tidegauge does.
    """

    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is missing: run `make setup`"
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
            + ["--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port("127.0.0.1", self.port, proc=self.proc)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped server cannot take SIGTERM
            self.proc.terminate()  # redis-server flushes its append-only file on SIGTERM
            self.proc.wait(20)
