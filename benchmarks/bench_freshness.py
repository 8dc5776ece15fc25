"""Freshness under offered load: how old records are when the job commits them, and whether it
holds its trigger, at several offered rates.

    .venv/bin/python benchmarks/bench_freshness.py [--rates 1000,10000,50000] [--seconds 60]
        [--warmup 15] [--trigger 1s] [--master local[2]] [--per-process N]
        [--client kafka-python|confluent] [--services N] [--routes N] [--regions N]
        [--job-arg=--shuffle-partitions=2 ...]

Starts its own broker (Tansu) and redis-server, a topic of 3 partitions, and the job as a user
would (`python -m cli.main job ... --trigger 1s --master local[2] --starting-offsets
latest`, a subprocess), and waits for the job's first status (a heartbeat per partition every
2 s kicks its first batch). Then, for each rate in turn, on the same job:

  * offered load (benchmarks/offered_load.py): `ceil(rate / --per-process)` producer processes
    (by default 20,000/s each with kafka-python, 100,000/s with confluent: one librdkafka
    process offers 100k/s here with 0.15 core less than five, measured 2026-11-26) build and
    encode all their events before the clock starts, then send them paced (every 100 ms what
    is due) with client batching, acks=1; the Kafka timestamp is the send time and
    each event's event time is "now" (minus the generator's own out-of-order delay). The client
    is kafka-python's KafkaProducer by default; it costs ~25 us CPU per record here (measured
    2026-11-24: 0.78 CPU s for 30k records), i.e. over a core at 50k/s on a 2-core machine.
    `--client confluent` (confluent-kafka/librdkafka, ~4 us per record) leaves the job the cores
    the figures are about;
  * `--services N` spreads the events evenly over N services (the live side of the groups
    curve: at 10,000 events/s, 1,000 services touch ~1,000 (window, service) pairs a batch);
  * `--routes N [--regions M]` gives each event a route, method, region and version as
    `tidegauge produce --attributes` does, for the job to slice by (`--job-arg=--dimension=route`);
  * `--warmup` seconds, then `--seconds` measured: the batches whose trigger fired in the
    measured interval (`batch_time`, from `tidegauge.core.store.read_batches`);
  * after the producers stop, the time the job takes to catch up with every acknowledged record.

Freshness of a record = (commit of its micro-batch to Redis) - (its Kafka broker timestamp), as the
job records it per batch (`freshness`: p50, p99, max by nearest rank). Per rate it prints:
  * producer: sent and acknowledged records, acked/s over the interval (did it offer the rate?);
  * batches, rows/s, median, p95 and max batch duration, batches longer than the trigger (falling
    behind);
  * the job's freshness: median of the batch p50s, max of the batch p99s, max;
  * the pooled, record-weighted p50/p99/max over every record of those batches, recomputed here
    from the batches' offset ranges and the timestamps the broker acknowledged to the producers
    (with the job's `commit_time`; if the job recorded none, the batch end, batch_time +
    batch_duration_ms, stands in and the line says so), and how far the recomputed per-batch
    p50/p99 differ from the job's (0 when both agree);
  * lag at the end of the interval: records acknowledged by the broker but not in a committed
    batch (and in seconds of input), and the job's own view (latest_offsets - offsets of its last
    batch: 0 by construction unless `--max-records-per-trigger` caps batches, since a batch takes
    all its source reported; Tansu's short ListOffsets answer can understate it too);
  * CPU seconds over the interval of the job (its whole process tree: driver, JVM, Python
    workers), the producers, the broker and Redis, next to what the cores offered: everything
    shares the same cores, so a figure at a high rate is the job's *with* its load beside it;
    and the job's by part: its JVM (of which the JIT compiler and GC threads), its Python
    workers, its driver Python and data source planners (Linux /proc).

One job for all rates, lowest first: starting Spark and its Python workers costs tens of seconds
and is not what is measured; the warm-up absorbs the change of rate, state of earlier rates is
small (windows close a lateness after the load moves on), and each rate starts only once the job
has caught up with the previous one (if it cannot within `--drain-timeout`, the next rate's figures
would mix two loads, so the run stops there and says so). A job that cannot keep up shows as
batches over the trigger, a growing lag and a long catch-up. Prints the machine first and one
summary line per rate at the end; nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import redis  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from benchmarks.offered_load import (  # noqa: E402
    OfferedLoad,
    ProducerResult,
    combine_marks,
    processes_for,
)
from cli.local.services import (  # noqa: E402
    Service,
    parent_death_signal,
    start_broker,
    start_redis,
)
from tidegauge.core.config import KafkaSettings, RedisSettings  # noqa: E402
from tidegauge.core.durations import parse_duration  # noqa: E402
from tidegauge.core.events import Heartbeat, encode_heartbeat  # noqa: E402
from tidegauge.core.store import Keys, connect, read_batches, read_status  # noqa: E402
from tidegauge.traffic.topics import ensure_topic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 3
PREFIX = "tg"


# --- CPU accounting from /proc ------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds of it and its reaped children)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        rest = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parens
        ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        table[int(entry)] = (int(rest[1]), ticks / _TICK)
    return table


def tree_cpu_s(root: int, table: dict[int, tuple[int, float]] | None = None) -> float | None:
    """CPU seconds of `root` and every live descendant (reaped ones count in their parents)."""
    if not os.path.isdir("/proc"):
        return None
    table = _proc_table() if table is None else table
    if root not in table:
        return None
    return sum(table[pid][1] for pid in _tree(root, table))


def _tree(root: int, table: dict[int, tuple[int, float]]) -> list[int]:
    """`root` and its live descendants in `table` (empty if `root` is not there)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root] if root in table else []
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float | None]:
    table = _proc_table() if os.path.isdir("/proc") else None
    return {name: tree_cpu_s(pid, table) if table else None for name, pid in pids.items()}


