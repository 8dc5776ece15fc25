"""Seed Redis, through the job's own sink code, with what a live job writes during a backlog.

Used by the dashboard tests (AppTest and the real browser) and by benchmarks/bench_dashboard.py.
Every number the page should show is returned in `Seeded`, computed here from the generated
values, so tests compare the page against ground truth rather than against itself.

The story: `services` services at a steady `rate` events/s each, in 10 s windows over the last
`minutes` of event time, ending a little before `now`. The job was paused for `pause_windows`
windows (no batches) and then caught up in one batch: the processing-time series has nothing,
then a spike, while the event-time series stays flat. Some windows got late events and
stragglers; a few records were dead letters.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import redis

from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch
from jobs.sink.rollup import BatchTime
from jobs.sink.status import touch_status, write_progress
from jobs.state.rows import ArrivalUpdate, LateUpdate, WindowCount, WindowUpdate
from jobs.summary.late_events import members, stored
from sketches.tg64 import hash32
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.retention import Retention
from tidegauge.core.sliding import Timeline, frame_of
from tidegauge.core.store import DeadLetter, Keys
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

#: The dashboard's panel headings, in page order: every one must show for a seeded store.
PANELS = [
    "Event time vs processing time",
    "Events per second by service",
    "Latency",
    "Distinct users",
    "Lateness",
    "Pipeline health",
]

W = 10_000
SPEC = WindowSpec.tumbling(W)
#: Also written: a 30 s sliding window (rolling figures and busiest interval per 10 s).
SLIDING = WindowSpec.sliding(30_000, W, 100)
LATENESS_MS = 30_000


@dataclass
class Seeded:
    """Ground truth of what was written."""

    services: list[str]
    starts: list[int]
    newest_start: int
    watermark: int
    batch_time: int
    #: Events per (window start) over all services, and per service.
    events: dict[int, int] = field(default_factory=dict)
    late: int = 0
    late_at: dict[int, int] = field(default_factory=dict)
    late_of: dict[tuple[int, str], int] = field(default_factory=dict)
    stragglers: int = 0
    #: Processing-time events per window start (the backlog's spike).
    processing: dict[int, int] = field(default_factory=dict)
    dead: int = 0
    #: Every latency written, for percentile checks.
    latencies: list[float] = field(default_factory=list)
    #: The busiest `SLIDING` interval (all services) ending in the range: (events, start),
    #: counted over every event time, and the rolling p99 rows' count.
    busiest: tuple[int, int] = (0, 0)
    sliding_rows: int = 0

    def late_by_service(self, services: list[str]) -> dict[int, int]:
        """Late events per window start, summed over `services`."""
        out: dict[int, int] = {}
        for (start, svc), n in self.late_of.items():
            if svc in services:
                out[start] = out.get(start, 0) + n
        return out


def seed_live(
    r: redis.Redis,
    keys: Keys,
    now_ms: int,
    *,
    services: int = 3,
    minutes: int = 15,
    rate: int = 20,
    pause_windows: int = 6,
    seed: int = 0,
    names: Sequence[str] | None = None,
    retention: Retention | None = None,
) -> Seeded:
    """Write windows, lateness, arrivals, batches and dead letters as the job would.

    With `retention`, each window's batch also does the job's retention work (roll-ups of
    the periods its watermark closed, expiry), as a job run with `--retention` does.
    """
    rng = np.random.default_rng(seed)
    times_rng = np.random.default_rng(seed + 1_000)  # event times: the other values unchanged
    parts: dict[tuple[str, int], tuple[WindowAgg, Timeline]] = {}
    names = list(names) if names is not None else [f"svc-{i:02d}" for i in range(services)]
    newest = now_ms - now_ms % W - 2 * W  # the newest window ends before now
    n_windows = minutes * 60_000 // W
    starts = [newest - (n_windows - 1 - i) * W for i in range(n_windows)]
    watermark = newest + W - 1 - LATENESS_MS
    truth = Seeded(names, starts, newest, watermark, now_ms - 500)
    truth_times: list[np.ndarray] = []
    pause_from = len(starts) - pause_windows - 3  # paused, then caught up 3 windows ago
    batch_id = 0
    caught_up: list[WindowUpdate] = []
    caught_arrivals: list[ArrivalUpdate] = []
    for i, start in enumerate(starts):
        paused = pause_from <= i < pause_from + pause_windows
        updates, lates, strags, arrivals = [], [], [], []
        for s_idx, svc in enumerate(names):
            n = rate * W // 1000
            latency = rng.lognormal(np.log(30.0 + 15 * s_idx), 0.6, n)
            status = rng.choice(np.array([200, 503]), n, p=[0.98, 0.02])
            users = np.array([f"{svc}-u{u}" for u in rng.integers(0, 150, n)], dtype=object)
            lateness = rng.exponential(800.0, n)
            agg = WindowAgg()
            agg.add_hashed(latency, status, hash32(users), lateness, None)
            at = start + times_rng.integers(0, W, n)
            if i == len(starts) - 12:
                at[: n // 2] = start + times_rng.integers(2_000, 3_000, n // 2)  # a busy second
            parts[(svc, start)] = (agg, Timeline().add(at // 100 * 100, status >= 500))
            truth_times.append(at)
            truth.latencies += latency.tolist()
            updates.append(WindowUpdate(SPEC.key, start, svc, agg.to_bytes()))
            truth.events[start] = truth.events.get(start, 0) + n
            if i % 7 == 3 and not paused:  # a few late events, 40-90 s late
                late = LateAgg()
                k = 2 + s_idx
                late.add(rng.uniform(40_000, 90_000, k), LATENESS_MS + 10_000.0)
                lates.append(LateUpdate(SPEC.key, start, svc, k, late.to_bytes()))
                truth.late += k
                truth.late_at[start] = truth.late_at.get(start, 0) + k
                truth.late_of[(start, svc)] = k
            if i % 5 == 2 and not paused:
                strags.append(WindowCount(SPEC.key, start, svc, 1 + s_idx))
                truth.stragglers += 1 + s_idx
            broker = ArrivalUpdate("broker", start + 1000, svc, n, _arr(0, 0, start))
            if paused:
                # Paused: the events wait in Kafka; the job processes them in one batch later.
                catch_at = starts[pause_from + pause_windows] + W
                caught_up.append(updates.pop())
                caught_arrivals += [
                    ArrivalUpdate("processing", catch_at, svc, n, _arr(0, 0, catch_at)),
                    broker,
                ]
                continue
            arrivals += [
                ArrivalUpdate("processing", start + W, svc, n, _arr(0, 0, start + W)),
                broker,
            ]
            truth.processing[start + W] = truth.processing.get(start + W, 0) + n
        if paused:
            continue
        if i == pause_from + pause_windows:
            updates += caught_up
            for a in caught_arrivals:
                if a.domain == "processing":
                    truth.processing[a.start_ms] = truth.processing.get(a.start_ms, 0) + a.count
            arrivals = _summed(arrivals + caught_arrivals)
        batch_id += 1
        n = len(lates)
        late_events = members(
            stored(
                {
                    "partition": np.zeros(n, dtype=np.int64),
                    "offset": 1000 * i + np.arange(n),
                    "kafka_ms": np.full(n, float(start + 60_000)),
                    "event_ms": np.full(n, start + 10),
                    "event_id": pa.array([f"late-{i}-{j}" for j in range(n)]),
                    "clock_offset_ms": np.full(n, np.nan),
                    "service": pa.array([lt.service for lt in lates], pa.string()),
                },
                watermark_ms=start + 40_000,
                size_ms=W,
            ),
            batch_id,
        )
        write_batch(
            r,
            keys,
            SinkBatch(
                batch_id,
                updates,
                late=lates,
                stragglers=strags,
                arrivals=arrivals,
                late_events=late_events,
                at=BatchTime(batch_id, start + W - 1 - LATENESS_MS, start + W + 300),
            ),
            SinkConfig(arrival_window_ms=W, retention=retention, source=SPEC),
        )
        rows = sum(WindowAgg.from_bytes(u.agg).count for u in updates)
        seen = start + W - 1  # the batch's max event time; the watermark trails it
        write_progress(
            r, keys, _progress(batch_id, start + W + 300, seen, rows, seen - LATENESS_MS)
        )
    batch_id += 1
    _seed_sliding(r, keys, batch_id, starts, names, parts, np.concatenate(truth_times), truth)
    letters = [
        DeadLetter(0, 17, now_ms - 3000, "invalid_json", "Expecting value", b"{oops", 5, 2),
        DeadLetter(2, 5, now_ms - 2000, "missing_field", "no 'service'", b'{"a":1}', 7, 2),
        DeadLetter(1, 9, now_ms - 1000, "invalid_json", "Unterminated", b'{"x', 3, 2),
    ]
    batch_id += 1
    write_batch(
        r,
        keys,
        SinkBatch(batch_id, [], dead=letters, dead_counts={"invalid_json": 2, "missing_field": 1}),
    )
    truth.dead = len(letters)
    summary = _progress(batch_id, truth.batch_time, newest + W - 1, 3, watermark)
    write_progress(r, keys, summary)
    return truth


def _seed_sliding(
    r: redis.Redis,
    keys: Keys,
    batch_id: int,
    starts: list[int],
    names: list[str],
    parts: dict[tuple[str, int], tuple[WindowAgg, Timeline]],
    times: np.ndarray,
    truth: Seeded,
) -> None:
    """The SLIDING rows a job writes from those windows' events, and their busiest interval.

    Each row merges the aggregates of the windows of its rolling interval and the timelines of
    the windows its peak intervals reach (as jobs/panes/windows.py does); `truth.busiest` is counted
    independently, interval by interval over every event time.
    """
    size, step = SLIDING.size_ms, SLIDING.slide_ms
    updates = []
    for end in [s + step for s in starts]:
        for svc in names:
            rolling = [
                parts[(svc, s)][0] for s in range(end - size, end, step) if (svc, s) in parts
            ]
            reach = range(end - SLIDING.reach_ms, end, step)
            agg = WindowAgg.merged(rolling)
            timeline = Timeline.merged([parts[(svc, s)][1] for s in reach if (svc, s) in parts])
            agg.states["timeline"] = timeline.framed(frame_of(SLIDING, end - size))
            updates.append(WindowUpdate(SLIDING.key, end - size, svc, agg.to_bytes()))
    write_batch(r, keys, SinkBatch(batch_id, updates))
    ts = np.sort(times)
    best = (-1, 0)
    for end in [s + step for s in starts]:
        for e in range(end - step + SLIDING.resolution_ms, end + 1, SLIDING.resolution_ms):
            n = int(np.searchsorted(ts, e) - np.searchsorted(ts, e - size))
            if n > best[0]:
                best = (n, e - size)
    truth.busiest = best
    truth.sliding_rows = len(starts)


def _summed(arrivals: list[ArrivalUpdate]) -> list[ArrivalUpdate]:
    """One update per (domain, window, service), as the job sends: a batch's counts summed."""
    total: dict[tuple[str, int, str], int] = {}
    for a in arrivals:
        total[(a.domain, a.start_ms, a.service)] = total.get((a.domain, a.start_ms, a.service), 0)
        total[(a.domain, a.start_ms, a.service)] += a.count
    return [ArrivalUpdate(d, s, svc, n, _arr(0, 0, s)) for (d, s, svc), n in total.items()]


