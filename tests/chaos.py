"""A chaos soak: the whole pipeline at a steady rate while a seeded schedule breaks its parts.

Real processes throughout: a Kafka-protocol broker (Tansu), a redis-server with an append-only
file (a restart keeps what it acknowledged, as a production Redis would), `tidegauge produce`
in real time with its ground truth, and `tidegauge job` with a 1 s trigger. While they run, a
schedule drawn from `seed` applies one fault at a time:

* `job-kill`: SIGKILL to the job's driver (its JVM and workers go with it), restarted at once;
* `job-term`: SIGTERM, the way a supervisor stops it, restarted;
* `broker-pause`: the broker stopped (SIGSTOP) for 10 s, then continued;
* `redis-restart`: Redis stopped (SIGTERM) and started again on its own files;
* `workers-kill`: SIGKILL to every Python worker of the job (Spark starts new ones);
* `worker-kill` (with `workers`, the job on a Spark standalone cluster of that many one-core
  workers): SIGKILL to one worker and its executor, a new worker started in its place.

After the producer has sent everything, the job drains the topic and stops; then Redis must hold
exactly what the ground truth says, window by window: Spark's watermark rule and the
de-duplication rule replayed over the batches the job committed (its checkpoint's offset log,
read here as plain files), independently of the job's code (tests/integration/helpers.py).
Nothing lost, nothing counted twice. For each fault it measures how long until a batch with
records was committed again, and the worst freshness of the batches in the minute after.

`benchmarks/bench_chaos.py` runs it for 30 minutes; tests/integration/test_chaos.py for three.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis

from cli.local.cluster import LocalCluster, start_cluster, start_worker
from cli.local.services import Service, free_port, start_broker
from jobs.source.kafka_source import true_end_offsets
from tests import procs
from tests.integration.fixtures import PersistentRedis
from tidegauge.core.store import Keys, read_batches, read_dead_counts, read_status, read_windows

__all__ = [
    "CLUSTER_FAULTS",
    "FAULTS",
    "Fault",
    "Replay",
    "Soak",
    "SoakResult",
    "committed_batches",
    "compare",
]

FAULTS = ("job-kill", "job-term", "broker-pause", "redis-restart", "workers-kill")
#: On a standalone cluster, one more.
CLUSTER_FAULTS = (*FAULTS, "worker-kill")
WINDOW_MS = 10_000
LATENESS_MS = 30_000
#: Seconds between faults (drawn uniformly), and before the first.
GAP_S = (25.0, 40.0)
FIRST_S = 25.0
BROKER_PAUSE_S = 10.0
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Fault:
    """One fault applied, and what the pipeline did after it."""

    kind: str
    at_s: float
    #: Seconds the part was down (the pause, the restart).
    down_s: float = 0.0
    #: Seconds from the part's return to the next committed batch with records.
    recovered_s: float | None = None
    #: The worst freshness p99 (ms) of the batches committed in the minute after its return.
    max_freshness_ms: int | None = None
    back_at: float = 0.0  # (wall clock, for the measurements)


@dataclass
class SoakResult:
    seconds: float
    rate: float
    records: int
    batches: int
    windows: int
    events: int
    faults: list[Fault] = field(default_factory=list)
    #: What differs from the truth (empty: every window exact).
    mismatches: list[str] = field(default_factory=list)

    def table(self) -> str:
        lines = [f"{'fault':<15}{'at s':>7}{'down s':>8}{'recovered s':>13}{'max fresh. p99':>16}"]
        for f in self.faults:
            rec = "-" if f.recovered_s is None else f"{f.recovered_s:.1f}"
            fresh = "-" if f.max_freshness_ms is None else f"{f.max_freshness_ms:,} ms"
            lines.append(f"{f.kind:<15}{f.at_s:>7.0f}{f.down_s:>8.1f}{rec:>13}{fresh:>16}")
        return "\n".join(lines)


class Soak:
    """One soak: start everything, run the schedule for `seconds`, drain, compare."""

    def __init__(
        self,
        workdir: Path,
        seconds: float,
        rate: float,
        seed: int = 1,
        gap_s: tuple[float, float] = GAP_S,
        workers: int = 0,
    ) -> None:
        self.gap_s = gap_s
        self.workers = workers
        self.cluster: LocalCluster | None = None
        self.faults = CLUSTER_FAULTS if workers else FAULTS
        self.workdir = workdir
        self.seconds = seconds
        self.rate = rate
        self.seed = seed
        self.checkpoint = workdir / "checkpoint"
        self.truth_path = workdir / "truth.jsonl"
        self.topic = "chaos"
        self.job: subprocess.Popen[bytes] | None = None
        self.jobs_started = 0

    # --- the parts ------------------------------------------------------------------------

    def _tidegauge(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            stdout=(self.workdir / log).open("ab"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def _start_job(self) -> None:
        self.jobs_started += 1
        self.job = self._tidegauge(
            *("job", "--bootstrap", self.broker.address, "--topic", self.topic),
            *("--redis", self.redis.url, "--checkpoint", str(self.checkpoint)),
            *("--trigger", "1s", "--window", "10s", "--allowed-lateness", "30s"),
            *("--master", self.cluster.url if self.cluster else "local[2]"),
            *("--shuffle-partitions", "2"),
            # every batch's offsets stay in the checkpoint, for the comparison at the end
            *("--conf", "spark.sql.streaming.minBatchesToRetain=1000000"),
            log="job.log",
        )

    def _stop_job(self, sig: int) -> None:
        assert self.job is not None
        pid = self.job.pid
        family = procs.descendants(pid) | {pid}
        os.kill(pid, sig)
        self.job.wait(120)
        procs.wait_until(lambda: not procs.living(family), 60, "the job's processes to end")

    def _python_workers(self) -> list[int]:
        """The job's task workers (procs.python_task_workers)."""
        assert self.job is not None
        return procs.python_task_workers(procs.descendants(self.job.pid))

    def _apply(self, kind: str) -> float:
        """Break one part and bring it back; the seconds it was down."""
        started = time.monotonic()
        if kind in ("job-kill", "job-term"):
            self._stop_job(signal.SIGKILL if kind == "job-kill" else signal.SIGTERM)
            self._start_job()
        elif kind == "broker-pause":
            os.kill(self.broker.proc.pid, signal.SIGSTOP)
            time.sleep(BROKER_PAUSE_S)
            os.kill(self.broker.proc.pid, signal.SIGCONT)
        elif kind == "redis-restart":
            self.redis.stop()
            self.redis.start()
        elif kind == "workers-kill":
            for pid in self._python_workers():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif kind == "worker-kill":
            assert self.cluster is not None
            victim = self.cluster.workers.pop(0)
            os.killpg(victim.proc.pid, signal.SIGKILL)  # the worker and its executor
            victim.proc.wait(30)
            n = len(self.cluster.workers) + 1
            self.cluster.workers.append(
                start_worker(self.cluster.url, 1, "1g", self.workdir / "spark" / f"worker-r{n}")
            )
            self.cluster.wait_for_workers(self.workers)
        return time.monotonic() - started

    # --- the run --------------------------------------------------------------------------

    def run(self) -> SoakResult:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker: Service = start_broker(log_path=self.workdir / "broker.log")
        self.redis = PersistentRedis(free_port(), self.workdir)
        self.redis.start()
        producer = None
        try:
            if self.workers:
                self.cluster = start_cluster(self.workers, self.workdir / "spark", cores=1)
            subprocess.run(
                [sys.executable, "-m", "cli.main", "topic", "--bootstrap", self.broker.address]
                + ["--topic", self.topic, "--partitions", "3"],
                check=True,
                capture_output=True,
                cwd=ROOT,
            )
            self._start_job()
            r = redis.Redis.from_url(self.redis.url)
            self._wait_for_status(r, 180)
            count = int(self.rate * self.seconds)
            producer = self._tidegauge(
                *("produce", "--bootstrap", self.broker.address, "--topic", self.topic),
                *("--pace", "realtime", "--rate", f"{self.rate:g}", "--count", str(count)),
                *("--seed", str(self.seed), "--truth", str(self.truth_path), "--quiet"),
                *("--out-of-order-fraction", "0.05", "--max-delay", "5s"),
                *("--late-fraction", "0.005", "--lateness", "45s"),
                *("--duplicate-fraction", "0.01", "--malformed-fraction", "0.001"),
                log="produce.log",
            )
            faults = self._schedule(producer, r)
            producer.wait(self.seconds + 300)
            assert producer.returncode == 0, (self.workdir / "produce.log").read_text()
            self._drain(r, 600)
            self._measure(r, faults)
            self._stop_job(signal.SIGTERM)
            return compare(r, self.checkpoint, self.truth_path, faults, self.seconds, self.rate)
        finally:
            if producer is not None and producer.poll() is None:
                producer.kill()
            if self.job is not None and self.job.poll() is None:
                os.killpg(self.job.pid, signal.SIGKILL)
            self.redis.stop()
            self.broker.stop()
            if self.cluster is not None:
                self.cluster.stop()

    def _wait_for_status(self, r: redis.Redis, timeout_s: float) -> None:
        def up() -> bool:
            assert self.job is not None and self.job.poll() is None, self._job_log()
            try:
                return read_status(r, Keys()) is not None
            except redis.RedisError:
                return False

        procs.wait_until(up, timeout_s, "the job's first status")

    def _schedule(self, producer: subprocess.Popen[bytes], r: redis.Redis) -> list[Fault]:
        rng = random.Random(self.seed)
        kinds: list[str] = []
        t0 = time.monotonic()
        next_at = FIRST_S
        faults = []
        while producer.poll() is None and time.monotonic() - t0 < self.seconds:
            if self.job is not None and self.job.poll() is not None:
                raise AssertionError(f"the job died by itself:\n{self._job_log()}")
            if time.monotonic() - t0 < next_at:
                time.sleep(0.2)
                continue
            if not kinds:  # every kind once per round, in a seeded order
                kinds = list(self.faults)
                rng.shuffle(kinds)
            kind = kinds.pop()
            fault = Fault(kind, time.monotonic() - t0)
            fault.down_s = self._apply(kind)
            fault.back_at = time.time()
            faults.append(fault)
            with (self.workdir / "faults.jsonl").open("a") as log:  # kept if the run dies
                log.write(json.dumps(dataclasses.asdict(fault)) + "\n")
            next_at = fault.at_s + fault.down_s + rng.uniform(*self.gap_s)
        return faults

    def _drain(self, r: redis.Redis, timeout_s: float) -> None:
        """Until the job's committed offsets are the topic's end."""
        end = {str(k): v for k, v in true_end_offsets(self.broker.address, self.topic).items()}

        def drained() -> bool:
            assert self.job is not None and self.job.poll() is None, self._job_log()
            try:
                status = read_status(r, Keys())
            except redis.RedisError:
                return False
            return status is not None and {str(k): v for k, v in status.offsets.items()} == end

        procs.wait_until(drained, timeout_s, "the job to drain the topic")

    def _measure(self, r: redis.Redis, faults: list[Fault]) -> None:
        batches = [b for b in read_batches(r, Keys()) if b.get("input_rows")]
        for f in faults:
            after = [
                b
                for b in batches
                if b.get("freshness") and b["freshness"]["commit_time"] > f.back_at * 1000
            ]
            if after:
                first = min(b["freshness"]["commit_time"] for b in after)
                f.recovered_s = max(0.0, first / 1000 - f.back_at)
                minute = [
                    b["freshness"]["p99_ms"]
                    for b in after
                    if b["freshness"]["commit_time"] <= (f.back_at + 60) * 1000
                ]
                f.max_freshness_ms = int(max(minute)) if minute else None

    def _job_log(self) -> str:
        return (self.workdir / "job.log").read_text(errors="replace")[-4000:]