#: JVM threads by name: HotSpot's JIT compilers ("C2 CompilerThread0") and collectors.
_JVM_THREADS = (("jit", ("C1 CompilerThre", "C2 CompilerThre")), ("gc", ("GC Thread", "G1 ")))


def _part_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return "driver"
    if argv and argv[0].endswith(b"java"):
        return "jvm"
    if b"pyspark.worker" in argv:  # the worker daemon and the workers it forks
        return "python workers"
    return "driver"  # the driver's Python and the data source's planner processes


def job_parts(root: int) -> dict[str, float]:
    """CPU seconds so far of the job's parts: its JVM (and, of those, the live JIT compiler
    and GC threads'), its Python workers, and the rest (driver Python, planner processes).

    Thread figures are per live thread: a compiler thread HotSpot retired in between is missing
    from the difference, so "jit" and "gc" are lower bounds.
    """
    parts: dict[str, float] = {}
    if not os.path.isdir("/proc"):
        return parts
    table = _proc_table()
    for pid in _tree(root, table):
        part = _part_of(pid)
        parts[part] = parts.get(part, 0.0) + table[pid][1]
        if part != "jvm":
            continue
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/stat") as f:
                    text = f.read()
                    name = text[text.index("(") + 1 : text.rindex(")")]
                    rest = text.rsplit(")", 1)[1].split()
                    for kind, prefixes in _JVM_THREADS:
                        if name.startswith(prefixes):
                            key = f"{kind}:{tid}"
                            parts[key] = (int(rest[11]) + int(rest[12])) / _TICK
    return parts


def parts_text(before: dict[str, float], after: dict[str, float]) -> str:
    """The job's CPU by part over an interval, from two `job_parts`."""

    def delta(kind: str) -> float:
        if kind in ("jit", "gc"):  # per thread: the live ones of the later snapshot
            keys = [k for k in after if k.startswith(kind + ":")]
            return sum(after[k] - before.get(k, 0.0) for k in keys)
        return after.get(kind, 0.0) - before.get(kind, 0.0)

    return (
        f"JVM {delta('jvm'):.1f} (JIT compiler threads {delta('jit'):.1f}, GC threads "
        f"{delta('gc'):.1f}), Python workers {delta('python workers'):.1f}, driver Python and "
        f"planners {delta('driver'):.1f}"
    )


