"""Cost curves of the job: how throughput, sink time, Redis bytes and a dashboard refresh change
with the number of services and the number of Kafka partitions.

    .venv/bin/python benchmarks/bench_curves.py [--services 10,100,1000] [--partitions 3,12]
        [--events 200000] [--per-trigger 50000] [--minutes 10] [--refreshes 10] [--master local[2]]

Configurations: every `--services` count on the first `--partitions` count, then every other
`--partitions` count with the first `--services` count. The defaults give 10, 100 and 1,000
services on 3 partitions, and 10 services on 12 partitions (to set beside 10 on 3).

Starts its own broker (Tansu) and redis-server and one SparkSession for every configuration
(starting Spark is not what is measured). Each configuration gets a fresh topic, Redis database
(db 0, 1, ...: at most 16) and checkpoint. Its `--events` seeded events (the generator of
`tidegauge produce`, fast pace; services named s0000, s0001, ... of equal weight, each with the
generator's fallback latency) cover `--minutes` of event time, i.e. `--minutes` x 6 windows of the
job's default 10 s tumbling window, plus heartbeats (one per partition per second of event time)
and the generator's default 5 % out-of-order events. Then the job runs in-process as
`benchmarks/bench_job.py` runs it (`jobs.pipeline.run_job`, `available-now`, `--per-trigger`
records per trigger at most, `local[2]`, 2 shuffle partitions) and drains the topic.

Figures per configuration:
  * rows/s: records read (events and heartbeats) / sum of batch durations, without the first batch
    that has rows (it starts the query's Python workers): `bench_job.throughput`.
  * batches: micro-batches the query ran, no-data batches included.
  * sink ms: wall time of each `jobs.sink.redis_sink.write_batch` call, median and p95 (nearest
    rank) over the query's batches. Measured on the driver, in this process, by wrapping the name
    `jobs.pipeline.write_batch` that the batch writer calls: it covers reading the stored aggregates
    back for the `*` merge, the merges, and the MULTI/EXEC; not the collect of the batch's result to
    the driver nor its decoding. For context the line also shows the median of Spark's `addBatch`
    phase (the stateful step, the collect and the sink) from the job's batch history
    (`tidegauge.core.store.read_batches`), and the sink's us per window update.
  * updates/batch: window updates, i.e. (window, service) rows, handed to the sink per batch
    (mean over the batches).
  * bytes/window: Redis `MEMORY USAGE key SAMPLES 0` (exact) of each stored window's two hashes,
    `tg:win:{spec}:{start}` (JSON metrics) and `tg:agg:{spec}:{start}` (serialised WindowAggs),
    their `*` fields included, summed over every window and divided by the number of stored
    (window, service) entries, `*` not counted. The indexes, arrival series, batch history and
    status are not in it. agg bytes: mean length of the stored WindowAgg of one (window,
    service), `*` not counted.
  * refresh ms: server time of one dashboard refresh (`bench_dashboard.refresh`: every Redis read
    of `dashboard.data.read_snapshot`, the frames, figures and figure JSON) with the page's
    default filters (15 min charts and latency range, all services) against the database the job
    just filled; median of `--refreshes` refreshes sharing a closed-window memo as the app does.
    The line also shows the first refresh (empty memo) and the Redis-read share of the median.

Prints the machine, a line per configuration and a final table; nothing is asserted. The first
configuration also warms the JVM up: read the curves with that in mind, or repeat it last.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

import jobs.pipeline  # noqa: E402
from benchmarks.bench_dashboard import refresh  # noqa: E402
from benchmarks.bench_job import throughput  # noqa: E402
from benchmarks.machine import describe  # noqa: E402
from cli.local.services import Service, start_broker, start_redis  # noqa: E402
from dashboard import data  # noqa: E402
from jobs.runtime.session import build_session  # noqa: E402
from jobs.sink.redis_sink import SinkBatch  # noqa: E402
from tidegauge.core.closed_windows import ClosedWindows  # noqa: E402
from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings  # noqa: E402
from tidegauge.core.store import ALL_SERVICES, Keys, read_batches, read_window_specs  # noqa: E402
from tidegauge.traffic.config import GeneratorConfig  # noqa: E402
from tidegauge.traffic.producer import produce  # noqa: E402
from tidegauge.traffic.topics import ensure_topic  # noqa: E402

#: Event time starts here (fixed, so runs compare): 2026-05-28T20:26:40Z. The dashboard's
#: event-time ranges end at the newest window, not at the wall clock, so the past is fine.
START_MS = 1_780_000_000_000
#: redis-server's default number of databases: one per configuration.
MAX_CONFIGS = 16


@dataclass(frozen=True)
class Result:
    """The figures of one configuration (ms, bytes, rows/s)."""

    services: int
    partitions: int
    events: int
    rows: int
    rows_per_s: float
    batches: int
    sink_med_ms: float
    sink_p95_ms: float
    updates_per_batch: float
    us_per_update: float
    add_batch_med_ms: float
    bytes_per_window: float
    agg_bytes: float
    stored: int
    refresh_med_ms: float
    refresh_read_ms: float
    refresh_first_ms: float

    def line(self) -> str:
        """The per-configuration line."""
        return (
            f"{self.services:,} services, {self.partitions} partitions: {self.events:,} events "
            f"({self.rows:,} rows), {self.rows_per_s:,.0f} rows/s without the first batch, "
            f"{self.batches} batches; sink ms median {self.sink_med_ms:.1f}, p95 "
            f"{self.sink_p95_ms:.1f} ({self.updates_per_batch:,.0f} window updates/batch, "
            f"{self.us_per_update:,.0f} us/update; Spark addBatch median "
            f"{self.add_batch_med_ms:,.0f}); Redis {self.bytes_per_window:,.0f} bytes per "
            f"(window, service) over {self.stored:,}, agg {self.agg_bytes:,.0f} bytes; refresh "
            f"ms median {self.refresh_med_ms:,.0f} (Redis reads {self.refresh_read_ms:,.0f}), "
            f"first {self.refresh_first_ms:,.0f}"
        )


_COLUMNS: tuple[tuple[str, str], ...] = (
    ("services", "{:,}"),
    ("partitions", "{}"),
    ("events", "{:,}"),
    ("rows/s", "{:,.0f}"),
    ("batches", "{}"),
    ("sink ms med", "{:.1f}"),
    ("sink ms p95", "{:.1f}"),
    ("updates/batch", "{:,.0f}"),
    ("bytes/window", "{:,.0f}"),
    ("agg bytes", "{:,.0f}"),
    ("refresh ms", "{:,.0f}"),
)


def table(results: Sequence[Result]) -> str:
    """The final table, one row per configuration."""
    rows = [
        (
            r.services,
            r.partitions,
            r.events,
            r.rows_per_s,
            r.batches,
            r.sink_med_ms,
            r.sink_p95_ms,
            r.updates_per_batch,
            r.bytes_per_window,
            r.agg_bytes,
            r.refresh_med_ms,
        )
        for r in results
    ]
    cells = [[fmt.format(v) for (_, fmt), v in zip(_COLUMNS, row, strict=True)] for row in rows]
    widths = [max(len(name), *(len(c[i]) for c in cells)) for i, (name, _) in enumerate(_COLUMNS)]
    out = ["  ".join(name.rjust(w) for (name, _), w in zip(_COLUMNS, widths, strict=True))]
    out += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(out)


def configurations(services: Sequence[int], partitions: Sequence[int]) -> list[tuple[int, int]]:
    """(services, partitions): every service count on the first partition count, then every
    other partition count with the first service count; no pair twice."""
    pairs = [(s, partitions[0]) for s in services] + [(services[0], p) for p in partitions[1:]]
    return list(dict.fromkeys(pairs))


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` by nearest rank (as bench_dashboard reports its p95)."""
    s = sorted(values)
    return s[int(q * (len(s) - 1))] if s else float("nan")