def committed_batches(checkpoint: Path) -> list[dict[str, tuple[int, int]]]:
    """Each batch the job committed: partition -> (start, end) offsets, from the checkpoint's
    offset log and commit log as plain files (Spark writes `offsets/N` before batch N runs and
    `commits/N` after its results are written)."""

    def ends(batch_id: int) -> dict[str, int]:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        return {str(k): int(v) for k, v in json.loads(lines[2]).items()}

    done = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    out = []
    for batch_id in done:
        start = ends(batch_id - 1) if batch_id else {}
        out.append({p: (start.get(p, 0), e) for p, e in ends(batch_id).items()})
    return out


class Replay:
    """The ground truth replayed over the committed batches, one batch at a time.

    The rules of tests/integration/helpers.py (`deduplicated`, then `expected_windows`) for
    10 s tumbling windows, kept incremental so that a soak's millions of records are never held
    at once: the watermark starts at 0 and after each batch becomes max(watermark, max event
    time of its events, retries and heartbeats - allowed lateness); within a batch, in Kafka
    order, an event whose window is still open is a duplicate if an event of the same service
    and id was accepted before while its window was open; an event is late if its window ended
    at or before the watermark in force.
    """

    def __init__(self, window_ms: int = WINDOW_MS, lateness_ms: int = LATENESS_MS) -> None:
        self.window_ms = window_ms
        self.lateness_ms = lateness_ms
        self.watermark = 0
        self.held: dict[tuple[str, str], int] = {}
        self.accepted: Counter[tuple[int, str]] = Counter()
        self.late: Counter[tuple[int, str]] = Counter()
        self.duplicates: Counter[tuple[int, str]] = Counter()

    def batch(self, rows: list[tuple[int, int, str, int, str, str]]) -> None:
        """One batch's records: (partition, offset, kind, event time, service, event id)."""
        wm, size = self.watermark, self.window_ms
        seen = None
        for _, _, kind, et, service, event_id in sorted(rows):
            if kind in ("event", "duplicate", "heartbeat"):
                seen = et if seen is None else max(seen, et)
            if kind not in ("event", "duplicate"):
                continue
            start = et - et % size
            end = start + size
            if end > wm:
                key = (service, event_id)
                if self.held.get(key, wm) > wm:
                    self.duplicates[(start, service)] += 1
                    self.duplicates[(start, "*")] += 1
                    continue
                self.held[key] = end
            target = self.late if end <= wm else self.accepted
            target[(start, service)] += 1
            target[(start, "*")] += 1
        if seen is not None:
            self.watermark = max(wm, seen - self.lateness_ms)
        if len(self.held) > 200_000:  # ids whose windows all closed make no duplicates
            self.held = {k: h for k, h in self.held.items() if h > self.watermark}


