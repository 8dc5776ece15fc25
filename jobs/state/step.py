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

import gc
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import IO, Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from jobs.state.aggregate import StateGroup, make_state_fn
from jobs.state.held import GroupKey, HeldState
from jobs.state.rows import OUTPUT_ARROW
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from tidegauge.core.window_aggs import merge_encoded

__all__ = [
    "DecodedStates",
    "StatePool",
    "WorkerLost",
    "apply_state",
    "default_state_workers",
    "serve",
]

log = logging.getLogger("tidegauge.job")

StateFn = Callable[[tuple[Any, ...], Iterator[pa.Table], Any], Iterator[pa.Table]]
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


class DecodedStates:
    """The state each group's last run left, decoded, beside the bytes it was encoded to.

    Decoding a shard's whole state is a sixth of the state function's time with thousands of
    services, and the next batch would decode the very bytes this run encoded: the next run of
    the group starts from the object instead, if its state is those bytes (the same object).
    A run takes its group's entry out first, so a run that fails leaves nothing behind.
    """

    def __init__(self) -> None:
        self._kept: dict[GroupKey, tuple[bytes, Any]] = {}

    def value_of(self, key: GroupKey) -> bytes | None:
        """The bytes the group's last run left, if they are kept."""
        kept = self._kept.get(key)
        return None if kept is None else kept[0]

    def take(self, key: GroupKey, value: bytes | None) -> Any:
        """What `value` decodes to, if it is the bytes the group's last run left; else None."""
        kept = self._kept.pop(key, None)
        return kept[1] if kept is not None and kept[0] is value else None

    def keep(self, key: GroupKey, held: HeldState) -> None:
        """Keep what a run left, if it changed the state and said what the bytes decode to."""
        if held.changed and held.value is not None and held.decoded is not None:
            self._kept[key] = (held.value, held.decoded)


def run_group(
    fn: StateFn,
    key: GroupKey,
    rows: pa.Table,
    value: bytes | None,
    watermark_ms: int,
    kept: DecodedStates | None = None,
) -> GroupResult:
    """One group's result rows and state, from its rows and the state it had.

    With `kept`, the group starts from the decoded state its last run left when `value` is
    its bytes, and what this run leaves is kept in turn.
    """
    held = HeldState(watermark_ms, value, decoded=None if kept is None else kept.take(key, value))
    tables = [t for t in fn(key, iter([rows]), held) if t.num_rows]
    if kept is not None:
        kept.keep(key, held)
    if not tables:
        out = OUTPUT_ARROW.empty_table()
    else:
        out = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return out, held.changed, held.value


def apply_state(
    fn: StateFn,
    summaries: pa.Table,
    state: dict[GroupKey, bytes],
    watermark_ms: int,
    shards: int,
    pool: StatePool | None = None,
    kept: DecodedStates | None = None,
    on_idle: Callable[[], object] | None = None,
) -> pa.Table:
    """The batch's result rows; `state` (group -> bytes) is updated in place.

    `fn` is `make_state_fn`'s function, called with the key `(group, shard)`; with a `pool`, the
    event groups run in its processes (with the same function, built there from the same config).
    `kept`: the decoded states of the groups run in this process, from one batch to the next.
    `on_idle` is called once, as soon as a worker has none of the batch's groups left to run
    (a core to spare while the others finish), or after every group without a pool.
    """
    groups = list(_groups(summaries, shards))
    results: dict[int, Future[GroupResult] | GroupResult] = {}
    for i, (key, rows) in enumerate(groups):  # the workers' first: they start at once
        if pool is not None and key[0] == StateGroup.EVENT.value:
            results[i] = pool.submit(key, rows, state.get(key), watermark_ms)
    for i, (key, rows) in enumerate(groups):
        if i not in results:
            results[i] = run_group(fn, key, rows, state.get(key), watermark_ms, kept)
    pending = [(key, results[i]) for i, (key, _) in enumerate(groups)]
    if on_idle is not None:
        if pool is not None:
            _first_idle(pool, [(k, r) for k, r in pending if isinstance(r, Future)])
        on_idle()
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


def _first_idle(pool: StatePool, running: list[tuple[GroupKey, Future[GroupResult]]]) -> None:
    """Wait until one of the pool's workers has none of these groups left to run.

    That worker is the pool's `spare` from then on: the one the roll-ups' merges go to.
    """
    left = [0] * len(pool.workers)
    worker_of = {}
    for key, future in running:
        worker_of[future] = pool.worker_of(key)
        left[worker_of[future]] += 1
    not_done = set(worker_of)
    while not_done and min(left) > 0:
        done, not_done = wait(not_done, return_when=FIRST_COMPLETED)
        for future in done:
            left[worker_of[future]] -= 1
    pool.spare = left.index(min(left))