class SinkTimer:
    """Times every `write_batch` call the job's batch writer makes (driver, this process)."""

    def __init__(self) -> None:
        #: (window updates, ms) per call.
        self.calls: list[tuple[int, float]] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[SinkTimer]:
        """Replace `jobs.pipeline.write_batch` (the name `_BatchWriter` calls) while inside."""
        original = jobs.pipeline.write_batch

        def timed(r: Any, keys: Any, batch: SinkBatch, *a: Any, **kw: Any) -> None:
            t = time.perf_counter()
            try:
                original(r, keys, batch, *a, **kw)
            finally:
                self.calls.append((len(batch.windows), (time.perf_counter() - t) * 1000))

        jobs.pipeline.write_batch = timed
        try:
            yield self
        finally:
            jobs.pipeline.write_batch = original


def window_bytes(r: redis.Redis, keys: Keys) -> tuple[float, float, int]:
    """(bytes of the two window hashes per (window, service), mean agg bytes, entries).

    Entries and agg bytes leave out `*`; the bytes of its fields are in the total.
    """
    total = blob_bytes = entries = 0
    for spec in read_window_specs(r, keys):
        members: Any = r.zrange(keys.window_index(spec.key), 0, -1)
        starts = [int(s) for s in members]
        pipe = r.pipeline(transaction=False)
        for start in starts:
            pipe.memory_usage(keys.window(spec.key, start), samples=0)
            pipe.memory_usage(keys.window_aggs(spec.key, start), samples=0)
            pipe.hgetall(keys.window_aggs(spec.key, start))
        out = pipe.execute()
        for i in range(0, len(out), 3):
            total += (out[i] or 0) + (out[i + 1] or 0)
            blobs = [v for k, v in out[i + 2].items() if k.decode() != ALL_SERVICES]
            entries += len(blobs)
            blob_bytes += sum(len(v) for v in blobs)
    if not entries:
        return float("nan"), float("nan"), 0
    return total / entries, blob_bytes / entries, entries


