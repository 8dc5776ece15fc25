"""The stateful step, in the driver: a batch's summaries, grouped by state group, into result rows.

The read tasks summarise their chunks per service (jobs/summary/summarise.py); what reaches the
driver is small (one summary per chunk and shard, heartbeats, dead letters), so the driver
applies the state function (jobs/state/aggregate.py) to each state group with the state the
batch before left (jobs/state/held.py), right before the sink writes the results. No shuffle, no
state store: a batch is one Spark stage. The groups are those the function always had:
("event", shard) per state shard, with every heartbeat copied into each, and ("dead", 0).

The event groups are independent, and the function is Python (one core per process): with a
`StatePool` they run side by side in worker processes, the dead-letter group in the driver.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, cast

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.state.aggregate import StateGroup, make_state_fn
from jobs.state.held import GroupKey, HeldState
from jobs.state.rows import OUTPUT_ARROW
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig

__all__ = ["StatePool", "WorkerLost", "apply_state", "default_state_workers", "serve"]

log = logging.getLogger("tidegauge.job")

StateFn = Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]
#: A group's result: its rows, and its state after the batch (None: dropped) if it changed.
GroupResult = tuple[pa.Table, bool, bytes | None]


def _groups(summaries: pa.Table, shards: int) -> Iterator[tuple[GroupKey, pa.Table]]:
    """Each state group with rows in the batch, and its rows (heartbeats in every event group)."""
    kind = summaries.column("kind")
    dead = pc.is_in(kind, pa.array([SummaryKind.DEAD.value, SummaryKind.TIMES.value]))
    if pc.any(dead).as_py():
        yield (StateGroup.DEAD.value, 0), summaries.filter(dead)
    beats = pc.equal(kind, SummaryKind.HEARTBEAT.value)
    of_shard = pc.equal(kind, SummaryKind.SHARD.value)
    shard = summaries.column("shard")
    for s in range(shards):
        rows = summaries.filter(pc.or_(beats, pc.and_(of_shard, pc.equal(shard, s))))
        if rows.num_rows:
            yield (StateGroup.EVENT.value, s), rows


def run_group(
    fn: StateFn, key: GroupKey, rows: pa.Table, value: bytes | None, watermark_ms: int
) -> GroupResult:
    """One group's result rows and state, from its rows and the state it had."""
    held = HeldState(watermark_ms, value)
    frames = [f for f in fn(key, iter([rows.to_pandas()]), held) if len(f)]
    if not frames:
        out = OUTPUT_ARROW.empty_table()
    else:
        pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        out = pa.Table.from_pandas(pdf, schema=OUTPUT_ARROW, preserve_index=False)
    return out, held.changed, held.value


def apply_state(
    fn: StateFn,
    summaries: pa.Table,
    state: dict[GroupKey, bytes],
    watermark_ms: int,
    shards: int,
    pool: StatePool | None = None,
) -> pa.Table:
    """The batch's result rows; `state` (group -> bytes) is updated in place.

    `fn` is `make_state_fn`'s function, called with the key `(group, shard)`; with a `pool`, the
    event groups run in its processes (with the same function, built there from the same config).
    """
    pending: list[tuple[GroupKey, Future[GroupResult] | GroupResult]] = []
    for key, rows in _groups(summaries, shards):
        if pool is not None and key[0] == StateGroup.EVENT.value:
            pending.append((key, pool.submit(key, rows, state.get(key), watermark_ms)))
        else:
            pending.append((key, run_group(fn, key, rows, state.get(key), watermark_ms)))
    tables = []
    for key, result in pending:
        out, changed, value = result.result() if isinstance(result, Future) else result
        if changed:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        if out.num_rows:
            tables.append(out)
    if not tables:
        return OUTPUT_ARROW.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def default_state_workers(shards: int, cores: int | None = None) -> int:
    """Processes for the state groups: one per core, at most one per shard; 0 (none) on 1 core."""
    n = min(shards, cores if cores is not None else (os.cpu_count() or 1))
    return n if n > 1 else 0


# --- the worker processes ------------------------------------------------------------------------