def _arr(late: int, stragglers: int, proc_ms: int) -> dict[str, int]:
    return {"late": late, "stragglers": stragglers, "proc_ms": proc_ms}


def _progress(
    batch_id: int, batch_time: int, max_event: int, rows: int, watermark: int
) -> dict[str, object]:
    return {
        "batch_id": batch_id,
        "batch_time": batch_time,
        "watermark": max(watermark, 1),
        "max_event_time": max_event,
        "input_rows": rows,
        "input_rows_per_s": rows / 10.0,
        "processed_rows_per_s": rows / 0.3,
        "offsets": {"0": 1000 + batch_id, "1": 990 + batch_id, "2": 1010 + batch_id},
        "start_offsets": {"0": 900, "1": 880, "2": 905},
        "latest_offsets": {"0": 1000 + batch_id, "1": 995 + batch_id, "2": 1010 + batch_id},
        "batch_duration_ms": 300,
        "query_id": "q-1",
        "report_interval_ms": 1000,
        "allowed_lateness_ms": LATENESS_MS,
        # A plausible freshness: the commit 300 ms after the trigger, records up to ~1.5 s old.
        "freshness": {
            "batch_id": batch_id,
            "commit_time": batch_time + 300,
            "records": rows,
            "p50_ms": 700 + 37 * (batch_id % 7),
            "p99_ms": 1_200 + 53 * (batch_id % 5),
            "max_ms": 1_350 + 53 * (batch_id % 5),
        }
        if rows
        else None,
    }


def seeded_window(start: int, service: str) -> WindowUpdate:
    """One more window of `service` (50 events of 20 ms, 50 users), as the job writes it."""
    agg = WindowAgg()
    n = 50
    agg.add(np.full(n, 20.0), np.full(n, 200), np.array([f"u{i}" for i in range(n)]))
    return WindowUpdate(SPEC.key, start, service, agg.to_bytes())


@contextlib.contextmanager
def job_reporting(r: redis.Redis, keys: Keys) -> Iterator[None]:
    """A live job's status for the block's duration: touched every 0.5 s, as an idle job does."""
    alive = threading.Event()

    def report() -> None:
        while not alive.wait(0.5):
            touch_status(r, keys, time.time_ns() // 1_000_000)

    heartbeat = threading.Thread(target=report, daemon=True)
    heartbeat.start()
    try:
        yield
    finally:
        alive.set()
        heartbeat.join()
