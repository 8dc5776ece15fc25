"""The driver's stateful step (jobs/state/step.py): groups, state carried, and worker processes.

Batches of random parsed rows (tests/unit/jobs/fixtures.py `parsed`: three services, late rows,
stragglers, heartbeats, dead letters) are summarised as the read tasks do, then stepped through
with the state each batch leaves. The step in the driver's own process is the reference the
state function's own tests check (test_aggregate.py); the step in worker processes must give
the same rows and the same state, batch after batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pytest

from jobs.parse.parser import RecordKind
from jobs.state.aggregate import make_state_fn
from jobs.state.codec import DeadCounts, ShardState
from jobs.state.held import GroupKey
from jobs.state.step import (
    MERGE_SPLIT_FROM,
    DecodedStates,
    StatePool,
    _first_idle,
    apply_state,
    default_state_workers,
)
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import summarise, summary_batch
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import HOPPING, SESSION, TUMBLING, parsed
from tidegauge.core.dimensions import Dimension
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.window_aggs import merge_encoded

ROOT = Path(__file__).resolve().parents[4]
SHARDS = 4
CFG = ExecutorConfig((TUMBLING, HOPPING), shards=SHARDS)

pytestmark = pytest.mark.unit


def batches(seed: int, n: int = 6, cfg: ExecutorConfig = CFG) -> list[tuple[pa.Table, int, int]]:
    """(summaries, watermark in force, dead letters) per batch, as the read tasks hand them over."""
    rng = np.random.default_rng(seed)
    out, watermark = [], 0
    for b in range(n):
        now = T + b * 20 * S
        rows = parsed(rng, 600, now)
        cols = summarise(rows, watermark, now, cfg)
        dead = int((rows["kind"] == RecordKind.DEAD).sum())
        out.append((pa.Table.from_batches([summary_batch(cols)]), watermark, dead))
        watermark = max(watermark, now - 30 * S)
    return out


def run(
    seed: int,
    pool: StatePool | None,
    cfg: ExecutorConfig = CFG,
    kept: DecodedStates | None = None,
) -> list[tuple[pa.Table, dict[GroupKey, bytes]]]:
    fn = make_state_fn(cfg)
    state: dict[GroupKey, bytes] = {}
    steps = []
    for summaries, watermark, _ in batches(seed, cfg=cfg):
        table = apply_state(fn, summaries, state, watermark, SHARDS, pool, kept)
        steps.append((table, dict(state)))
    return steps


@pytest.fixture(scope="module")
def pool() -> Any:
    p = StatePool(CFG, 2)
    yield p
    p.close()


def test_each_group_keeps_its_own_state_across_batches() -> None:
    steps = run(1, None)
    groups = set(steps[-1][1])
    assert ("dead", 0) in groups  # dead letters counted by reason
    dead = DeadCounts.from_bytes(steps[-1][1][("dead", 0)])
    assert sum(dead.by_reason.values()) == sum(n for _, _, n in batches(1)) > 0
    # three services: at most three shards hold state, each its own
    shards = {s for g, s in groups if g == "event"}
    assert 1 <= len(shards) <= 3 and shards <= set(range(SHARDS))
    assert all(len(t) for t, _ in steps)  # every batch has result rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_worker_processes_give_the_same_rows_and_state(seed: int, pool: StatePool) -> None:
    alone, side_by_side = run(seed, None), run(seed, pool)
    for (t1, s1), (t2, s2) in zip(alone, side_by_side, strict=True):
        assert t1.equals(t2)
        assert s1 == s2


#: Shapes whose state holds more than panes: sessions, slices and their hitters, names tracked
#: under a --max-services limit (with the read tasks' quotas).
SHAPES = {
    "hopping": CFG,
    "sessions": ExecutorConfig((TUMBLING, SESSION), allowed_lateness_ms=20 * S, shards=SHARDS),
    "slices": ExecutorConfig(
        (TUMBLING,), shards=SHARDS, dimensions=(Dimension.parse("status_class"),)
    ),
    "max-services": ExecutorConfig((TUMBLING,), shards=SHARDS, max_services=2, slots=(1, 1, 0, 0)),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_group_starts_from_the_state_its_last_run_left_not_from_decoding_it(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = SHAPES[shape]
    decoded: list[int] = []
    real = ShardState.from_bytes.__func__  # type: ignore[attr-defined]

    def counted(cls: type[ShardState], blob: bytes, c: ExecutorConfig) -> ShardState:
        decoded.append(len(blob))
        return real(cls, blob, c)

    monkeypatch.setattr(ShardState, "from_bytes", classmethod(counted))
    decoding = run(4, None, cfg)
    assert decoded  # every batch after the first decodes the state the batch before left
    decoded.clear()
    keeping = run(4, None, cfg, DecodedStates())
    assert decoded == []
    for (t1, s1), (t2, s2) in zip(decoding, keeping, strict=True):
        assert t1.equals(t2) and s1 == s2


@pytest.mark.parametrize("in_workers", [False, True])
def test_a_batch_run_again_gives_its_first_results(in_workers: bool) -> None:
    """A batch redone in the same process (its sink failed): not from what its first run left."""
    pool = StatePool(CFG, 2) if in_workers else None
    kept = DecodedStates()
    fn = make_state_fn(CFG)
    state: dict[GroupKey, bytes] = {}
    try:
        for b, (summaries, watermark, _) in enumerate(batches(6)):
            before = dict(state)
            first = apply_state(fn, summaries, state, watermark, SHARDS, pool, kept)
            after = dict(state)
            if b in (2, 4):
                state = dict(before)
                again = apply_state(fn, summaries, state, watermark, SHARDS, pool, kept)
                assert again.equals(first) and state == after
    finally:
        if pool is not None:
            pool.close()
    assert [s for _, s in run(6, None)][-1] == state


def test_a_worker_killed_between_batches_is_replaced_and_nothing_changes() -> None:
    pool = StatePool(CFG, 2)
    try:
        fn = make_state_fn(CFG)
        state: dict[GroupKey, bytes] = {}
        steps = []
        for b, (summaries, watermark, _) in enumerate(batches(2)):
            if b == 3:
                lost = pool.workers[0].proc
                os.kill(lost.pid, signal.SIGKILL)
                lost.wait(10)
            table = apply_state(fn, summaries, state, watermark, SHARDS, pool)
            steps.append((table, dict(state)))
        assert pool.workers[0].proc.pid != lost.pid
    finally:
        pool.close()
    for (t1, s1), (t2, s2) in zip(run(2, None), steps, strict=True):
        assert t1.equals(t2) and s1 == s2


def test_a_batch_with_nothing_for_a_group_leaves_its_state(pool: StatePool) -> None:
    fn = make_state_fn(CFG)
    state: dict[GroupKey, bytes] = {("event", 3): b"kept as it is"}
    empty = pa.Table.from_batches(
        [summary_batch(summarise(parsed(np.random.default_rng(0), 0, T), 0, T, CFG))]
    )
    out = apply_state(fn, empty, state, 0, SHARDS, pool)
    assert out.num_rows == 0 and state == {("event", 3): b"kept as it is"}


def test_a_failing_group_fails_the_batch(pool: StatePool) -> None:
    fn = make_state_fn(CFG)
    summaries, watermark, _ = batches(5, 1)[0]
    state: dict[GroupKey, bytes] = {("event", s): b"not a shard state" for s in range(SHARDS)}
    with pytest.raises(ValueError, match="TGSH"):
        apply_state(fn, summaries, state, watermark, SHARDS, pool)


def test_the_idle_call_comes_once_a_worker_has_none_of_its_groups_left() -> None:
    """The sink's early work starts on the core the first worker to finish leaves idle."""

    class Two:
        workers = [None, None]
        spare = 1

        def worker_of(self, key: GroupKey) -> int:
            return int(key[1]) % 2

    futures: dict[GroupKey, Future[Any]] = {("event", s): Future() for s in range(4)}
    returned = threading.Event()
    pool = Two()
    waiting = threading.Thread(
        target=lambda: (_first_idle(cast(StatePool, pool), list(futures.items())), returned.set())
    )
    waiting.start()
    for s in (1, 0):  # one group of each worker done: both still have one left
        futures[("event", s)].set_result(None)
    assert not returned.wait(0.2)
    futures[("event", 2)].set_result(None)  # worker 0's last: it is idle
    assert returned.wait(10)
    waiting.join()
    assert not futures[("event", 3)].done()
    assert pool.spare == 0  # the roll-ups' merges go to the worker that is idle