#: Keys below which `StatePool.merge_encoded` merges in the driver alone: a small merge is
#: not worth a worker's round trip (the parts and the result pickled across a pipe).
MERGE_SPLIT_FROM = 256


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

    The state is bytes, None (none yet), or `_Kept`: what this worker's last run of the group
    left, which it keeps decoded (`DecodedStates`); `_Missing` answers a `_Kept` it no longer
    has. A `_Merge` asks for merged aggregates instead (`StatePool.merge_encoded`). A request
    that raises answers with the exception; the worker goes on. It ends when its input ends,
    which is also what happens when the driver is killed outright.
    """
    fn = make_state_fn(_receive(stdin))
    # What the worker imported (pandas, pyarrow, numpy, the job) is there for good: out of the
    # collector's full passes, which scanned it in 80-100 ms, about once a batch (gc callbacks)
    gc.freeze()
    kept = DecodedStates()
    while True:
        try:
            request = _receive(stdin)
        except EOFError:
            return
        answer: object
        try:
            if isinstance(request, _Merge):
                answer = merge_encoded(request.parts, request.keys, request.n)
            else:
                key, rows, value, watermark_ms = request
                if isinstance(value, _Kept):
                    value = kept.value_of(key)
                    if value is None:
                        _send(stdout, _Missing())
                        continue
                answer = run_group(fn, key, rows, value, watermark_ms, kept)
        except Exception as e:  # noqa: BLE001 (the driver raises it, with its traceback's text)
            answer = _Failure(e, traceback.format_exc())
        _send(stdout, answer)


@dataclass
class _Merge:
    """A request for `merge_encoded(parts, keys, n)`."""

    parts: list[bytes]
    keys: npt.NDArray[np.int64]
    n: int


@dataclass
class _Failure:
    error: Exception
    trace: str


@dataclass
class _Kept:
    """In place of a group's state: the bytes the worker's last run of the group left."""


@dataclass
class _Missing:
    """A worker's answer to `_Kept` for a group whose state it does not keep."""


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

    def run(self, request: object) -> Any:
        """The worker's answer to one request (`WorkerLost` if it ended, its error if it raised)."""
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
        return answer

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
    of the driver; a shard's group always goes to the same worker. A group's rows travel with
    it, its rows and new state come back (the driver logs the state). Its state travels too,
    unless it is what the same worker's last run of the group returned: the worker kept that
    decoded (`DecodedStates`) and is sent `_Kept` instead. A batch run again, or a state read
    from the log, is other bytes than the worker kept, so they travel. A worker that ended is
    started again for the next group; the group it was running is run once more in the new one
    with its state's bytes (a group's result depends only on its rows and state), and if that
    worker ends too the batch fails: the query stops with the error, and the job's next start
    redoes the batch from the state before it.
    """

    def __init__(self, cfg: ExecutorConfig, workers: int) -> None:
        self.cfg = cfg
        self.workers = [_Worker(cfg, n) for n in range(workers)]
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="tidegauge-state")
        self._locks = [threading.Lock() for _ in range(workers)]
        #: Group -> (its worker, the state bytes that worker's last run of it returned).
        self._returned: dict[GroupKey, tuple[_Worker, bytes]] = {}
        #: The worker that lends `merge_encoded` a process: the first to finish its groups.
        self.spare = 0

    def worker_of(self, key: GroupKey) -> int:
        """The worker that runs a group: its shard's."""
        return int(key[1]) % len(self.workers)

    def submit(
        self, key: GroupKey, rows: pa.Table, value: bytes | None, watermark_ms: int
    ) -> Future[GroupResult]:
        """Run one group in its shard's worker."""
        n = self.worker_of(key)
        return self._threads.submit(self._run, n, key, rows, value, watermark_ms)

    def _run(
        self, n: int, key: GroupKey, rows: pa.Table, value: bytes | None, watermark_ms: int
    ) -> GroupResult:
        with self._locks[n]:
            worker = self.workers[n]
            returned = self._returned.pop(key, None)
            sent = (
                _Kept()
                if returned is not None and returned[0] is worker and returned[1] is value
                else value
            )
            try:
                answer = worker.run((key, rows, sent, watermark_ms))
                if isinstance(answer, _Missing):
                    answer = worker.run((key, rows, value, watermark_ms))
            except WorkerLost as lost:
                log.warning("%s; starting another for the batch's group %s", lost, key)
                worker.close(timeout_s=0)
                worker = self.workers[n] = _Worker(self.cfg, n)
                answer = worker.run((key, rows, value, watermark_ms))
            if isinstance(answer, _Missing):  # a new worker never answers so to bytes
                raise WorkerLost(f"state worker {n} lost the state it was sent")
            _, changed, new = answer
            if changed and new is not None:
                self._returned[key] = (worker, new)
            return answer

    def merge_encoded(
        self, parts: Sequence[bytes], keys: npt.NDArray[np.int64], n: int
    ) -> list[bytes]:
        """`merge_encoded`, its keys cut in two: the first half in a worker, the rest here.

        For the sink's roll-ups, planned once a worker has run its groups of the batch
        (jobs/sink/ahead.py): the first half goes to that worker (`spare`), and the two halves
        run side by side (keys merge independently, so the bytes are the same). Few keys are
        merged here alone; so is everything if the worker ends meanwhile.
        """
        if n < MERGE_SPLIT_FROM:
            return merge_encoded(parts, keys, n)
        half = n // 2
        cut = int(np.searchsorted(keys, half))
        w = self.spare
        there = self._threads.submit(self._merge, w, _Merge(list(parts[:cut]), keys[:cut], half))
        here = merge_encoded(parts[cut:], keys[cut:] - half, n - half)
        first = there.result()
        if first is None:
            first = merge_encoded(parts[:cut], keys[:cut], half)
        return first + here

    def _merge(self, n: int, request: _Merge) -> list[bytes] | None:
        with self._locks[n]:
            try:
                return cast(list[bytes], self.workers[n].run(request))
            except WorkerLost as lost:
                log.warning("%s; starting another for the next batch", lost)
                self.workers[n].close(timeout_s=0)
                self.workers[n] = _Worker(self.cfg, n)
                return None

    def close(self) -> None:
        """Stop the workers (after the groups in flight)."""
        self._threads.shutdown(wait=True)
        for w in self.workers:
            w.close()