# --- the job as a subprocess --------------------------------------------------------------------


@dataclass
class Job:
    proc: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def exit_text(self) -> str:
        return f"the job exited (code {self.proc.returncode}):\n{self.log_tail()}"

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the CLI (it stops its query cleanly), then SIGKILL its group if need be."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the JVM and its workers, if left
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def job_argv(
    kafka: KafkaSettings,
    url: str,
    checkpoint: Path,
    trigger: str,
    master: str,
    starting_offsets: str,
    services: int,
    extra: list[str],
) -> list[str]:
    """`tidegauge job` as a user starts it on this run's broker and Redis (a subprocess argv)."""
    return [
        sys.executable,
        "-m",
        "cli.main",
        "job",
        "--bootstrap",
        kafka.bootstrap,
        "--topic",
        kafka.topic,
        "--redis",
        url,
        "--redis-prefix",
        PREFIX,
        "--checkpoint",
        str(checkpoint),
        "--trigger",
        trigger,
        "--master",
        master,
        "--starting-offsets",
        starting_offsets,
        # every service its own group: none counted under "(other)"
        *(["--max-services", str(2 * services)] if services > 500 else []),
        *extra,
    ]


def start_job(argv: list[str], log_path: Path) -> Job:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    out = open(log_path, "ab")  # noqa: SIM115 (the child owns it)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=parent_death_signal(),
        )
    finally:
        out.close()
    return Job(proc, log_path)


def wait_first_status(job: Job, r: redis.Redis, kafka: KafkaSettings, timeout_s: float) -> None:
    """Until the job has written a status; a heartbeat per partition every 2 s kicks batch 0."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap.split(","), acks=1)
    keys = Keys(PREFIX)
    deadline = time.monotonic() + timeout_s
    next_kick = time.monotonic() + 5  # let the job resolve its starting offsets first
    try:
        while read_status(r, keys) is None:
            if not job.alive():
                raise RuntimeError(job.exit_text())
            if time.monotonic() > deadline:
                raise TimeoutError(f"no job status after {timeout_s:.0f}s:\n{job.log_tail()}")
            if time.monotonic() >= next_kick:
                now = int(time.time() * 1000)
                for p in range(PARTITIONS):
                    hb = Heartbeat(event_time=now, partition=p, source="bench-freshness")
                    producer.send(kafka.topic, encode_heartbeat(hb), partition=p)
                producer.flush(10)
                next_kick = time.monotonic() + 2
            time.sleep(0.25)
    finally:
        producer.close(5)


# --- figures ------------------------------------------------------------------------------------


def by_partition(offsets: dict[str, Any] | None) -> dict[int, int]:
    """{partition: offset} from the job's offsets dict, whatever its keys look like ("0", "t-0")."""
    out = {}
    for k, v in (offsets or {}).items():
        m = re.search(r"(\d+)$", str(k))
        if m:
            out[int(m.group(1))] = int(v)
    return out


def nearest_rank(sorted_values: np.ndarray, q: float) -> int:
    """The smallest value with at least ceil(q * n) values at or below it (as the job ranks)."""
    k = max(1, math.ceil(q * len(sorted_values)))
    return int(sorted_values[k - 1])


