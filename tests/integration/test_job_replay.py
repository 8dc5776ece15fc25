"""Exactly-once results in Redis: a replayed batch and a killed job leave the same state.

Spark replays the last batch after a crash between the sink's write and the checkpoint's commit.
The sink writes absolute values in one transaction, so a replay must not change a byte; a job
killed with SIGKILL (JVM included) and restarted from its checkpoint must end where an
uninterrupted run ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests import procs
from tests.integration.fixtures import job_args, snapshot
from tests.integration.helpers import tidegauge
from tidegauge.core.store import Keys, read_batches


@pytest.fixture(scope="module")
def stream(broker, module_redis_db, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("replay")
    topic = "replay-events"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic)
    tidegauge(
        "produce",
        "--bootstrap",
        broker.address,
        "--topic",
        topic,
        "--pace",
        "fast",
        "--start-time",
        "2026-03-01T12:00:00Z",
        "--count",
        "3000",
        "--rate",
        "50",
        "--seed",
        "11",
        "--out-of-order-fraction",
        "0.1",
        "--max-delay",
        "6s",
        "--late-fraction",
        "0.05",
        "--lateness",
        "15s",
        "--malformed-fraction",
        "0.02",
        "--duplicate-fraction",
        "0.02",
        "--duplicate-other-partition",  # de-duplicated across partitions, replayed exactly
        "0.5",
        "--quiet",
    )
    url = module_redis_db().url
    client = redis.Redis.from_url(url)
    checkpoint = tmp / "reference"
    tidegauge(*job_args(broker.address, topic, url, checkpoint, "available-now"))
    return {
        "broker": broker.address,
        "topic": topic,
        "tmp": tmp,
        "url": url,
        "client": client,
        "checkpoint": checkpoint,
        "snapshot": snapshot(client),
    }


def test_replaying_the_last_batch_changes_nothing(stream: dict[str, Any]) -> None:
    r, checkpoint = stream["client"], stream["checkpoint"]
    before = stream["snapshot"]
    assert any(k.startswith("tg:win:") for k in before) and "tg:dead:letters" in before
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    last = commits[-1]
    rows_in_last = {b["batch_id"]: b["input_rows"] for b in read_batches(r, Keys())}[last]
    assert rows_in_last > 0, "the last batch must carry data for the replay to mean something"
    # Crash between the sink's write and the commit: Spark must run batch `last` again.
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    tidegauge(
        *job_args(stream["broker"], stream["topic"], stream["url"], checkpoint, "available-now")
    )
    assert (checkpoint / "commits" / str(last)).exists(), "the batch was not run again"
    replays = [b for b in read_batches(r, Keys()) if b["batch_id"] == last]
    assert len(replays) == 1 and replays[0]["input_rows"] == rows_in_last
    assert snapshot(r) == before


def test_killed_job_resumes_to_the_same_state(stream: dict[str, Any], redis_settings) -> None:  # type: ignore[no-untyped-def]
    url = redis_settings.url
    r = redis.Redis.from_url(url)
    checkpoint = stream["tmp"] / "killed"
    args = job_args(stream["broker"], stream["topic"], url, checkpoint, "500ms")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = [b for b in read_batches(r, Keys()) if b["input_rows"]]
            if len(done) >= 3:
                break
            assert proc.poll() is None, "job exited early"
            time.sleep(0.2)
        else:
            pytest.fail("job made no progress")
        tree = {proc.pid, *procs.descendants(proc.pid)}
        os.killpg(proc.pid, signal.SIGKILL)  # no goodbye: JVM and Python workers die too
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # PySpark's worker daemon runs in a process group of its own; it exits when the JVM's pipe
    # closes, so give it a moment, then insist that nothing of the job is left.
    procs.wait_until(
        lambda: not procs.living(tree),
        20,
        "the killed job's processes to go",
        lambda: str([Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in procs.living(tree)]),
    )
    total = sum(b["input_rows"] for b in read_batches(r, Keys()))
    assert total < 3000, "the job finished before it was killed; the test proves nothing"
    tidegauge(*job_args(stream["broker"], stream["topic"], url, checkpoint, "available-now"))
    assert snapshot(r) == stream["snapshot"]
    status = json.loads(tidegauge("query", "status", "--redis", url, "--json").stdout)
    assert status["offsets"] == {
        k: v
        for k, v in json.loads(
            tidegauge("query", "status", "--redis", stream["url"], "--json").stdout
        )["offsets"].items()
    }