def run_config(
    args: argparse.Namespace,
    n_services: int,
    n_partitions: int,
    index: int,
    spark: Any,
    broker: Service,
    redis_server: Service,
    tmp: Path,
) -> Result:
    """Produce, run the job to the end of the topic, then measure Redis and a refresh."""
    kafka = KafkaSettings(bootstrap=broker.address, topic=f"curves-{index}")
    ensure_topic(kafka, n_partitions)
    gen = GeneratorConfig(
        seed=1,
        rate=args.events / (args.minutes * 60),
        count=args.events,
        pace="fast",
        start_time_ms=START_MS,
        partitions=n_partitions,
        services=tuple((f"s{i:04d}", 1.0) for i in range(n_services)),
        out_of_order_fraction=0.05,
        heartbeat_interval_ms=1000,
    )
    t = time.monotonic()
    summary = produce(gen, kafka)
    print(
        f"  produced {summary.records:,} records ({summary.events:,} events) to "
        f"{n_partitions} partitions in {time.monotonic() - t:.1f}s",
        flush=True,
    )
    url = f"redis://{redis_server.address}/{index}"
    cfg = JobConfig(
        kafka=kafka,
        redis=RedisSettings(url=url),
        checkpoint=str(tmp / f"checkpoint-{index}"),
        trigger="available-now",
        max_records_per_trigger=args.per_trigger,
        master=args.master,
        shuffle_partitions=2,
    )
    timer = SinkTimer()
    t = time.monotonic()
    with timer.installed():
        progress = list(jobs.pipeline.run_job(cfg, spark=spark).recentProgress)
    print(f"  job drained the topic in {time.monotonic() - t:.1f}s", flush=True)
    rows, _, steady = throughput(progress)
    sink_ms = [ms for _, ms in timer.calls]
    updates = sum(n for n, _ in timer.calls)
    keys = Keys(cfg.redis.prefix)
    r = redis.Redis.from_url(url)
    try:
        add_batch = [
            b["durations_ms"]["addBatch"]
            for b in read_batches(r, keys)
            if b.get("input_rows") and "addBatch" in (b.get("durations_ms") or {})
        ]
        per_window, agg_bytes, stored = window_bytes(r, keys)
        f = data.Filters()  # the page's defaults
        refresh(r, keys, f, None)  # warm-up: connection, first figure of this size
        memo = ClosedWindows()
        first = sum(refresh(r, keys, f, memo))
        runs = [refresh(r, keys, f, memo) for _ in range(args.refreshes)]
    finally:
        r.close()
    return Result(
        services=n_services,
        partitions=n_partitions,
        events=summary.events,
        rows=rows,
        rows_per_s=steady,
        batches=len(progress),
        sink_med_ms=statistics.median(sink_ms) if sink_ms else float("nan"),
        sink_p95_ms=nearest_rank(sink_ms, 0.95),
        updates_per_batch=updates / len(timer.calls) if timer.calls else float("nan"),
        us_per_update=sum(sink_ms) * 1000 / updates if updates else float("nan"),
        add_batch_med_ms=statistics.median(add_batch) if add_batch else float("nan"),
        bytes_per_window=per_window,
        agg_bytes=agg_bytes,
        stored=stored,
        refresh_med_ms=statistics.median(a + b for a, b in runs),
        refresh_read_ms=statistics.median(a for a, _ in runs),
        refresh_first_ms=first,
    )


