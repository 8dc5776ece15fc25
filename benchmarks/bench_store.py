"""Redis bytes per (window, group), per retention tier, and the default retention's total.

    .venv/bin/python benchmarks/bench_store.py [--groups 10,1000,10000] [--minutes 70]
        [--large-from 5000] [--large-minutes 15] [--events 30] [--sweep-events 10,100]
        [--sweep-groups 200] [--batch-s 1] [--out-of-order 0.05] [--late 0.005]
        [--retention 6h,1m:7d,10m:7d,1h:90d] [--retention-size 2GB]

What a live job keeps in Redis per (window, group) (a group is a service here) in each retention
tier, and what the default retention (`6h,1m:7d,10m:7d,1h:90d`) adds up to for N services. Targets:
<= 1 KB per (window, group) and <= 2 GB in all for 1,000 services, printed beside the figures
(BENCHMARKS.md), not asserted. benchmarks/bench_soak.py follows 10 services over weeks with
a batch per minute; this one many services over an hour, with the batches of a live job.

Starts its own redis-server. For each N of `--groups` it writes `--minutes` of event time
(70: the 1-hour tier gets one roll-up, the 10-minute tier 7, the 1-minute tier 70) through the
job's own sink (jobs/sink/redis_sink.py `write_batch` with the retention tiers and each
batch's `BatchTime`, so the real roll-ups and expiry run). From `--large-from` services on it writes
`--large-minutes` (15) instead: 10,000 services take ~22 s and ~0.4 GB of Redis per minute of
event time here (a 2-minute run: 50 s, 0.83 GB, with the 3 minutes of late arrivals after it;
1,000 services x 15 minutes: 48 s, 0.74 GB), so ~6 minutes and ~6 GB in all. Such an N has no
1-hour roll-up: its total borrows that tier's bytes per (window, group) from the largest N that
has one (said under the table). The default run (10 and 1,000 services x 70 minutes, 10,000 x
15, the two sweeps at 200) takes ~12 minutes; its 1,000 services reach ~3.5 GB of Redis.

What is written is what the demo's job writes (cli/local/demo.py: `--window 10s --window
60s/sliding --allowed-lateness 30s --trigger 1s`, 4 state shards by default):

* a batch per `--batch-s` of event time (1 s, the demo's trigger; 10 s also works): the
  watermark in force is the event time of the batches before minus 30 s, the batch's
  timestamp the end of its interval; batch ids start at 1,000,000 (a job some days old);
* every (10 s window, service) holds `--events` events (30; `--sweep-events` 10 and 100 run
  too, at `--sweep-groups` services): lognormal latency (median 50 ms x a per-service factor,
  sigma 0.6), 2 % errors, 2 % without a user, users Zipf(1.1) of 10,000 (the generator's
  defaults, tidegauge/traffic/config.py: a 10 s window's HyperLogLog holds ~20 users at 30
  events), broker time = event time + 0-50 ms, + up to 5 s for 5 % (`--out-of-order`, the
  generator's default: stragglers), + 40-180 s for 0.5 % (`--late`; the generator's default is
  none), and a retry of 0.2 % 1-10 s later (duplicates);
* windows, late rows and stragglers by the job's own pane code (jobs/panes/columnar.py
  `add_events`, `window_aggs`: overdue shifts, the sliding rows' timelines), duplicates by
  jobs/panes/dedup.py `duplicate_windows`;
* `*` as the job sends it: each state shard's `*` part (the merge of its services' panes;
  jobs/summary/shards.py `shard_of`), which the sink stores in `tg:part` and merges (not the
  fallback that merges every stored service);
* arrivals per service and batch (processing and broker time), late events (`tg:late:events`)
  and each batch's progress (`tg:batches`, `tg:status`).

Shortcuts, none of which changes what is stored beyond noise: a window's rows are written once,
in the last batch before the watermark closes the window, with all that reached it by then (a
live job also writes them in every batch before, overwriting the same fields: only the doc's
`batch` differs); a pane's events late for its 10 s window are left out of its later sliding
rows too (the job adds them there); the first minute's sliding rows (less than a minute of
data) are not written. 10,000 named services need the job's `--max-services 10000` (the default
1,000 counts the others as `(other)`).

Then every key's `MEMORY USAGE` (samples=0), by family: `tg:win:` (JSON docs: only in stores
written before the aggregate became the one value), `tg:agg:` (sketches), `tg:late:`,
`tg:strag:`, `tg:dup:`, `tg:part:` (shard parts), `tg:arr:` (arrivals), indexes (`...:idx`,
`tg:win:specs`, `tg:services`, ...) and other; and by tier: the raw specs
`10000` and `sl60000-10000-100`, the roll-ups `r60000`, `r600000` and `r3600000`.

How to read the first table, a row per N and tier: `windows` stored; `B/(win,grp)` = the bytes
of every key of the tier / (windows x N), so `*` and the per-batch facts are in it; the share
of each family in it; `*/win` the `*` field's doc and aggregate (bytes per window); `agg`, `doc`
the mean length of one service's value (HSTRLEN): set beside `B/(win,grp)` x the JSON and
sketch shares, what Redis adds to a value (field name, hash entry, allocator size class).
Arrival rows give bytes per (10 s window, service) of each domain, the fields per window and
service (one field per batch, holding every service) and a field's length. Then one service's
aggregate by metric (mean bytes of each metric's encoding, "(entries)" the framing), and the
retention's total for N services:

    raw     B(10000) x 6h/10s + B(sliding) x 6h/10s          (2,160 windows of each)
  + tiers   B(r60000) x 7d/1m + B(r600000) x 7d/10m + B(r3600000) x 90d/1h
            (10,080, 1,008 and 2,160 windows)
  + arr     (B(processing) + B(broker)) x 6h/10s
    each x N; + the indexes (bytes per member x members kept) + the fixed keys (the late events
    and batch history at their caps of 10,000 and 2,000, status, retention, ...)

The sink runs with `--retention-size` (default 2GB, as the job's): where the budget binds, the
retention it put in force (`tg:retention`) and that one's total, extrapolated the same way, are
printed after the totals.

Prints the machine, progress lines, what each N wrote and how long it took, then the tables.
Nothing is asserted. Redis is stopped on exit and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import pyarrow as pa  # noqa: E402
import redis  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_redis  # noqa: E402
from jobs.panes.columnar import Plan, add_events, encode_late, window_aggs  # noqa: E402
from jobs.panes.dedup import duplicate_windows  # noqa: E402
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch  # noqa: E402
from jobs.sink.rollup import BatchTime  # noqa: E402
from jobs.sink.status import write_progress  # noqa: E402
from jobs.state.rows import ArrivalUpdate, LateUpdate, WindowCount, WindowUpdate  # noqa: E402
from jobs.summary.late_events import members, stored  # noqa: E402
from jobs.summary.shards import shard_of  # noqa: E402
from sketches.tg64 import hash32  # noqa: E402
from tidegauge.core.retention import (  # noqa: E402
    DEFAULT_RETENTION,
    DEFAULT_RETENTION_SIZE,
    Retention,
    parse_size,
)
from tidegauge.core.store import ALL_SERVICES, Keys  # noqa: E402
from tidegauge.core.window_agg import WindowAgg, empty_payload  # noqa: E402
from tidegauge.core.window_aggs import WindowAggs  # noqa: E402
from tidegauge.core.windows import WindowSpec, tumbling_start, tumbling_starts  # noqa: E402

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

S, M = 1_000, 60_000
W = 10 * S
TUMBLING = WindowSpec.tumbling(W)
#: The demo's `--window 60s/sliding` (cli/local/demo.py): rows per 10 s, peaks at 100 ms.
SLIDING = WindowSpec.sliding(60 * S, W, 100)
PLAN = Plan((TUMBLING, SLIDING))
LATENESS_MS = 30 * S
#: The job's default `--state-shards`: each sends its own `*` part.
SHARDS = 4
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z: hours and minutes start on it
FIRST_BATCH = 1_000_000
USERS, ZIPF, ANONYMOUS = 10_000, 1.1, 0.02
ERRORS, DUPLICATES = 0.02, 0.002
#: The targets (printed beside the figures, not asserted).
TARGET_PER_WINDOW = 1_000
TARGET_TOTAL, TARGET_SERVICES = 2e9, 1_000
LATE_EVENTS_MAX, BATCHES_KEPT = 10_000, 2_000


@dataclass
class Events:
    """Events as columns (one entry per event)."""

    codes: IntArray
    event_ms: IntArray
    broker_ms: IntArray
    latency: FloatArray
    status: IntArray
    has_user: npt.NDArray[np.bool_]
    user_hash: npt.NDArray[np.uint32]

    def take(self, rows: npt.ArrayLike) -> Events:
        """These rows, in this order."""
        idx = np.asarray(rows)
        return Events(*(getattr(self, f)[idx] for f in _EVENT_FIELDS))

    @classmethod
    def concat(cls, parts: Sequence[Events]) -> Events:
        """Several sets of events as one."""
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _EVENT_FIELDS))


_EVENT_FIELDS = ("codes", "event_ms", "broker_ms", "latency", "status", "has_user", "user_hash")


class Traffic:
    """Every service's events of one 10 s window at a time (see the module docstring)."""

    def __init__(
        self, n: int, events: int, seed: int, out_of_order: float = 0.05, late: float = 0.005
    ) -> None:
        self.n, self.events, self.out_of_order, self.late = n, events, out_of_order, late
        self.rng = np.random.default_rng(seed)
        self.median = 50.0 * np.exp(self.rng.normal(0.0, 0.5, n))
        cdf = np.cumsum(1.0 / np.arange(1, USERS + 1, dtype=np.float64) ** ZIPF)
        self.cdf = cdf / cdf[-1]
        ids = np.array([f"u{i:06d}" for i in range(1, USERS + 1)], dtype=object)
        self.user_hashes = hash32(ids)

    def pane(self, start: int) -> tuple[Events, Events]:
        """The pane's events, and the duplicates (retries) of some of them."""
        rng, k = self.rng, self.n * self.events
        codes = np.repeat(np.arange(self.n, dtype=np.int64), self.events)
        event_ms = start + rng.integers(0, W, k)
        delay = rng.integers(0, 51, k)
        u = rng.random(k)
        ooo = u < self.out_of_order
        delay[ooo] += rng.integers(1, 5_001, int(ooo.sum()))
        late = u >= 1.0 - self.late
        delay[late] += rng.integers(40_000, 180_001, int(late.sum()))
        users = np.searchsorted(self.cdf, rng.random(k))
        out = Events(
            codes,
            event_ms,
            event_ms + delay,
            np.round(rng.lognormal(np.log(self.median[codes]), 0.6), 3),
            np.where(rng.random(k) < ERRORS, 500, 200).astype(np.int64),
            rng.random(k) >= ANONYMOUS,
            self.user_hashes[users],
        )
        retried = np.flatnonzero(rng.random(k) < DUPLICATES)
        dups = out.take(retried)
        dups.broker_ms = dups.broker_ms + rng.integers(1_000, 10_001, len(retried))
        return out, dups