@pytest.mark.parametrize("in_workers", [False, True])
def test_the_idle_call_comes_once_a_batch_and_changes_nothing(in_workers: bool) -> None:
    pool = StatePool(CFG, 2) if in_workers else None
    fn = make_state_fn(CFG)
    state: dict[GroupKey, bytes] = {}
    calls = []
    try:
        steps = []
        for summaries, watermark, _ in batches(8):
            table = apply_state(
                fn, summaries, state, watermark, SHARDS, pool, on_idle=lambda: calls.append(1)
            )
            steps.append((table, dict(state)))
    finally:
        if pool is not None:
            pool.close()
    assert len(calls) == len(steps)
    for (t1, s1), (t2, s2) in zip(run(8, None), steps, strict=True):
        assert t1.equals(t2) and s1 == s2


def _aggregates(n: int, seed: int) -> list[bytes]:
    """`n` encoded window aggregates of 1-60 random events each."""
    rng = np.random.default_rng(seed)
    blobs = []
    for _ in range(n):
        k = int(rng.integers(1, 60))
        agg = WindowAgg()
        users = np.array([f"u{u}" for u in rng.integers(0, 90, k)], dtype=object)
        agg.add(rng.lognormal(4, 1, k), rng.choice([200, 200, 500], k), users)
        blobs.append(agg.to_bytes())
    return blobs