#: A frame on a worker's pipes: its length, then a pickle.
_FRAME = struct.Struct("<Q")


def _send(pipe: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_FRAME.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    """The next frame's object; EOFError when the other end is gone."""
    head = pipe.read(_FRAME.size)
    if len(head) < _FRAME.size:
        raise EOFError
    (n,) = _FRAME.unpack(head)
    data = pipe.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """A worker's loop: its config, then (key, rows, state, watermark) -> the group's result.

    A group that raises answers with the exception; the worker goes on. It ends when its input
    ends, which is also what happens when the driver is killed outright.
    """
    fn = make_state_fn(_receive(stdin))
    while True:
        try:
            key, rows, value, watermark_ms = _receive(stdin)
        except EOFError:
            return
        try:
            answer: object = run_group(fn, key, rows, value, watermark_ms)
        except Exception as e:  # noqa: BLE001 (the driver raises it, with its traceback's text)
            answer = _Failure(e, traceback.format_exc())
        _send(stdout, answer)


@dataclass
class _Failure:
    error: Exception
    trace: str


class _Worker:
    """One worker process and the pipes to it."""

    def __init__(self, cfg: ExecutorConfig, number: int) -> None:
        self.number = number
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.state.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # its own group: a Ctrl-C or a supervisor's SIGTERM to the job's process group must
            # not end it mid-batch; the driver finishes the batch, then closes its input
            start_new_session=True,
            # the driver's own path: the same modules, plugins included, wherever they came from
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        _send(self.stdin, cfg)

    def run(self, request: tuple[Any, ...]) -> GroupResult:
        try:
            _send(self.stdin, request)
            answer = _receive(self.stdout)
        except (EOFError, BrokenPipeError, OSError) as e:
            code = self.proc.poll()
            raise WorkerLost(
                f"state worker {self.number} (pid {self.proc.pid}) ended"
                f"{'' if code is None else f' with exit code {code}'} ({type(e).__name__})"
            ) from None
        if isinstance(answer, _Failure):
            raise answer.error from RuntimeError(f"in state worker {self.number}:\n{answer.trace}")
        return cast(GroupResult, answer)

    def close(self, timeout_s: float = 10) -> None:
        try:
            self.stdin.close()  # the worker's end of input: it ends
        except OSError:  # it ended already, with a request unread
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()


class WorkerLost(RuntimeError):
    """A state worker ended in the middle of a group (killed, or out of memory)."""


class StatePool:
    """Worker processes that run event groups with the job's state function.

    Plain processes of `python -m jobs.state.worker`, started once per job, each fed by a thread
    of the driver (the groups of a batch go to the workers in turn). A worker keeps nothing
    between batches: a group's rows and state travel with it, its rows and new state come back.
    A worker that ended is started again for the next group; the group it was running is run
    once more in the new one (a group's result depends only on what it was sent), and if that
    worker ends too the batch fails: the query stops with the error, and the job's next start
    redoes the batch from the state before it.
    """

    def __init__(self, cfg: ExecutorConfig, workers: int) -> None:
        self.cfg = cfg
        self.workers = [_Worker(cfg, n) for n in range(workers)]
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="tidegauge-state")
        self._next = 0
        self._locks = [threading.Lock() for _ in range(workers)]

    def submit(
        self, key: GroupKey, rows: pa.Table, value: bytes | None, watermark_ms: int
    ) -> Future[GroupResult]:
        """Run one group in the next worker."""
        n = self._next % len(self.workers)
        self._next += 1
        return self._threads.submit(self._run, n, (key, rows, value, watermark_ms))

    def _run(self, n: int, request: tuple[Any, ...]) -> GroupResult:
        with self._locks[n]:
            try:
                return self.workers[n].run(request)
            except WorkerLost as lost:
                log.warning("%s; starting another for the batch's group %s", lost, request[0])
                self.workers[n].close(timeout_s=0)
                self.workers[n] = _Worker(self.cfg, n)
                return self.workers[n].run(request)

    def close(self) -> None:
        """Stop the workers (after the groups in flight)."""
        self._threads.shutdown(wait=True)
        for w in self.workers:
            w.close()