@dataclass
class Written:
    """What one run wrote, and how long it took."""

    batches: int = 0
    window_updates: int = 0
    arrivals: int = 0
    late_rows: int = 0
    stragglers: int = 0
    duplicates: int = 0
    sink_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    shards_with_services: int = 0


class Run:
    """Writes N services' windows, batch by batch, through the job's sink."""

    def __init__(
        self, r: redis.Redis, keys: Keys, n: int, events: int, minutes: float, args: Any
    ) -> None:
        self.r, self.keys, self.n = r, keys, n
        self.batch_ms = int(args.batch_s * S)
        self.names = [f"svc-{i:05d}" for i in range(n)]
        self.shard = np.array([shard_of(s, SHARDS) for s in self.names], np.int64)
        self.traffic = Traffic(n, events, args.seed, args.out_of_order, args.late)
        self.panes = int(minutes * M // W)
        self.config = SinkConfig(
            arrival_window_ms=W,
            retention=Retention.parse(args.retention),
            source=TUMBLING,
            shards=SHARDS,
            retention_size=parse_size(args.retention_size),
        )
        self.arriving: dict[int, list[Events]] = defaultdict(list)
        self.retries: dict[int, list[Events]] = defaultdict(list)
        #: pane start -> its events, until its window closes.
        self.open: dict[int, Events] = {}
        #: pane start -> its aggregates (services, then each shard's `*`), for the sliding rows.
        self.built: dict[int, WindowAggs] = {}
        self.offset = 0
        self.out = Written(shards_with_services=len(set(self.shard.tolist())))

    def batch_of(self, ms: IntArray) -> IntArray:
        """The batch each broker time arrives in (batch j: [T0 + j B, T0 + (j + 1) B))."""
        return (ms - T0) // self.batch_ms

    def close_batch(self, pane: int) -> int:
        """The last batch before the watermark closes the pane's 10 s window."""
        return (pane + W + LATENESS_MS - T0) // self.batch_ms - 1

    def run(self, progress_every_s: float = 30.0) -> Written:
        """Every batch, until every window is written and rolled up and every event arrived."""
        started = last_print = time.monotonic()
        per_pane = W // self.batch_ms
        last_event = T0 + self.panes * W
        j, end = 0, (last_event - T0 + LATENESS_MS) // self.batch_ms + 1
        while j <= end:
            frontier = T0 + j * self.batch_ms
            if j % per_pane == 0 and frontier < last_event:
                events, dups = self.traffic.pane(frontier)
                self.open[frontier] = events
                for target, bucket in ((self.arriving, events), (self.retries, dups)):
                    batch = self.batch_of(bucket.broker_ms)
                    order = np.argsort(batch, kind="stable")
                    cuts = np.flatnonzero(np.diff(batch[order])) + 1
                    for rows in np.split(order, cuts):
                        if len(rows):
                            target[int(batch[rows[0]])].append(bucket.take(rows))
                    if len(batch):
                        end = max(end, int(batch.max()))
            self.batch(j, frontier)
            j += 1
            now = time.monotonic()
            if now - last_print >= progress_every_s:
                last_print = now
                done = min(frontier, last_event) - T0
                print(
                    f"    {done / M:5.1f} of {self.panes * W / M:g} min of event time, batch "
                    f"{j:,}, {now - started:.0f}s; sink median "
                    f"{statistics.median(self.out.sink_ms[-1000:]):.1f} ms per batch",
                    flush=True,
                )
        self.out.seconds = time.monotonic() - started
        return self.out

    def batch(self, j: int, frontier: int) -> None:
        """One batch: the events arriving in it, the windows it closes, then the sink."""
        watermark, proc = frontier - LATENESS_MS, frontier + self.batch_ms
        batch_id = FIRST_BATCH + j
        parts = self.arriving.pop(j, [])
        events = Events.concat(parts) if parts else None
        arrivals: list[ArrivalUpdate] = []
        late: list[LateUpdate] = []
        stragglers: list[WindowCount] = []
        late_events: dict[str, int] = {}
        if events is not None:
            arrivals = self._arrivals(events, watermark, frontier, proc)
            late, stragglers = self._overdue(events, watermark, frontier)
            late_events = self._late_events(events, watermark, batch_id)
        duplicates = self._duplicates(j, watermark)
        windows: list[WindowUpdate] = []
        for start in [p for p in self.open if self.close_batch(p) == j]:
            windows += self._close(start, j)
        t = time.perf_counter()
        write_batch(
            self.r,
            self.keys,
            SinkBatch(
                batch_id,
                windows,
                late=late,
                stragglers=stragglers,
                duplicates=duplicates,
                arrivals=arrivals,
                late_events=late_events or None,
                at=BatchTime(batch_id, watermark, proc),
            ),
            self.config,
        )
        self.out.sink_ms.append((time.perf_counter() - t) * 1000)
        rows = 0 if events is None else len(events.codes)
        self.offset += rows
        write_progress(self.r, self.keys, _progress(batch_id, proc, watermark, rows, self.offset))
        self.out.batches += 1
        self.out.window_updates += len(windows)
        self.out.arrivals += len(arrivals)
        self.out.late_rows += len(late)
        self.out.stragglers += len(stragglers)
        self.out.duplicates += len(duplicates)

    def _arrivals(
        self, ev: Events, watermark: int, frontier: int, proc: int
    ) -> list[ArrivalUpdate]:
        """Each service's events of the batch by processing and broker time (one window each)."""
        end = tumbling_starts(ev.event_ms, W) + W
        late = end <= watermark
        strag = ~late & (end <= frontier)
        n = self.n
        count = np.bincount(ev.codes, minlength=n)
        n_late = np.bincount(ev.codes[late], minlength=n)
        n_strag = np.bincount(ev.codes[strag], minlength=n)
        p_start, b_start = tumbling_start(proc, W), tumbling_start(frontier, W)
        out = []
        nz = np.flatnonzero(count)
        for g, c, lt, st in zip(
            nz.tolist(), count[nz].tolist(), n_late[nz].tolist(), n_strag[nz].tolist(), strict=True
        ):
            metrics = {"late": lt, "stragglers": st, "proc_ms": proc}
            out.append(ArrivalUpdate("processing", p_start, self.names[g], c, metrics))
            out.append(ArrivalUpdate("broker", b_start, self.names[g], c, metrics))
        return out

    def _overdue(
        self, ev: Events, watermark: int, frontier: int
    ) -> tuple[list[LateUpdate], list[WindowCount]]:
        """Late rows and stragglers of every spec, by the job's own pane arithmetic.

        Only events whose pane ended at or before the frontier can be either (any window
        holding a pane ends at or after it), so only they go through `add_events`.
        """
        sel = np.flatnonzero(tumbling_starts(ev.event_ms, W) + W <= frontier)
        if not len(sel):
            return [], []
        e = ev.take(sel)
        pb = add_events(
            PLAN,
            e.codes,
            e.event_ms,
            e.latency,
            e.status,
            e.has_user,
            e.user_hash[e.has_user],
            watermark,
            e.broker_ms.astype(np.float64),
            frontier,
        )
        specs = [s.key for s in PLAN.specs]
        late = [
            LateUpdate(specs[s], w, self.names[g], c, blob)
            for g, s, w, c, blob in zip(
                pb.late_service.tolist(),
                pb.late_spec.tolist(),
                pb.late_start.tolist(),
                pb.late_count.tolist(),
                encode_late(pb),
                strict=True,
            )
            if w >= T0  # the first minute's sliding rows are not written
        ]
        stragglers = [
            WindowCount(specs[s], w, self.names[g], c)
            for g, s, w, c in zip(
                pb.straggler_service.tolist(),
                pb.straggler_spec.tolist(),
                pb.straggler_start.tolist(),
                pb.straggler_count.tolist(),
                strict=True,
            )
            if w >= T0
        ]
        return late, stragglers

    def _late_events(self, ev: Events, watermark: int, batch_id: int) -> dict[str, int]:
        """`tg:late:events` members of the batch's events late for their 10 s window."""
        rows = np.flatnonzero(tumbling_starts(ev.event_ms, W) + W <= watermark)
        if not len(rows):
            return {}
        e = ev.take(rows[-LATE_EVENTS_MAX:])
        k = len(e.codes)
        ids = self.traffic.rng.integers(0, 2**63, (k, 2))
        cols: dict[str, Any] = {
            "partition": e.codes % 3,
            "offset": self.offset + np.arange(k, dtype=np.int64),
            "kafka_ms": e.broker_ms.astype(np.float64),
            "event_ms": e.event_ms,
            "event_id": pa.array([f"{a:016x}{b:016x}" for a, b in ids.tolist()]),
            "clock_offset_ms": np.full(k, np.nan),
            "service": pa.array([self.names[g] for g in e.codes.tolist()], pa.string()),
        }
        return members(stored(cols, watermark, W), batch_id)

    def _duplicates(self, j: int, watermark: int) -> list[WindowCount]:
        """The batch's retries, counted in each open window of theirs (jobs/panes/dedup.py)."""
        parts = self.retries.pop(j, [])
        if not parts:
            return []
        e = Events.concat(parts)
        out = []
        for g in np.unique(e.codes).tolist():
            mine = e.codes == g
            counts = duplicate_windows(e.event_ms[mine], e.has_user[mine], PLAN.specs, watermark)
            for (spec, start), c in sorted(counts.items()):
                if start >= T0:
                    out.append(WindowCount(spec, start, self.names[g], c))
        return out

    def _close(self, start: int, j: int) -> list[WindowUpdate]:
        """The pane's 10 s rows and the sliding rows ending with it, services and shard parts.

        The pane holds its events that reached it before its window closed (batch <= j); its
        overdue values are the frontier of their batch minus the pane's end, as `add_events`
        computes them.
        """
        ev = self.open.pop(start)
        batch = self.batch_of(ev.broker_ms)
        kept = np.flatnonzero(batch <= j)
        ev, batch = ev.take(kept), batch[kept]
        frontier = T0 + batch * self.batch_ms
        due = frontier >= start + W
        n = self.n
        panes = WindowAggs.build(
            n,
            ev.codes,
            ev.latency,
            ev.status,
            ev.codes[ev.has_user],
            ev.user_hash[ev.has_user],
            (ev.broker_ms - ev.event_ms).astype(np.float64),
            ev.codes[due],
            (frontier[due] - start - W).astype(np.float64),
            None,
            tumbling_starts(ev.event_ms, PLAN.timeline_ms),
        )
        stars = panes.combine(self.shard, SHARDS)  # each shard's `*`: its services merged
        self.built[start] = WindowAggs.concat([panes, stars])
        for old in [p for p in self.built if p <= start - SLIDING.reach_ms]:
            del self.built[old]
        order = sorted(self.built)
        table = WindowAggs.concat([self.built[p] for p in order])
        width = n + SHARDS
        pane_start = np.repeat(np.array(order, np.int64), width)
        row = {p: i * width for i, p in enumerate(order)}
        groups = list(range(width))
        windows = [(0, start, [row[start] + g]) for g in groups]
        end = start + W
        if end - SLIDING.size_ms >= T0:
            reach = [p for p in order if end - SLIDING.reach_ms <= p < end]
            windows += [(1, end - SLIDING.size_ms, [row[p] + g for p in reach]) for g in groups]
        out = window_aggs(PLAN, table, pane_start, windows)
        counts = out.ints["count"].tolist()
        updates = []
        for k, blob in enumerate(out.encode()):
            if not counts[k]:
                continue
            s, w, _ = windows[k]
            g = groups[k % width]
            spec = PLAN.specs[s].key
            if g < n:
                updates.append(WindowUpdate(spec, w, self.names[g], blob))
            else:
                updates.append(WindowUpdate(spec, w, ALL_SERVICES, blob, shard=g - n))
        return updates


def _progress(
    batch_id: int, batch_time: int, watermark: int, rows: int, offset: int
) -> dict[str, Any]:
    """A plausible batch summary (jobs/sink/status.py `progress_summary` writes more fields)."""
    return {
        "batch_id": batch_id,
        "batch_time": batch_time,
        "watermark": watermark,
        "watermark_in_force": watermark,
        "max_event_time": batch_time - 1,
        "input_rows": rows,
        "input_rows_per_s": float(rows),
        "processed_rows_per_s": rows / 0.4,
        "offsets": {"0": offset // 3, "1": offset // 3, "2": offset - 2 * (offset // 3)},
        "start_offsets": {"0": 0, "1": 0, "2": 0},
        "latest_offsets": {"0": offset // 3, "1": offset // 3, "2": offset - 2 * (offset // 3)},
        "batch_duration_ms": 400,
        "durations_ms": {"addBatch": 320, "getBatch": 2, "latestOffset": 3, "queryPlanning": 20},
        "query_id": "bench-store",
        "report_interval_ms": 1000,
        "allowed_lateness_ms": LATENESS_MS,
        "freshness": {
            "batch_id": batch_id,
            "commit_time": batch_time + 400,
            "records": rows,
            "p50_ms": 800,
            "p99_ms": 1400,
            "max_ms": 1500,
        }
        if rows
        else None,
    }


# --- measuring ---------------------------------------------------------------------------------

#: The tiers, in table order: the raw specs, then the roll-ups.
RAW_SPECS = (TUMBLING.key, SLIDING.key)
FAMILIES = ("win", "agg", "late", "strag", "dup", "part")


@dataclass
class Tier:
    """One tier's (or arrival domain's) keys: bytes by family, windows, value lengths."""

    name: str
    windows: int = 0
    bytes: Counter[str] = field(default_factory=Counter)
    agg_len: float = float("nan")
    doc_len: float = float("nan")
    star_len: float = float("nan")
    part_per_window: float = float("nan")
    #: metric -> mean bytes of one service's encoding; "(entries)": the aggregate's own framing.
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Bytes of every key of the tier."""
        return sum(self.bytes.values())

    def per(self, n: int) -> float:
        """Bytes per (window, group)."""
        return self.total / (self.windows * n) if self.windows else float("nan")


@dataclass
class Measured:
    """Every key of the store, classified."""

    n: int
    events: int
    minutes: float
    tiers: dict[str, Tier]
    arrivals: dict[str, Tier]
    #: index key -> (bytes, members)
    indexes: dict[str, tuple[int, int]]
    other: Counter[str]
    #: the lists kept to a length ("late:events", "batches") -> (bytes, members)
    capped: dict[str, tuple[int, int]]
    used_memory: int
    keys: int
    written: Written
    #: The retention the sink had in force at the end (`--retention` fitted to the budget).
    in_force: str = ""


def classify(key: str) -> tuple[str, str]:
    """(what, detail): ("tier", "spec|family"), ("arr", domain), ("index", key), ("other", key)."""
    parts = key.split(":")
    if parts[-1] == "idx" or key.endswith((":win:specs", ":arr:sizes", ":services", ":seen")):
        return "index", key
    if len(parts) == 4 and parts[1] in FAMILIES and parts[3].isdigit():
        return "tier", f"{parts[2]}|{parts[1]}"
    if len(parts) == 5 and parts[1] == "arr" and parts[4].isdigit():
        return "arr", parts[2]
    return "other", ":".join(parts[1:3])


def measure(
    r: redis.Redis, keys: Keys, n: int, events: int, minutes: float, written: Written
) -> Measured:
    """MEMORY USAGE of every key, by family and tier, and value lengths from samples."""
    until = T0 + int(minutes * M // W) * W
    names: list[str] = [k.decode() for k in r.scan_iter(match=f"{keys.prefix}:*", count=5_000)]
    usage: list[int] = []
    for i in range(0, len(names), 2_000):
        pipe = r.pipeline(transaction=False)
        for name in names[i : i + 2_000]:
            pipe.memory_usage(name, samples=0)
        usage += [int(u or 0) for u in pipe.execute()]
    tiers: dict[str, Tier] = {}
    arrivals: dict[str, Tier] = {}
    starts: dict[str, set[int]] = defaultdict(set)
    index_keys: list[tuple[str, int]] = []
    arrival_keys: dict[str, list[str]] = defaultdict(list)
    other: Counter[str] = Counter()
    for name, used in zip(names, usage, strict=True):
        what, detail = classify(name)
        if what == "tier":
            spec, family = detail.split("|")
            tiers.setdefault(spec, Tier(spec)).bytes[family] += used
            if family == "agg":
                starts[spec].add(int(name.rsplit(":", 1)[1]))
        elif what == "arr" and int(name.rsplit(":", 1)[1]) >= until:
            other["arr (after the last event time)"] += used  # only late events arrive then
        elif what == "arr":
            arr = arrivals.setdefault(detail, Tier(f"arr:{detail}"))
            arr.bytes["arr"] += used
            arr.windows += 1
            arrival_keys[detail].append(name)
        elif what == "index":
            index_keys.append((name, used))
        else:
            other[detail] += used
    pipe = r.pipeline(transaction=False)
    for name, _ in index_keys:
        pipe.type(name)
    types = [t.decode() for t in pipe.execute()]
    pipe = r.pipeline(transaction=False)
    for (name, _), kind in zip(index_keys, types, strict=True):
        if kind == "zset":
            pipe.zcard(name)
        elif kind == "set":
            pipe.scard(name)
        else:
            pipe.exists(name)
    indexes = {
        name: (used, int(c)) for (name, used), c in zip(index_keys, pipe.execute(), strict=True)
    }
    for spec, tier in tiers.items():
        tier.windows = len(starts[spec])
        _sample(r, keys, tier, sorted(starts[spec]), n)
    for domain, arr in arrivals.items():
        picked = sorted(arrival_keys[domain])[:: max(1, len(arrival_keys[domain]) // 24)]
        pipe = r.pipeline(transaction=False)
        for name in picked:
            pipe.hlen(name)
            pipe.hrandfield(name, 50, withvalues=True)
        got = pipe.execute()
        arr.agg_len = statistics.fmean(got[0::2]) / n  # fields per (window, service)
        values = [len(v) for pairs in got[1::2] for v in pairs[1::2]]
        arr.doc_len = statistics.fmean(values) if values else float("nan")
    capped = {
        "late:events": (other["late:events"], int(r.zcard(keys.late_events))),
        "batches": (other["batches"], int(r.zcard(keys.batches))),
    }
    return Measured(
        n,
        events,
        minutes,
        tiers,
        arrivals,
        indexes,
        other,
        capped,
        int(r.info("memory")["used_memory"]),
        len(names),
        written,
        _text(r.hget(keys.retention, "retention")),
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _sample(r: redis.Redis, keys: Keys, tier: Tier, starts: list[int], n: int) -> None:
    """Value lengths (HSTRLEN) of sampled windows and services, and a metric breakdown."""
    if not starts:
        return
    picked = [starts[i] for i in np.linspace(0, len(starts) - 1, min(24, len(starts))).astype(int)]
    services = [f"svc-{i:05d}" for i in np.linspace(0, n - 1, min(48, n)).astype(int).tolist()]
    pipe = r.pipeline(transaction=False)
    for s in picked:
        for svc in [*services, ALL_SERVICES]:
            pipe.hstrlen(keys.window_aggs(tier.name, s), svc)
            pipe.hstrlen(keys.window(tier.name, s), svc)
        pipe.memory_usage(keys.window_parts(tier.name, s), samples=0)
    got = iter(pipe.execute())
    aggs, docs, stars, parts = [], [], [], []
    for _ in picked:
        for svc in [*services, ALL_SERVICES]:
            a, d = int(next(got)), int(next(got))
            if svc == ALL_SERVICES:
                stars.append(a + d)
            elif a:
                aggs.append(a)
                docs.append(d)
        parts.append(int(next(got) or 0))
    tier.agg_len = statistics.fmean(aggs) if aggs else float("nan")
    tier.doc_len = statistics.fmean(docs) if docs else float("nan")
    tier.star_len = statistics.fmean(stars) if stars else float("nan")
    tier.part_per_window = statistics.fmean(parts)
    pipe = r.pipeline(transaction=False)
    for s in picked[:8]:
        for svc in services[:24]:
            pipe.hget(keys.window_aggs(tier.name, s), svc)
    sizes: dict[str, list[int]] = defaultdict(list)
    for blob in pipe.execute():
        if not blob:
            continue
        agg = WindowAgg.from_bytes(blob)
        payload = 0
        for m in agg.registered:
            encoded = m.encode(agg.states[m.name])
            k = 0 if encoded == empty_payload(m) else len(encoded)  # an empty state: no entry
            payload += k
            sizes[m.name].append(k)
        sizes["(entries)"].append(len(blob) - payload)
    tier.metrics = {name: statistics.fmean(v) for name, v in sizes.items()}


# --- the default retention's total -------------------------------------------------------------


@dataclass(frozen=True)
class Total:
    """The default retention's bytes for N services, by part, and which figures were borrowed."""

    n: int
    parts: dict[str, float]
    borrowed: list[str]

    @property
    def total(self) -> float:
        """Every part."""
        return sum(self.parts.values())


def kept_windows(retention: Retention) -> dict[str, int]:
    """Spec key -> windows the retention keeps of it (the raw TTL for raw specs)."""
    assert retention.raw_ttl_ms is not None
    raw = retention.raw_ttl_ms // W
    out = {TUMBLING.key: raw, SLIDING.key: retention.raw_ttl_ms // SLIDING.slide_ms}
    for t in retention.tiers:
        out[t.spec.key] = t.ttl_ms // t.size_ms
    return out


def extrapolate(m: Measured, everything: Sequence[Measured], retention: Retention) -> Total:
    """Bytes per (window, group) x windows kept x N, per tier and arrival domain; see docstring."""
    kept = kept_windows(retention)
    parts: dict[str, float] = {}
    borrowed: list[str] = []
    for spec, windows in kept.items():
        tier = m.tiers.get(spec)
        per = tier.per(m.n) if tier is not None else float("nan")
        if not per == per:  # not measured in this run: the largest N that has it
            donors = [x for x in everything if spec in x.tiers and x.tiers[spec].windows]
            if not donors:
                borrowed.append(f"{spec} measured in no run: left out of the total")
                continue
            donor = max(donors, key=lambda x: x.n)
            per = donor.tiers[spec].per(donor.n)
            borrowed.append(f"{spec} borrowed from N={donor.n:,}")
        parts[spec] = per * windows * m.n
    raw = kept[TUMBLING.key]
    for domain, arr in m.arrivals.items():
        parts[f"arr:{domain}"] = arr.per(m.n) * raw * m.n
    index = 0.0
    for name, (used, count) in m.indexes.items():
        of = next((s for s in kept if f":{s}:" in name), None)
        if of is not None and count:
            index += used / count * kept[of]
        elif ":arr:" in name and name.endswith(":idx") and count:
            index += used / count * raw
        else:
            index += used
    parts["indexes"] = index
    fixed = float(sum(m.other.values()))
    for name, cap in (("late:events", LATE_EVENTS_MAX), ("batches", BATCHES_KEPT)):
        used, count = m.capped.get(name, (0, 0))
        if count:  # a capped list at its cap
            fixed += used / count * cap - used
    parts["fixed"] = fixed
    return Total(m.n, parts, borrowed)


# --- output ------------------------------------------------------------------------------------


def _tier_rows(m: Measured) -> Iterator[list[str]]:
    n = m.n
    for spec in _specs(m):
        t = m.tiers[spec]
        if not t.windows:
            continue
        total = t.total or 1
        shares = [f"{100 * t.bytes[f] / total:.0f}%" for f in FAMILIES]
        yield [
            f"{n:,}",
            str(m.events),
            f"{m.minutes:g}",
            spec,
            f"{t.windows:,}",
            f"{t.per(n):,.0f}",
            *shares,
            f"{t.star_len:,.0f}",
            f"{t.agg_len:,.0f}",
            f"{t.doc_len:,.0f}",
        ]
    for domain, a in sorted(m.arrivals.items()):
        yield [f"{n:,}", str(m.events), f"{m.minutes:g}", f"arr:{domain}", f"{a.windows:,}"] + [
            f"{a.per(n):,.0f}",
            *["-"] * (len(FAMILIES) + 1),
            f"{a.agg_len:,.1f} fields",
            f"{a.doc_len:,.0f}",
        ]


def _specs(m: Measured) -> list[str]:
    """The measured tiers: the raw specs, then the roll-ups, finest first."""
    raw = [s for s in RAW_SPECS if s in m.tiers]
    return raw + sorted((s for s in m.tiers if s not in RAW_SPECS), key=_size)


def _size(spec: str) -> int:
    return WindowSpec.from_key(spec).size_ms


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Right-aligned columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def report(results: Sequence[Measured], retention: Retention) -> None:
    """The final tables."""
    header = ["N", "events", "min", "tier", "windows", "B/(win,grp)"]
    header += [{"win": "JSON", "agg": "sketch"}.get(f, f) for f in FAMILIES]
    header += ["*/win", "agg", "doc"]
    rows = [row for m in results for row in _tier_rows(m)]
    print(
        f"\nbytes per (window, group) by tier (target <= {TARGET_PER_WINDOW:,} B), each key "
        "family's share of them; */win: the `*` doc and aggregate per window; agg, doc: one "
        "service's value (HSTRLEN; arrivals: one service's fields per window, a value's bytes):"
    )
    print(table(header, rows))
    print("\none service's aggregate by metric, mean bytes of each encoding (tg:agg samples):")
    names = ["count", "errors", "latency", "users", "lateness", "overdue", "timeline", "(entries)"]
    mrows = []
    for m in results:
        for spec in _specs(m):
            t = m.tiers[spec]
            if t.metrics:
                mrows.append(
                    [f"{m.n:,}", str(m.events), spec]
                    + [f"{t.metrics.get(k, 0):,.0f}" for k in names]
                )
    print(table(["N", "events", "tier", *names], mrows))
    kept = kept_windows(retention)
    print(
        f"\nthe retention {retention.text()} for N services: bytes per (window, group) x windows "
        f"kept x N ({', '.join(f'{k} {v:,}' for k, v in kept.items())}; arrivals "
        f"{kept[TUMBLING.key]:,} windows per domain) + indexes (bytes per member x members kept) "
        "+ the fixed keys as measured:"
    )
    columns = [*kept, "arr:processing", "arr:broker", "indexes", "fixed"]
    trows = []
    notes = []
    for m in results:
        tot = extrapolate(m, results, retention)
        cells = [_gb(tot.parts.get(c, float("nan"))) for c in columns]
        per_k = tot.total / m.n * TARGET_SERVICES
        trows.append(
            [
                f"{m.n:,}",
                str(m.events),
                *cells,
                _gb(tot.total),
                _gb(per_k),
                f"{tot.total / m.n:,.0f}",
            ]
        )
        if tot.borrowed:
            notes.append(f"N={m.n:,}, {m.events} events: {'; '.join(tot.borrowed)}")
    print(
        table(
            ["N", "events", *columns, "total", f"per {TARGET_SERVICES:,} svc", "B per svc"],
            trows,
        )
    )
    for note in notes:
        print(f"  {note}")
    print(
        f"  target: <= {TARGET_TOTAL / 1e9:g} GB for {TARGET_SERVICES:,} services "
        "(per 1,000 svc: that N's total / N x 1,000)"
    )
    fitted = [m for m in results if m.in_force and m.in_force != retention.text()]
    if fitted:
        print(
            "\nthe retention the sink put in force to fit --retention-size "
            "(tg:retention at the end), and its total the same way:"
        )
        frows = []
        for m in fitted:
            tot = extrapolate(m, results, Retention.parse(m.in_force))
            frows.append([f"{m.n:,}", str(m.events), m.in_force, _gb(tot.total)])
        print(table(["N", "events", "in force", "total"], frows))
    print("\nwritten, and how long it took:")
    wrows = []
    for m in results:
        w = m.written
        wrows.append(
            [
                f"{m.n:,}",
                str(m.events),
                f"{m.minutes:g}",
                f"{w.batches:,}",
                f"{w.window_updates:,}",
                f"{w.arrivals:,}",
                f"{w.late_rows:,}",
                f"{w.stragglers:,}",
                f"{w.duplicates:,}",
                f"{statistics.median(w.sink_ms):.1f}" if w.sink_ms else "-",
                f"{max(w.sink_ms):.0f}" if w.sink_ms else "-",
                f"{w.seconds:.0f}",
                f"{m.keys:,}",
                f"{m.used_memory / 1e6:,.1f}",
                f"{sum(_all_bytes(m)) / 1e6:,.1f}",
            ]
        )
    print(
        table(
            [
                "N",
                "events",
                "min",
                "batches",
                "windows",
                "arrivals",
                "late",
                "strag",
                "dup",
                "sink ms med",
                "max",
                "run s",
                "keys",
                "used_memory MB",
                "keys MB",
            ],
            wrows,
        )
    )


def _all_bytes(m: Measured) -> Iterator[int]:
    for t in m.tiers.values():
        yield t.total
    for a in m.arrivals.values():
        yield a.total
    yield sum(u for u, _ in m.indexes.values())
    yield sum(m.other.values())


def _gb(x: float) -> str:
    if x != x:
        return "-"
    return f"{x / 1e9:,.2f} GB" if x >= 1e8 else f"{x / 1e6:,.1f} MB"


def _counts(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("comma-separated integers") from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("positive integers")
    return values


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--groups", type=_counts, default=[10, 1_000, 10_000], help="services (N)")
    p.add_argument("--minutes", type=float, default=70, help="minutes of event time")
    p.add_argument("--large-from", type=int, default=5_000, help="N from which --large-minutes")
    p.add_argument("--large-minutes", type=float, default=15)
    p.add_argument("--events", type=int, default=30, help="events per (10 s window, service)")
    p.add_argument("--sweep-events", type=_counts, default=[10, 100], help="also these events")
    p.add_argument("--sweep-groups", type=int, default=200, help="... at this N ('0': none)")
    p.add_argument("--batch-s", type=int, default=1, choices=(1, 2, 5, 10))
    p.add_argument("--retention", default=DEFAULT_RETENTION)
    p.add_argument(
        "--retention-size",
        default=DEFAULT_RETENTION_SIZE,
        help="the job's byte budget, as the sink applies it ('none': off)",
    )
    p.add_argument("--out-of-order", type=float, default=0.05, help="share 0-5 s behind")
    p.add_argument("--late", type=float, default=0.005, help="share 40-180 s behind")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    retention = Retention.parse(args.retention)
    if retention.raw_ttl_ms is None:
        p.error("--retention forever keeps everything: nothing to extrapolate")
    configs = [(n, args.events) for n in args.groups]
    if args.sweep_groups > 0:
        configs += [(args.sweep_groups, e) for e in args.sweep_events if e != args.events]
    signal.signal(signal.SIGTERM, _interrupt)  # the same clean-up as Ctrl-C
    signal.signal(signal.SIGINT, _interrupt)
    print(describe(("numpy", "redis")))
    server = start_redis()
    print(
        f"redis-server {server.address} (pid {server.proc.pid}); retention {retention.text()}; "
        f"a batch per {args.batch_s} s of event time, allowed lateness {LATENESS_MS // S} s; "
        f"{args.out_of_order:.1%} of events out of order, {args.late:.1%} late",
        flush=True,
    )
    keys = Keys("tg")
    results: list[Measured] = []
    try:
        r = redis.Redis(host=server.host, port=server.port)
        print(f"redis {r.info('server')['redis_version']}", flush=True)
        for n, events in configs:
            minutes = args.large_minutes if n >= args.large_from else args.minutes
            print(
                f"N={n:,} services, {events} events per (10 s window, service), "
                f"{minutes:g} min of event time:",
                flush=True,
            )
            r.flushall()
            written = Run(r, keys, n, events, minutes, args).run()
            t = time.monotonic()
            m = measure(r, keys, n, events, minutes, written)
            print(
                f"  N={n:,}: wrote {written.batches:,} batches in {written.seconds:.0f}s (sink "
                f"median {statistics.median(written.sink_ms):.1f} ms per batch, max "
                f"{max(written.sink_ms):.0f}); measured {m.keys:,} keys in "
                f"{time.monotonic() - t:.1f}s; used_memory {m.used_memory / 1e6:,.1f} MB; "
                f"state shards with services: {written.shards_with_services} of {SHARDS}",
                flush=True,
            )
            for spec, tier in sorted(m.tiers.items(), key=lambda kv: _size(kv[0])):
                if tier.windows:
                    print(
                        f"    {spec:>18}: {tier.windows:,} windows, {tier.per(n):,.0f} B per "
                        f"(window, group)",
                        flush=True,
                    )
            results.append(m)
    except KeyboardInterrupt:
        print("\ninterrupted; stopping redis", file=sys.stderr)
    finally:
        server.stop()
    if results:
        report(results, retention)
    return 0


if __name__ == "__main__":
    sys.exit(main())