def compare(
    r: redis.Redis,
    checkpoint: Path,
    truth_path: Path,
    faults: list[Fault],
    seconds: float,
    rate: float,
) -> SoakResult:
    """Redis against the truth, the truth file read once, a batch replayed as soon as every
    partition has gone past its end (the file is in acknowledgement order, offsets rising)."""
    batches = committed_batches(checkpoint)
    bounds = {p: [b[p][1] for b in batches if p in b] for p in {p for b in batches for p in b}}
    index = {p: [i for i, b in enumerate(batches) if p in b] for p in bounds}
    pending: dict[int, list[tuple[int, int, str, int, str, str]]] = {}
    reached = dict.fromkeys(bounds, 0)
    replay = Replay()
    done = records = malformed = outside = 0
    with truth_path.open() as f:
        for line in f:
            t = json.loads(line)
            records += 1
            malformed += t["kind"] == "malformed"
            p, o = str(t["partition"]), t["offset"]
            at = bisect.bisect_right(bounds.get(p, []), o)
            if at == len(bounds.get(p, [])):
                outside += 1
                continue
            row = (t["partition"], o, t["kind"], t.get("event_time") or 0, t.get("service") or "",
                   t.get("event_id") or "")  # fmt: skip
            pending.setdefault(index[p][at], []).append(row)
            reached[p] = max(reached[p], o + 1)
            while done < len(batches) and all(
                reached.get(q, 0) >= e for q, (_, e) in batches[done].items()
            ):
                replay.batch(pending.pop(done, []))
                done += 1
    while done < len(batches):
        replay.batch(pending.pop(done, []))
        done += 1
    rows = read_windows(r, Keys())
    got = {(w.window_start, w.service): w.count for w in rows if w.count}
    got_late = {(w.window_start, w.service): w.late for w in rows if w.late}
    got_dups = {(w.window_start, w.service): w.duplicates for w in rows if w.duplicates}
    mismatches = []
    if outside:
        mismatches.append(f"{outside} records in no committed batch")
    for name, a, b in (
        ("count", got, dict(replay.accepted)),
        ("late", got_late, dict(replay.late)),
        ("duplicates", got_dups, dict(replay.duplicates)),
    ):
        for key in sorted(set(a) | set(b)):
            if a.get(key, 0) != b.get(key, 0):
                mismatches.append(f"{name} {key}: Redis {a.get(key, 0)}, truth {b.get(key, 0)}")
    dead = sum(read_dead_counts(r, Keys()).values())
    if dead != malformed:
        mismatches.append(f"dead letters: Redis {dead}, truth {malformed}")
    return SoakResult(
        seconds=seconds,
        rate=rate,
        records=records,
        batches=len(batches),
        windows=len(replay.accepted),
        events=sum(v for (_, svc), v in replay.accepted.items() if svc == "*"),
        faults=faults,
        mismatches=mismatches,
    )