def _counts(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} wants comma-separated integers") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{what} wants positive integers")
    return values


#: Set by Ctrl-C or SIGTERM. An interrupt that lands inside a Py4J call (the job's
#: processAllAvailable) may surface as a Py4JError, not KeyboardInterrupt: this tells them apart.
_INTERRUPTED = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--services", type=lambda s: _counts(s, "--services"), default=[10, 100, 1000])
    ap.add_argument("--partitions", type=lambda s: _counts(s, "--partitions"), default=[3, 12])
    ap.add_argument("--events", type=int, default=200_000, help="events per configuration")
    ap.add_argument("--per-trigger", type=int, default=50_000, help="max records per trigger")
    ap.add_argument("--minutes", type=float, default=10.0, help="minutes of event time")
    ap.add_argument("--refreshes", type=int, default=10, help="timed refreshes per configuration")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    configs = configurations(args.services, args.partitions)
    if len(configs) > MAX_CONFIGS:
        ap.error(f"at most {MAX_CONFIGS} configurations (one Redis database each)")
    if args.events <= 0 or args.per_trigger <= 0 or args.minutes <= 0 or args.refreshes <= 0:
        ap.error("--events, --per-trigger, --minutes and --refreshes must be positive")

    signal.signal(signal.SIGTERM, _interrupt)  # the same clean-up as Ctrl-C
    print(
        f"machine: {describe(('pyspark', 'numpy', 'kafka-python', 'redis', 'plotly'))}", flush=True
    )
    tmp = Path(tempfile.mkdtemp(prefix="tg-curves-"))
    started: list[Service] = []
    spark = None
    results: list[Result] = []
    try:
        broker = start_broker(log_path=tmp / "broker.log")
        started.append(broker)
        redis_server = start_redis(log_path=tmp / "redis.log")
        started.append(redis_server)
        spark = build_session(args.master, shuffle_partitions=2, ui=False)
        # Every batch's progress, not the last 100: throughput sums them all.
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        # PySpark's own SIGINT handler cancels Spark jobs through Py4J, which fails while the main
        # thread waits in processAllAvailable; ours only stops, and `finally` cleans up.
        signal.signal(signal.SIGINT, _interrupt)
        for i, (n_services, n_partitions) in enumerate(configs):
            print(
                f"[{i + 1}/{len(configs)}] {n_services:,} services, {n_partitions} partitions",
                flush=True,
            )
            res = run_config(args, n_services, n_partitions, i, spark, broker, redis_server, tmp)
            results.append(res)
            print(res.line(), flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
    except Exception:
        if not _INTERRUPTED.is_set():
            raise
        print("\ninterrupted; cleaning up", file=sys.stderr)
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()
        for svc in reversed(started):
            svc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if results:
        print(
            f"\n{args.events:,} events over {args.minutes:g} min of event time per "
            f"configuration, {args.per_trigger:,} records per trigger at most, {args.master}:"
        )
        print(table(results))


if __name__ == "__main__":
    main()
