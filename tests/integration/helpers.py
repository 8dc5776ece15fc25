"""Integration test helpers: run the CLI, load ground truth, replay the watermark rule."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tidegauge.core.durations import to_iso
from tidegauge.core.events import Event, encode_event
from tidegauge.core.windows import WindowSpec

WINDOW_MS = 10_000


def tidegauge(
    *args: str, timeout: float = 300, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `tidegauge ARGS...` with this interpreter, as a user would (`env`: extra variables)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"tidegauge {' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
        )
    return proc


def send_events(
    bootstrap: str,
    topic: str,
    events: Sequence[Event],
    partitions: int = 1,
    partition_of: Callable[[int], int] | None = None,
) -> None:
    """Create `topic` and send `events` in order, each with its event time as Kafka timestamp.

    `partition_of(i)`: the partition of event i (default: one partition, or the producer's
    choice by key).
    """
    from kafka import KafkaProducer

    tidegauge("topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(partitions))
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    for i, e in enumerate(events):
        part = None if partition_of is None else partition_of(i)
        producer.send(topic, encode_event(e), partition=part, timestamp_ms=e.event_time)
    producer.flush()
    producer.close()


def load_truth(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f]


def batch_rows(
    truth: Sequence[dict[str, Any]], batches: Sequence[dict[str, Any]]
) -> list[list[dict[str, Any]]]:
    """Split ground-truth records into the job's micro-batches by their Kafka positions.

    Each batch summary carries the offsets it started and ended at per partition; a record at
    (p, o) belongs to the batch with start[p] <= o < end[p].
    """
    by_pos = {(t["partition"], t["offset"]): t for t in truth}
    out = []
    for b in batches:
        rows = []
        for p, end in b["offsets"].items():
            start = b["start_offsets"].get(p, 0)
            for o in range(start, end):
                rows.append(by_pos[(int(p), o)])
        out.append(rows)
    return out


def expected_windows(
    batches_of_rows: Sequence[Sequence[dict[str, Any]]], window_ms: int, lateness_ms: int
) -> tuple[Counter[tuple[int, str]], Counter[tuple[int, str]]]:
    """Replay Spark's watermark rule over the batches, independently of the job's code.

    The rule, spelled out:
    - the watermark starts at 0; after each batch it becomes
      max(watermark, max event time in that batch (events and heartbeats) - allowed lateness);
    - an event is late if the end of its tumbling window is <= the watermark in force when its
      batch started; late events are not counted in the window (they are counted as late);
    - every other event (duplicates included: nothing is de-duplicated yet) adds 1 to its window.
    Returns (accepted counts, late counts) keyed by (window start, service), `*` included.
    """
    accepted: Counter[tuple[int, str]] = Counter()
    late: Counter[tuple[int, str]] = Counter()
    watermark = 0
    for rows in batches_of_rows:
        max_seen = None
        for t in rows:
            if t["kind"] in ("event", "duplicate", "heartbeat"):
                et = t["event_time"]
                max_seen = et if max_seen is None else max(max_seen, et)
            if t["kind"] not in ("event", "duplicate"):
                continue
            start = t["event_time"] - t["event_time"] % window_ms
            target = late if start + window_ms <= watermark else accepted
            target[(start, t["service"])] += 1
            target[(start, "*")] += 1
        if max_seen is not None:
            watermark = max(watermark, max_seen - lateness_ms)
    return accepted, late


def deduplicated(
    batches_of_rows: Sequence[Sequence[dict[str, Any]]],
    specs: Sequence[WindowSpec],
    lateness_ms: int,
) -> tuple[list[list[dict[str, Any]]], Counter[tuple[str, int, str]]]:
    """De-duplication by event id replayed independently (the rule of docs/time.md).

    Within a batch records are taken in Kafka order (partition, then offset). An event's
    horizon is the latest end of a window that can take it (each tumbling or hopping spec's
    last window holding it; event time + gap for sessions, if it has a user). An event whose
    horizon is after the watermark in force is a duplicate when an event of the same service
    and event_id was accepted before with a horizon still after it; any other event is kept
    (late or not, as the watermark rule says). Returns the batches with every duplicate turned
    into a heartbeat at its event time (it still moves the watermark, but counts nowhere), and
    the duplicates per (spec key, window start, service), `*` included, counted in every
    window (end > watermark) that holds one; sessions by the bucket of the event time.
    """
    held: dict[tuple[str, str], int] = {}  # (service, event id) -> horizon
    dups: Counter[tuple[str, int, str]] = Counter()
    out = []
    watermark = 0
    for rows in batches_of_rows:
        kept = []
        for t in sorted(rows, key=lambda t: (t["partition"], t["offset"])):
            if t["kind"] not in ("event", "duplicate"):
                kept.append(t)
                continue
            et = t["event_time"]
            ends = {}
            for spec in specs:
                if spec.kind == "session":
                    if t["user_id"] is not None:
                        ends[spec] = [(et - et % spec.size_ms, et + spec.gap_ms)]
                    continue
                last = et - et % spec.slide_ms
                ends[spec] = [
                    (s, s + spec.size_ms) for s in range(last, et - spec.size_ms, -spec.slide_ms)
                ]
            horizon = max(end for spans in ends.values() for _, end in spans)
            key = (t["service"], t["event_id"])
            if horizon > watermark and held.get(key, watermark) > watermark:
                for spec, spans in ends.items():
                    for start, end in spans:
                        if end > watermark:
                            dups[(spec.key, start, t["service"])] += 1
                            dups[(spec.key, start, "*")] += 1
                kept.append({**t, "kind": "heartbeat"})
                continue
            if horizon > watermark:
                held[key] = horizon
            kept.append(t)
        out.append(kept)
        seen = [t["event_time"] for t in kept if t["kind"] in ("event", "duplicate", "heartbeat")]
        if seen:
            watermark = max(watermark, max(seen) - lateness_ms)
    return out, dups


def expected_corrections(
    batches_of_rows: Sequence[Sequence[dict[str, Any]]], window_ms: int, lateness_ms: int
) -> tuple[Counter[tuple[int, str]], Counter[tuple[int, str]]]:
    """Stragglers and revisions per (window start, service), `*` included, replayed independently.

    The frontier of a batch is the max event time (events and heartbeats) of all batches before
    it; the watermark in force is frontier - allowed lateness (0 before any batch had rows).
    An accepted event (window end > watermark) is a straggler when its window end <= frontier:
    the window had been emitted without it. A window's revision is the number of batches that
    brought it at least one straggler (for `*`: batches with a straggler of any service).
    """
    stragglers: Counter[tuple[int, str]] = Counter()
    revisions: Counter[tuple[int, str]] = Counter()
    frontier: int | None = None
    watermark = 0
    for rows in batches_of_rows:
        max_seen = frontier
        touched: set[tuple[int, str]] = set()
        for t in rows:
            if t["kind"] in ("event", "duplicate", "heartbeat"):
                et = t["event_time"]
                max_seen = et if max_seen is None else max(max_seen, et)
            if t["kind"] not in ("event", "duplicate"):
                continue
            end = t["event_time"] - t["event_time"] % window_ms + window_ms
            if end <= watermark or frontier is None or end > frontier:
                continue
            for svc in (t["service"], "*"):
                stragglers[(end - window_ms, svc)] += 1
                touched.add((end - window_ms, svc))
        for key in touched:
            revisions[key] += 1
        if max_seen is not None:
            frontier = max_seen
            watermark = max(watermark, max_seen - lateness_ms)
    return stragglers, revisions


def assert_clean_run(stdout: str, stderr: str, checkpoint: Path) -> None:
    """A successful run logged no error and no traceback; its stop line is right.

    The stop line names the watermark a restart begins with: the one in Spark's commit log.
    """
    for text in (stdout, stderr):
        lines = [
            line
            for line in text.splitlines()
            # the JVM launcher's note on Spark's vector module is not Tidegauge's to silence
            if "incubator modules" not in line
        ]
        for line in lines:
            # warnings may come with load (a slow batch); errors and tracebacks never
            assert not re.search(r"\b(ERROR|Traceback|Exception)\b", line), line
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    entry = (checkpoint / "commits" / str(commits[-1])).read_text().splitlines()
    next_ms = json.loads(entry[1])["nextBatchWatermarkMs"]
    assert next_ms > 0
    stop = [line for line in stdout.splitlines() if "stopped after" in line]
    assert len(stop) == 1
    assert f"the next run starts at watermark {to_iso(next_ms)}" in stop[0], stop[0]


def values(arr: list[float] | dict[str, str]) -> list[float]:
    """A trace array from figure JSON: a list, or plotly's typed array {dtype, bdata (base64)}."""
    if isinstance(arr, list):
        return arr
    return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"]).tolist()


def trace(fig: dict, name: str) -> dict:
    """The trace called `name` of a plotly figure's JSON."""
    return next(t for t in fig["data"] if t.get("name") == name)