def load_acks(results: list[ProducerResult]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """partition -> (offsets ascending, broker timestamps ms) of every acknowledged record."""
    arrays = [np.load(r.acks_path) for r in results]
    rows = np.concatenate(arrays, axis=1) if arrays else np.zeros((3, 0), np.int64)
    out = {}
    for p in range(PARTITIONS):
        sel = rows[:, rows[0] == p]
        order = np.argsort(sel[1], kind="stable")
        out[p] = (sel[1][order], sel[2][order])
    return out


@dataclass
class Recomputed:
    records: int
    matched: int
    p50: int | None
    p99: int | None
    max: int | None
    commit_source: str
    p50_diff: int | None
    p99_diff: int | None
    compared: int


def recompute(
    batches: list[dict[str, Any]],
    history: list[dict[str, Any]],
    acks: dict[int, tuple[np.ndarray, np.ndarray]],
) -> Recomputed:
    """Per-record freshness of `batches` from their offset ranges and the acked timestamps."""
    prev_end: dict[int, dict[int, int]] = {}
    for a, b in zip(history, history[1:], strict=False):
        prev_end[int(b["batch_id"])] = by_partition(a.get("offsets"))
    ages_all, records, matched, compared = [], 0, 0, 0
    sources: set[str] = set()
    p50_diff = p99_diff = 0
    for b in batches:
        start = by_partition(b.get("start_offsets")) or prev_end.get(int(b["batch_id"]), {})
        end = by_partition(b.get("offsets"))
        fresh = b.get("freshness")
        if fresh and fresh.get("commit_time"):
            commit, sources = int(fresh["commit_time"]), sources | {"the job's commit_time"}
        else:
            commit = int(b["batch_time"]) + int(b.get("batch_duration_ms") or 0)
            sources |= {"batch end (batch_time + batch_duration_ms), no commit_time recorded"}
        parts = []
        for p, e in end.items():
            s = start.get(p, e)
            records += max(0, e - s)
            offs, ts = acks.get(p, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            lo, hi = np.searchsorted(offs, s), np.searchsorted(offs, e)
            parts.append(ts[lo:hi])
        ts_b = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        matched += len(ts_b)
        if not len(ts_b):
            continue
        ages = np.sort(commit - ts_b)
        ages_all.append(ages)
        if fresh and fresh.get("records") == len(ts_b):
            compared += 1
            p50_diff = max(p50_diff, abs(nearest_rank(ages, 0.5) - int(fresh["p50_ms"])))
            p99_diff = max(p99_diff, abs(nearest_rank(ages, 0.99) - int(fresh["p99_ms"])))
    pooled = np.sort(np.concatenate(ages_all)) if ages_all else np.zeros(0, np.int64)
    return Recomputed(
        records=records,
        matched=matched,
        p50=nearest_rank(pooled, 0.5) if len(pooled) else None,
        p99=nearest_rank(pooled, 0.99) if len(pooled) else None,
        max=int(pooled[-1]) if len(pooled) else None,
        commit_source="; ".join(sorted(sources)) or "-",
        p50_diff=p50_diff if compared else None,
        p99_diff=p99_diff if compared else None,
        compared=compared,
    )


def phase_medians(batches: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Median of each `durations_ms` phase over `batches`, largest first (the total left out)."""
    names = {k for b in batches for k in (b.get("durations_ms") or {})} - {"triggerExecution"}
    med = {
        k: float(np.median([(b.get("durations_ms") or {}).get(k, 0) for b in batches]))
        for k in names
    }
    return sorted(med.items(), key=lambda kv: -kv[1])


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def cpu_text(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


# --- one rate -----------------------------------------------------------------------------------


def run_rate(
    args: argparse.Namespace,
    rate: int,
    index: int,
    job: Job,
    r: redis.Redis,
    kafka: KafkaSettings,
    services: dict[str, Service],
    tmp: Path,
) -> dict[str, Any]:
    keys = Keys(PREFIX)
    trigger_ms = parse_duration(args.trigger)
    nproc = processes_for(rate, args.per_process)
    load = OfferedLoad(
        bootstrap=kafka.bootstrap,
        topic=kafka.topic,
        partitions=PARTITIONS,
        rate=rate,
        processes=nproc,
        warmup_s=args.warmup,
        seconds=args.seconds,
        workdir=tmp,
        seed=index + 1,
        client=args.client,
        services=args.services,
        routes=args.routes,
        regions=args.regions,
    )
    pids = {"job": job.proc.pid, **{n: s.proc.pid for n, s in services.items()}}

    def wait_until(t: float) -> None:
        while (left := t - time.time()) > 0:
            if not job.alive():
                raise RuntimeError(job.exit_text())
            time.sleep(min(left, 0.5))

    try:
        load.prepare()
        print(
            f"\nrate {rate:,} events/s: {nproc} {args.client} producer process(es), "
            f"{load.events:,} events "
            f"built in {load.prepare_s:.1f}s; warm-up {args.warmup:g}s, measured "
            f"{args.seconds:g}s",
            flush=True,
        )
        t0 = load.start()
        t_warm, t_end = t0 + args.warmup, t0 + args.warmup + args.seconds
        wait_until(t_warm)
        cpu0, parts0 = cpu_snapshot(pids), job_parts(job.proc.pid)
        wait_until(t_end)
        cpu1, parts1 = cpu_snapshot(pids), job_parts(job.proc.pid)
        status_end = read_status(r, keys)
        results = load.results(timeout_s=120)
    finally:
        load.close()
    warm, end, final = (combine_marks(results, n) for n in ("warm", "end", "final"))
    if not (warm and end and final):
        raise RuntimeError("a producer process stopped before the end of the interval")
    errors = [x.first_error for x in results if x.first_error]

    # Catch-up: until the job's committed offsets reach every acknowledged record.
    target = dict(enumerate(final["next_offsets"]))
    t_stop = time.time()
    drained_s: float | None = None
    while time.time() - t_stop < args.drain_timeout:
        st = read_status(r, keys)
        done = by_partition(st.offsets) if st else {}
        if all(done.get(p, 0) >= o for p, o in target.items()):
            drained_s = time.time() - t_stop
            break
        if not job.alive():
            raise RuntimeError(job.exit_text())
        time.sleep(0.2)

    history = read_batches(r, keys)
    sel = [b for b in history if t_warm * 1000 <= int(b["batch_time"]) < t_end * 1000]
    durations = sorted(int(b.get("batch_duration_ms") or 0) for b in sel)
    over = sum(d > trigger_ms for d in durations)
    rows = sum(int(b.get("input_rows") or 0) for b in sel)
    fresh = [b["freshness"] for b in sel if b.get("freshness")]
    has_key = any("freshness" in b for b in sel)
    job_p50 = float(np.median([f["p50_ms"] for f in fresh])) if fresh else None
    job_p99 = max((f["p99_ms"] for f in fresh), default=None)
    job_max = max((f["max_ms"] for f in fresh), default=None)
    rec = recompute(sel, history, load_acks(results))

    interval = max(1e-9, end["at_s"] - warm["at_s"]) if warm and end else float(args.seconds)
    acked_rate = (end["acked"] - warm["acked"]) / interval if warm and end else 0.0
    job_end = by_partition(status_end.offsets) if status_end else {}
    lag = sum(max(0, o - job_end.get(p, 0)) for p, o in enumerate(end["next_offsets"]))
    last = sel[-1] if sel else None
    job_lag = (
        sum(
            max(0, v - by_partition(last.get("offsets")).get(p, 0))
            for p, v in by_partition(last.get("latest_offsets")).items()
        )
        if last
        else None
    )
    cpu: dict[str, float | None] = {}
    for k, before in cpu0.items():
        after = cpu1.get(k)
        cpu[k] = after - before if before is not None and after is not None else None
    cpu["producers"] = end["cpu_s"] - warm["cpu_s"] if warm and end else None

    print(
        f"  producer: {end['sent'] - warm['sent']:,} sent, {end['acked'] - warm['acked']:,} "
        f"acked in {interval:.1f}s = {acked_rate:,.0f} acked/s ({acked_rate / rate:.1%} of "
        f"offered); {final['failed']:,} failed; {end['behind']:,} due but unsent at the end"
        + (f"; first error {errors[0]}" if errors else "")
    )
    print(
        f"  job: {len(sel)} batches, {rows:,} rows ({rows / args.seconds:,.0f} rows/s); batch "
        f"duration median {ms(float(np.median(durations)) if durations else None)}, p95 "
        f"{ms(_p95(durations))}, max {ms(durations[-1] if durations else None)}; {over} of "
        f"{len(sel)} longer than the "
        f"{args.trigger} trigger"
    )
    parts = phase_medians(sel)
    if parts:
        print(
            "  where batch time goes (median ms per phase, Spark's durationMs): "
            + ", ".join(f"{k} {v:,.0f}" for k, v in parts)
        )
    if fresh:
        print(
            f"  freshness, the job's per-batch figures ({len(fresh)} batches with records): "
            f"p50 {ms(job_p50)} (median of batch p50s), p99 {ms(job_p99)} (max of batch p99s),"
            f" max {ms(job_max)}"
        )
    else:
        print(
            "  freshness, the job's figures: "
            + (
                "none (every batch's freshness is null)"
                if has_key
                else "not recorded (no `freshness` in the job's batch history)"
            )
        )
    print(
        f"  freshness, recomputed per record and pooled (record-weighted) over "
        f"{rec.matched:,} of {rec.records:,} records: p50 {ms(rec.p50)}, p99 {ms(rec.p99)}, "
        f"max {ms(rec.max)}; commit time: {rec.commit_source}"
    )
    if rec.compared:
        print(
            f"  check: recomputed per-batch p50/p99 vs the job's, max |diff| "
            f"{rec.p50_diff} / {rec.p99_diff} ms over {rec.compared} batches"
        )
    print(
        f"  lag at the end of the interval: {lag:,} records acked but not committed "
        f"({lag / rate:.2f} s of input); the job's own view (latest - offsets, last batch): "
        f"{'-' if job_lag is None else f'{job_lag:,}'}"
    )
    print(
        "  after the load stopped: "
        + (
            f"caught up in {drained_s:.1f}s"
            if drained_s is not None
            else f"NOT caught up after {args.drain_timeout:g}s"
        )
    )
    print(
        f"  CPU seconds over the interval: job {cpu_text(cpu['job'])}, producers "
        f"{cpu_text(cpu['producers'])}, broker {cpu_text(cpu.get('broker'))}, redis "
        f"{cpu_text(cpu.get('redis'))}; {os.cpu_count()} cores x {interval:.0f}s = "
        f"{(os.cpu_count() or 1) * interval:.0f}",
        flush=True,
    )
    if parts1:
        print(f"  the job's CPU seconds by part: {parts_text(parts0, parts1)}", flush=True)
    return {
        "rate": rate,
        "acked_rate": acked_rate,
        "batches": len(sel),
        "over": over,
        "dur_med": float(np.median(durations)) if durations else None,
        "dur_p95": _p95(durations),
        "dur_max": durations[-1] if durations else None,
        "job_p50": job_p50,
        "job_p99": job_p99,
        "job_max": job_max,
        "pooled_p99": rec.p99,
        "lag": lag,
        "drained_s": drained_s,
        "cpu": cpu,
    }


def _p95(durations: list[float]) -> float | None:
    """The 95th percentile of batch durations, by nearest rank (None: no batch)."""
    if not durations:
        return None
    ranked = sorted(durations)
    return float(ranked[max(0, math.ceil(0.95 * len(ranked)) - 1)])


def summary_line(s: dict[str, Any]) -> str:
    def v(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f}"

    caught_up = "-" if s["drained_s"] is None else f"{s['drained_s']:.1f}s"
    return (
        f"rate {s['rate']:>6,}/s: acked {v(s['acked_rate'])}/s, {s['batches']} batches, "
        f"{s['over']} over trigger, duration med/p95/max {v(s['dur_med'])}/{v(s['dur_p95'])}/"
        f"{v(s['dur_max'])} ms, "
        f"freshness p50 {v(s['job_p50'])} p99 {v(s['job_p99'])} (pooled {v(s['pooled_p99'])}) "
        f"max {v(s['job_max'])} ms, lag {s['lag']:,}, caught up {caught_up}, cpu job "
        f"{cpu_text(s['cpu']['job'])}s producers {cpu_text(s['cpu']['producers'])}s"
    )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="1000,10000,50000", help="events/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured seconds per rate")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds per rate before measuring")
    ap.add_argument("--trigger", default="1s", help="the job's --trigger (default 1s)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--per-process",
        type=float,
        default=None,
        help="events/s one producer process offers at most (default 20000 with kafka-python, "
        "100000 with confluent)",
    )
    ap.add_argument(
        "--client",
        choices=["kafka-python", "confluent"],
        default="kafka-python",
        help="producer client (default kafka-python; confluent costs the shared "
        "cores ~6x less CPU per record)",
    )
    ap.add_argument(
        "--drain-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the job to catch up after each rate",
    )
    ap.add_argument(
        "--start-timeout",
        type=float,
        default=240.0,
        help="seconds to wait for the job's first status",
    )
    ap.add_argument(
        "--services",
        type=int,
        default=0,
        help="spread the events evenly over N services (default 0: the generator's few)",
    )
    ap.add_argument(
        "--routes",
        type=int,
        default=0,
        help="events carry route, method, region and version as `produce --attributes --routes "
        "N` writes them (default 0: none), for the job's --dimension (see --job-arg)",
    )
    ap.add_argument("--regions", type=int, default=3, help="... in this many regions (default 3)")
    ap.add_argument(
        "--job-arg",
        action="append",
        default=[],
        help="extra flag for `tidegauge job` (repeat; e.g. --job-arg=--shuffle-partitions=2)",
    )
    args = ap.parse_args()
    if args.per_process is None:
        args.per_process = 100_000 if args.client == "confluent" else 20_000
    rates = [int(x) for x in args.rates.split(",") if x.strip()]
    if not rates or min(rates) <= 0:
        ap.error("--rates wants positive integers")
    parse_duration(args.trigger)

    signal.signal(signal.SIGTERM, _interrupt)  # the same clean-up as Ctrl-C
    print(f"machine: {describe(('pyspark', 'numpy', 'kafka-python', 'redis'))}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="tg-fresh-"))
    services: dict[str, Service] = {}
    job: Job | None = None
    summaries: list[dict[str, Any]] = []
    try:
        services["broker"] = start_broker(log_path=tmp / "broker.log")
        services["redis"] = start_redis(log_path=tmp / "redis.log")
        kafka = KafkaSettings(bootstrap=services["broker"].address, topic="freshness")
        ensure_topic(kafka, PARTITIONS)
        url = f"redis://{services['redis'].address}/0"
        r = connect(RedisSettings(url=url))
        argv = job_argv(
            kafka,
            url,
            tmp / "checkpoint",
            args.trigger,
            args.master,
            "latest",
            args.services,
            args.job_arg,
        )
        print(f"job: {' '.join(argv[1:])}", flush=True)
        t = time.monotonic()
        job = start_job(argv, tmp / "job.log")
        wait_first_status(job, r, kafka, args.start_timeout)
        print(f"job wrote its first status after {time.monotonic() - t:.1f}s", flush=True)
        for i, rate in enumerate(rates):
            s = run_rate(args, rate, i, job, r, kafka, services, tmp)
            summaries.append(s)
            if s["drained_s"] is None and i + 1 < len(rates):
                print(
                    f"\nstopping: the job did not catch up after {rate:,}/s, so the next "
                    f"rates would measure a backlog, not their own load"
                )
                break
        print(
            "\nsummary (freshness: job's median batch p50, max batch p99, pooled p99 "
            "recomputed per record, max):"
        )
        for s in summaries:
            print(summary_line(s))
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
    finally:
        if job is not None:
            if job.proc.poll() not in (None, 0):  # the job died: keep its whole log
                kept = REPO / "var" / f"bench-freshness-job-{int(time.time())}.log"
                kept.parent.mkdir(exist_ok=True)
                shutil.copy(tmp / "job.log", kept)
                print(f"the job's log: {kept}", file=sys.stderr)
            job.stop()
        for svc in services.values():
            svc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