@pytest.mark.parametrize("keys", [MERGE_SPLIT_FROM - 1, MERGE_SPLIT_FROM, 700])
def test_the_pools_merge_is_merge_encoded_half_of_it_in_a_worker(
    pool: StatePool, keys: int
) -> None:
    parts = _aggregates(3 * keys, 7)
    of = np.sort(np.random.default_rng(keys).integers(0, keys, len(parts)))
    assert pool.merge_encoded(parts, of, keys) == merge_encoded(parts, of, keys)


def test_a_worker_killed_before_a_merge_leaves_the_merge_to_the_driver() -> None:
    pool = StatePool(CFG, 2)
    try:
        lost = pool.workers[0].proc
        os.kill(lost.pid, signal.SIGKILL)
        lost.wait(10)
        parts = _aggregates(900, 8)
        of = np.repeat(np.arange(300), 3)
        assert pool.merge_encoded(parts, of, 300) == merge_encoded(parts, of, 300)
        assert pool.workers[0].proc.pid != lost.pid  # and the next batch has its worker
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("shards", "cores", "expected"), [(4, 2, 2), (4, 8, 4), (1, 8, 0), (4, 1, 0), (2, 2, 2)]
)
def test_default_workers_one_per_core_at_most_one_per_shard(
    shards: int, cores: int, expected: int
) -> None:
    assert default_state_workers(shards, cores) == expected


DRIVER = """
import sys
from jobs.state.step import StatePool
from jobs.summary.settings import ExecutorConfig
from tidegauge.core.windows import WindowSpec
pool = StatePool(ExecutorConfig((WindowSpec.tumbling(10_000),), shards=2), 2)
print(*(w.proc.pid for w in pool.workers), flush=True)
sys.stdin.read()
"""


def test_workers_end_with_a_driver_killed_outright(tmp_path: Path) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        workers = [int(p) for p in driver.stdout.readline().split()]
        assert len(workers) == 2 and all(alive(p) for p in workers)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in workers)
    finally:
        driver.kill()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_worker_starts_without_the_store_or_redis() -> None:
    """Every job's start pays a worker's imports once per core: the store's read API and
    redis-py (~0.1 s of a fresh process) are the driver's, which decodes the rows."""
    code = (
        "import sys, jobs.state.worker; "
        "print(*[m for m in ('redis', 'tidegauge.core.store') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""
