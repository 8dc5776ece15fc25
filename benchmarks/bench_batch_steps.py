"""One micro-batch's Python work step by step, without Spark: read tasks, state groups, sink.

    .venv/bin/python benchmarks/bench_batch_steps.py [--records 500000] [--late 0.2] [--rounds 3]
        [--services 0] [--rate 2000] [--held] [--dimension route --dimension status_class ...]

`bench_job.py` times whole batches, in which Spark's machinery and this VM's noise blur what our
own code costs. This script runs the same code on one batch of the same stream (bench_job's
seeded generator) and times each Python step alone:
  * read: parse in chunks of `CHUNK` and summarise `SUMMARY_RECORDS` at a time
    (jobs/summary/read_task.py), as the batch's read tasks do together;
  * state: the state function (jobs/state/aggregate.py) over each state group's summaries, the
    services spread over `--shards` groups;
  * sink: what the batch writer does on the driver (jobs/pipeline.py): output rows decoded
    (jobs/state/rows.py), late events picked and formatted (jobs/summary/late_events.py), one Redis
    transaction (jobs/sink/redis_sink.py) into a private redis-server.
The watermark is set so that `--late` of the batch's events are behind it: bench_job's stream is
15-25 % late (its read tasks take partitions unevenly far, so one partition's events trail the
watermark the others set), and late events have their own costs. A warm-up round first; prints
best and median milliseconds of `--rounds`, with the bytes the summaries hand to the shuffle.
`--services N` spreads the events evenly over N services (0: the generator's default mix) and
`--rate` sets the events per second of event time, so the (window, service) groups of the batch
can be varied at a fixed number of records, as `bench_groups.py` does with Spark. The state
groups start empty, so the state step is the batch's own work; `--held` starts them with what
an earlier batch of as many records left (the next ones of the same stream come after it), as a
running job's groups hold it: decoding and writing that state back counts too. `--dimension`
(repeatable) slices the batch as `tidegauge job --dimension` does (docs/dimensions.md); with
`route`, `method`, `region` or `version` among them the records carry those as `tidegauge produce
--attributes` writes them (`--routes`, `--regions`), `status_class` comes from the status.
`--catalog-changes N` joins the batch to a service catalog as `tidegauge job --catalog` does
(docs/catalog.md): every service catalogued (20 teams, 3 tiers, SLOs whose exact counts the
panes keep) and N changes of team spread
over the batch's event time; with `--dimension team` the join's result is sliced. It prints
what the planner's part costs (building the join) and what it ships to each read task.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import redis  # noqa: E402

from benchmarks.bench_read_task import raw_chunks  # noqa: E402
from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_redis  # noqa: E402
from jobs.parse.parser import RecordKind, make_parser  # noqa: E402
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch  # noqa: E402
from jobs.sink.slices import split_rows  # noqa: E402
from jobs.state.aggregate import make_state_fn  # noqa: E402
from jobs.state.rows import decode_table  # noqa: E402
from jobs.summary.late_events import batch_members  # noqa: E402
from jobs.summary.read_task import CHUNK, SUMMARY_RECORDS  # noqa: E402
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import summarise, summary_batch  # noqa: E402

# The stand-in for Spark's GroupState that the unit tests give the state function.
from tests.unit.jobs.fixtures import FakeGroupState  # noqa: E402
from tidegauge.catalog import SLO_COUNTS_PLUGIN  # noqa: E402
from tidegauge.catalog.entry import CatalogEntry, Slo  # noqa: E402
from tidegauge.catalog.history import CatalogHistory, CatalogRecord  # noqa: E402
from tidegauge.catalog.join import CatalogJoin  # noqa: E402
from tidegauge.core.config import JobConfig  # noqa: E402
from tidegauge.core.control import INCIDENT_DIMENSIONS  # noqa: E402
from tidegauge.core.dimensions import (  # noqa: E402
    DEFAULT_VALUES,
    parse_dimensions,
    register_dimension_fields,
)
from tidegauge.core.plugins import load_plugins  # noqa: E402
from tidegauge.core.store import Keys  # noqa: E402
from tidegauge.traffic.config import GeneratorConfig  # noqa: E402
from tidegauge.traffic.generator import generate  # noqa: E402

T0 = 1_780_000_000_000


def _catalog(services: list[str], changes: int, span_ms: int) -> CatalogJoin:
    """Every service catalogued an hour before T0, then `changes` moves of team over the span."""
    rng = np.random.default_rng(7)
    records = [
        CatalogRecord(
            i,
            T0 - 3_600_000,
            name,
            CatalogEntry(
                team=f"team{i % 20}", tier=str(i % 3), slo=Slo(99.0, 500.0, 99.0)
            ).to_bytes(),
        )
        for i, name in enumerate(services)
    ]
    for k in range(changes):
        name = services[int(rng.integers(len(services)))]
        at = T0 + k * span_ms // max(changes, 1)
        entry = CatalogEntry(team=f"team{int(rng.integers(20))}", tier="1")
        records.append(CatalogRecord(len(records), at, name, entry.to_bytes()))
    return CatalogJoin.of(CatalogHistory.of(records), T0 - 3_600_000)


def read(raw: list[pa.RecordBatch], watermark: int, cfg: ExecutorConfig) -> pd.DataFrame:
    """Parse and summarise as the read tasks do; the summary rows, as the state step gets them."""
    parsed = list(make_parser()(iter(raw)))
    step = SUMMARY_RECORDS // CHUNK
    sums = []
    for i in range(0, len(parsed), step):
        rows = pa.Table.from_batches(parsed[i : i + step]).to_pandas()
        sums.append(summary_batch(summarise(rows, watermark, watermark + 40_000, cfg)))
    return pa.Table.from_batches(sums).to_pandas()


def state(
    summaries: pd.DataFrame,
    watermark: int,
    cfg: ExecutorConfig,
    held: dict[int, FakeGroupState] | None = None,
) -> pa.Table:
    """The state function over every group's summaries.

    Each group starts from `held[g]`'s state (left untouched) if given, else empty; `held`
    groups absent from it are filled with the state the batch leaves.
    """
    fn = make_state_fn(cfg)
    deltas = summaries[summaries["kind"] == SummaryKind.SHARD]
    outs = []
    for g in range(cfg.shards):
        mine = deltas[deltas["shard"] == g]
        before = held.get(g) if held is not None else None
        group = FakeGroupState(watermark, None if before is None else before.value)
        outs += list(fn((RecordKind.EVENT, g), iter([mine]), group))
        if held is not None and before is None:
            held[g] = group
    return pa.concat_tables(outs)


def sink(out: pa.Table, r: redis.Redis, cfg: ExecutorConfig) -> None:
    """The batch writer's work on the driver, as jobs/pipeline.py does it."""
    rows, slices = split_rows(decode_table(out, 7))
    late = batch_members(rows.late_events, cfg.late_events_max, 7)
    write_batch(
        r,
        Keys("bench"),
        SinkBatch.of_rows(7, rows, late),
        SinkConfig(
            arrival_window_ms=10_000, late_events_max=cfg.late_events_max, shards=cfg.shards
        ),
        {dim: SinkBatch.of_rows(7, rows) for dim, rows in slices.items()},
    )


