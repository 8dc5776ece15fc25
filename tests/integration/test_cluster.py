"""The job on a real Spark standalone cluster: a master and two workers, one core each.

The cluster is started from the installed pyspark (cli/local/cluster.py), as `tidegauge
cluster` does: real master and worker JVMs, executors in their own JVMs with their own Python
workers. A seeded stream with out-of-order, late and malformed events goes through the job
with `--master spark://...` and `available-now`; Redis must then hold what a `local[2]` run of
the same stream wrote (same windows, counts, late counts, dead letters; sketches within their
bounds), although a worker is killed (SIGKILL, its executor with it) while the job runs: the
job finishes on the other worker with the same result, and its status says where each batch
ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.local.cluster import LocalCluster, alive_workers, master_state, start_cluster
from tests.integration.helpers import tidegauge
from tests.procs import wait_until
from tidegauge.core.store import Keys, read_batches, read_dead_counts, read_windows

TOPIC = "cluster-events"
ROOT = Path(__file__).resolve().parents[2]
JOB_FLAGS = (
    *("--window", "10s", "--allowed-lateness", "20s", "--trigger", "available-now"),
    *("--starting-offsets", "earliest", "--max-records-per-trigger", "1000"),
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(2, tmp_path_factory.mktemp("spark"), cores=1, memory="1g")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def stream(broker, produce) -> str:  # type: ignore[no-untyped-def]
    tidegauge("topic", "--bootstrap", broker.address, "--topic", TOPIC, "--partitions", "3")
    produce(
        TOPIC,
        start_time="2026-04-01T00:00:00Z",
        count="5000",
        rate="100",
        seed="21",
        out_of_order_fraction="0.1",
        max_delay="8s",
        late_fraction="0.03",
        lateness="20s",
        malformed_fraction="0.01",
        duplicate_fraction="0",
        heartbeat_interval="1s",
    )
    return TOPIC


def _job_args(broker_address: str, url: str, checkpoint: Path, master: str) -> list[str]:
    return [
        *("job", "--bootstrap", broker_address, "--topic", TOPIC, "--redis", url),
        *("--checkpoint", str(checkpoint), "--master", master, *JOB_FLAGS),
    ]


def _result(url: str) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    rows = read_windows(r, Keys())
    return {
        "windows": {
            (w.window_start, w.service): (w.count, w.late, w.errors, w.distinct_users) for w in rows
        },
        "p": {(w.window_start, w.service): (w.count, w.p50, w.p99) for w in rows},
        "dead": read_dead_counts(r, Keys()),
        "batches": read_batches(r, Keys()),
    }


@pytest.fixture(scope="module")
def local_run(broker, stream: str, module_redis_db, tmp_path_factory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    url = module_redis_db().url
    ckpt = tmp_path_factory.mktemp("local") / "checkpoint"
    tidegauge(*_job_args(broker.address, url, ckpt, "local[2]"))
    return _result(url)


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["windows"] == want["windows"]  # counts, late, errors, distinct users
    assert len(got["windows"]) >= 30 and sum(v[1] for v in got["windows"].values()) > 10
    assert got["dead"] == want["dead"] and sum(want["dead"].values()) > 10
    for key, (n, p50, p99) in want["p"].items():
        _, g50, g99 = got["p"][key]
        if n >= 20:  # t-digests of the same events, merged in another order: within bounds
            assert g50 == pytest.approx(p50, rel=0.05) and g99 == pytest.approx(p99, rel=0.1)
        else:
            assert (g50, g99) == (p50, p99)


def test_the_job_on_a_cluster_equals_the_local_run_even_when_a_worker_dies_mid_stream(
    broker, stream: str, cluster: LocalCluster, local_run, module_redis_db, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    url = module_redis_db().url
    r = redis.Redis.from_url(url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main"]
        + _job_args(broker.address, url, tmp_path / "checkpoint", cluster.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_until(lambda: len(read_batches(r, Keys())) >= 2, timeout_s=180, what="2 batches")
        victim = cluster.workers[1]
        os.killpg(victim.proc.pid, signal.SIGKILL)  # the worker and its executor: a lost node
        victim.proc.wait(10)
        killed_at = len(read_batches(r, Keys()))
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "2 executor cores on" in out and cluster.url in out  # the job saw both executors
    got = _result(url)
    assert len(got["batches"]) > killed_at, "the job had finished before the worker was killed"
    _assert_same(got, local_run)
    # where the batches ran (the health panel, `query status`): both executors, then one
    ran_on = [b["spark"]["executors"] for b in got["batches"] if b.get("spark")]
    assert ran_on[0] == 2 and ran_on[-1] == 1, ran_on
    assert all(b["spark"]["master"] == cluster.url for b in got["batches"] if b.get("spark"))
    assert len(alive_workers(master_state(cluster.webui))) == 1
    shown = tidegauge("query", "status", "--redis", url).stdout
    assert f"spark {cluster.url}: 1 executor(s)" in shown