def _event_times(raw: list[pa.RecordBatch]) -> np.ndarray:
    events = pa.Table.from_batches(list(make_parser()(iter(raw)))).column("event_ms")
    return events.drop_null().to_numpy()


def _watermark(raw: list[pa.RecordBatch], late: float) -> int:
    """A watermark that puts `late` of the events behind it (their 10 s window ended)."""
    return int(np.quantile(_event_times(raw), late)) // 10_000 * 10_000


def timed(step: Callable[[], object], rounds: int) -> list[float]:
    step()  # warm-up
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        step()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument(
        "--late", type=float, default=0.2, help="share of the batch behind the watermark"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shards", type=int, default=JobConfig.state_shards)
    ap.add_argument("--services", type=int, default=0, help="N equal services (0: the default)")
    ap.add_argument("--rate", type=float, default=2000.0, help="events per s of event time")
    ap.add_argument(
        "--held",
        action="store_true",
        help="the state groups start with what an earlier batch of as many records left",
    )
    ap.add_argument("--dimension", action="append", default=[], help="as tidegauge job's")
    ap.add_argument("--dimension-values", type=int, default=DEFAULT_VALUES)
    ap.add_argument("--routes", type=int, default=7, help="as tidegauge produce's")
    ap.add_argument("--regions", type=int, default=3, help="as tidegauge produce's")
    ap.add_argument(
        "--catalog-changes",
        type=int,
        default=None,
        metavar="N",
        help="join to a catalog of every service with N changes of team (docs/catalog.md)",
    )
    args = ap.parse_args()
    print(describe(["pyarrow", "numpy", "redis"]))
    if args.catalog_changes is not None:  # and the exact SLO counts, as the job loads them
        load_plugins([SLO_COUNTS_PLUGIN])
    dims = parse_dimensions(args.dimension)
    register_dimension_fields(dims)
    cfg = ExecutorConfig(  # the job's defaults
        JobConfig.windows,
        allowed_lateness_ms=JobConfig.allowed_lateness_ms,
        late_events_max=JobConfig.late_events_max,
        shards=args.shards,
        dimensions=dims,
        dimension_values=args.dimension_values,
    )
    services = {}
    if args.services:
        services["services"] = tuple((f"s{k:05d}", 1.0) for k in range(args.services))
    gen = GeneratorConfig(
        seed=1,
        rate=args.rate,
        count=args.records * (2 if args.held else 1),
        pace="fast",
        start_time_ms=T0,
        out_of_order_fraction=0.05,
        heartbeat_interval_ms=1000,
        routes=args.routes,
        regions=args.regions,
        attributes=bool({f for d in dims for f in d.fields()} & set(INCIDENT_DIMENSIONS)),
        **services,
    )
    if args.catalog_changes is not None:
        names = [name for name, _ in gen.services]
        span = round(args.records * (2 if args.held else 1) / args.rate * 1000)
        started = time.perf_counter()
        join = _catalog(names, args.catalog_changes, span)
        built_ms = (time.perf_counter() - started) * 1000
        cfg = dataclasses.replace(cfg, catalog=join)
        rng = np.random.default_rng(3)
        who = np.array(names, dtype=object)[rng.integers(len(names), size=args.records)]
        when = T0 + rng.integers(0, span, size=args.records)
        lookup_ms = timed(lambda: join.lookup(who, when), args.rounds)
        print(
            f"catalog: {len(names):,} services, {args.catalog_changes:,} changes; the join "
            f"built in {built_ms:.1f} ms, {len(pickle.dumps(join)):,} bytes to each read task; "
            f"its lookup {min(lookup_ms) * 1000 / args.records:.2f} µs per event"
        )
    values = [r.value for r in generate(gen)]
    held: dict[int, FakeGroupState] | None = None
    if args.held:  # the first half's state, as a running job's groups hold it
        earlier = raw_chunks(values[: args.records], T0)
        held = {}
        before_wm = _watermark(earlier, args.late)
        state(read(earlier, before_wm, cfg), before_wm, cfg, held)
        values = values[args.records :]
    raw = raw_chunks(values[: args.records], T0 + (args.records if args.held else 0))
    times = _event_times(raw)
    watermark = _watermark(raw, args.late)
    summaries = read(raw, watermark, cfg)
    out = state(summaries, watermark, cfg, held)
    late = int(out.filter(pa.compute.equal(out["kind"], "late_events"))["count"].to_numpy().sum())
    groups = int(pa.compute.sum(pa.compute.equal(out["kind"], "window")).as_py())
    shipped = int(summaries.loc[summaries["kind"] == SummaryKind.SHARD, "blob"].map(len).sum())
    print(
        f"{args.records:,} records, {float(np.mean(times < watermark)):.1%} late, "
        f"{args.shards} state groups, {groups:,} (window, group) updates"
        + (f" (dimensions {', '.join(d.name for d in dims)})" if dims else "")
        + f"; best / median of {args.rounds} after a warm-up"
    )
    print(
        f"summaries to the shuffle: {shipped:,} bytes ({shipped / args.records:.1f} per record); "
        f"late events to the driver: {late:,}"
    )
    redis_server = start_redis()
    try:
        r = redis.Redis.from_url(f"redis://{redis_server.address}/0")
        steps = {
            "read (parse + summarise)": lambda: read(raw, watermark, cfg),
            "state (every group)": lambda: state(summaries, watermark, cfg, held),
            "sink (decode + Redis)": lambda: sink(out, r, cfg),
        }
        for name, step in steps.items():
            ms = timed(step, args.rounds)
            print(f"{name:<26} {min(ms):8.0f} / {statistics.median(ms):8.0f} ms")
    finally:
        redis_server.stop()


if __name__ == "__main__":
    main()
