"""Chunk summaries (jobs/summary/summarise.py): what the read task decides, whatever the chunks.

The job's read tasks summarise each chunk of records per service against the batch's watermark;
the state function merges the summaries. The contract: however a batch's records are cut into
chunks (per partition, any sizes), and in whatever order Spark delivers the summaries, the state
function emits the same counts, late and straggler figures, arrival counts, late events and
session results as for the whole batch summarised at once; HyperLogLogs are equal (a merge is a
register max); t-digests agree within their rank error. The definition of each figure is checked
against brute force in tests/unit/jobs/state/test_aggregate.py
(`test_state_fn_time_outputs_agree_with_the_definition`); `arrival_counts` at the end.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from jobs.parse.columns import decode_columns
from jobs.parse.parser import RecordKind
from jobs.state.codec import ShardState
from jobs.summary.chunk import ChunkSummary, ServiceSummary
from jobs.summary.late_events import members
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from jobs.summary.shards import shard_of
from jobs.summary.summarise import (
    arrival_counts,
    summarise,
    summary_batch,
    summary_frame,
)
from sketches.hll import HyperLogLog
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import (
    HOPPING,
    SESSION,
    SIZE,
    TUMBLING,
    FakeGroupState,
    chunks_of,
    comparable,
    ms,
    parsed,
    state_outputs,
)
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import LATE, ON_TIME, STRAGGLER, WindowSpec


@pytest.mark.parametrize(
    "specs", [(TUMBLING,), (TUMBLING, HOPPING), (TUMBLING, SESSION)], ids=lambda s: len(s)
)
@pytest.mark.parametrize("seed", range(3))
def test_any_chunking_in_any_order_gives_the_whole_batch_result(
    specs: tuple[WindowSpec, ...], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    cfg = ExecutorConfig(specs, allowed_lateness_ms=20 * S, late_events_max=25)
    whole_state, chunked_state = FakeGroupState(0), FakeGroupState(0)
    watermark = 0
    for b in range(4):
        now = T + b * 40 * S
        pdf = parsed(rng, 600, now)
        proc = now + 500
        whole = [summary_frame(summarise(pdf, watermark, proc, cfg))]
        parts = [summary_frame(summarise(c, watermark, proc, cfg)) for c in chunks_of(pdf, rng)]
        rng.shuffle(parts)  # type: ignore[arg-type]
        a = state_outputs(whole, cfg, watermark, whole_state)
        c = state_outputs(parts, cfg, watermark, chunked_state)
        exact_a, aggs_a = comparable(a)
        exact_c, aggs_c = comparable(c)
        assert exact_a == exact_c
        assert set(a["kind"]) >= {"window", "arrivals"}
        if b:
            assert "late" in set(a["kind"]) and "late_events" in set(a["kind"])
        for key, agg in aggs_a.items():
            other = aggs_c[key].latency
            if agg.latency == other:
                continue  # (e.g. every value kept: identical)
            # Two estimates of one distribution: each within the rank error (plus one rank of a
            # small window) of the truth, so within twice that of each other.
            for q in (0.5, 0.99):
                rank = agg.latency.cdf(other.quantile(q))
                assert abs(rank - q) <= 2 * (0.01 + 1 / agg.latency.count), key
        assert a[a["kind"] == "late_events"]["count"].sum() <= cfg.late_events_max
        watermark = max(watermark, int(pdf["event_ms"].max()) - cfg.allowed_lateness_ms)
    assert whole_state.value is not None and chunked_state.value is not None
    a_state = ShardState.from_bytes(whole_state.value[0], cfg)
    c_state = ShardState.from_bytes(chunked_state.value[0], cfg)
    assert sorted(a_state.services) == sorted(c_state.services)
    for name, sw in a_state.services.items():
        assert {p: g.count for p, g in sw.pane_aggs().items()} == {
            p: g.count for p, g in c_state.services[name].pane_aggs().items()
        }


@pytest.mark.parametrize("shards", [1, 3])
def test_summary_rows_of_a_chunk(shards: int) -> None:
    rng = np.random.default_rng(9)
    pdf = parsed(rng, 400, T, partitions=1)
    slots = tuple(range(10, 10 + shards))  # the planner's quotas: each chunk carries its shard's
    cfg = ExecutorConfig((TUMBLING,), shards=shards, max_services=sum(slots), slots=slots)
    rows = summary_frame(summarise(pdf, 0, T, cfg))
    events = pdf[pdf["kind"] == RecordKind.EVENT]
    bundles = rows[rows["kind"] == SummaryKind.SHARD].to_dict("records")
    # one row per state shard that has services in the chunk, each service in its own shard
    seen = []
    for r in bundles:
        chunk = ChunkSummary.from_bytes(r["blob"])
        assert (chunk.shard, chunk.shards) == (r["shard"], shards)
        assert chunk.slots == slots[chunk.shard]
        assert chunk.names == sorted(chunk.names)
        assert all(shard_of(name, shards) == r["shard"] for name in chunk.names)
        seen += chunk.names
        mine = events[events["service"].isin(chunk.names)]
        # the newest event time, so Spark's watermark over these rows is its value over records
        assert r["event_time"] == pd.Timestamp(int(mine["event_ms"].max()), unit="ms", tz="UTC")
        assert (r["partition"], r["offset"]) == (0, int(mine["offset"].min()))
        assert r["count"] == len(mine)
        for i, name in enumerate(chunk.names):
            one = mine[mine["service"] == name]
            first = chunk.tables["services"]
            assert (first["partition"][i], first["offset"][i]) == (0, int(one["offset"].min()))
            assert first["count"][i] == len(one)
            panes = [WindowAgg.from_bytes(b) for b in chunk.service(i).panes.values()]
            assert sum(a.count for a in panes) == len(one)  # W = 0: none late
    assert sorted(seen) == sorted(events["service"].unique())
    assert len(bundles) == len({shard_of(name, shards) for name in seen})
    [beat] = rows[rows["kind"] == RecordKind.HEARTBEAT].to_dict("records")
    beats = pdf[pdf["kind"] == RecordKind.HEARTBEAT]
    assert beat["count"] == len(beats)
    assert beat["event_time"] == pd.Timestamp(int(beats["event_ms"].max()), unit="ms", tz="UTC")
    dead = rows[rows["kind"] == RecordKind.DEAD]
    assert list(dead["offset"]) == list(pdf[pdf["kind"] == RecordKind.DEAD]["offset"])
    assert set(dead["raw"]) == {b"{x"} and set(dead["reason"]) == {"invalid_json"}
    [times] = rows[rows["kind"] == SummaryKind.TIMES].to_dict("records")
    assert times["count"] == len(pdf)
    assert summary_batch(summarise(pdf.iloc[0:0], 0, T, cfg)).num_rows == 0


def _services(n: int) -> dict[str, np.ndarray]:
    return {
        "partition": np.arange(n, dtype=np.int64),
        "offset": np.arange(n, dtype=np.int64) * 10,
        "count": np.full(n, 3, np.int64),
        "newest": np.full(n, T, np.int64),
    }


def _same(a: ServiceSummary, b: ServiceSummary) -> None:
    for name in ("watermark_ms", "proc_ms", "panes", "late", "stragglers", "arrivals"):
        assert getattr(a, name) == getattr(b, name), name
    assert (a.duplicates, a.duplicate_events) == (b.duplicates, b.duplicate_events)
    for name in ("event_ms", "lateness", "ids", "horizons"):
        got, want = getattr(a, name), getattr(b, name)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), name
    assert a.users.tolist() == b.users.tolist()
    for cols, other in ((a.late_events, b.late_events), (a.rows, b.rows)):
        assert cols.keys() == other.keys()
        for name, col in cols.items():
            if isinstance(col, pa.Array):
                assert other[name].to_pylist() == col.to_pylist()
            else:
                assert np.array_equal(other[name], col, equal_nan=True)


def test_chunk_summary_round_trip() -> None:
    agg = WindowAgg()
    agg.add(np.array([1.0, 2.0]), np.array([200, 500]), np.array(["a", "b"], dtype=object))
    late = LateAgg()
    late.add(np.array([5.0, math.nan]), 3.0)
    full = ServiceSummary(
        T,
        T + 1,
        panes={T: agg.to_bytes(), T + 10 * S: agg.to_bytes()},
        late={("10000", T - 10 * S): late.to_bytes()},
        arrivals={("broker", T): (2, 1, 0), ("processing", T): (3, 1, 1)},
        late_events={
            "partition": np.array([1, 1]),
            "offset": np.array([2, 3]),
            "kafka_ms": np.array([math.nan, T]),
            "event_ms": np.array([T - 1, T]),
            "event_id": pa.array(["e1", None]),
            "clock_offset_ms": np.array([math.nan, -4.0]),
        },
        users=np.array(["a", None, "ü"], dtype=object),
        event_ms=np.array([T, T + 1, T + 2], dtype=np.int64),
        lateness=np.array([1.0, math.nan, 3.0]),
        ids=np.array([7, 2**64 - 1], dtype=np.uint64),
        horizons=np.array([T + 10 * S, T + 20 * S], dtype=np.int64),
        rows={"event_ms": np.array([T, T + 1]), "user_id": pa.array(["a", None])},
        duplicate_events=2,
    )
    full.stragglers[("10000", T)] = 4
    full.duplicates[("10000", T)] = 2
    sparse = ServiceSummary(T, T + 1, panes={T: agg.to_bytes()})
    sparse.arrivals[("broker", T)] = (1, 0, 0)
    names = ["api", "sérvice ✓", "web"]
    chunk = ChunkSummary.of_services(
        names, [full, sparse, full], _services(3), ("10000",), shard=2, shards=3
    )
    chunk.slots = 334
    blob = chunk.to_bytes()
    back = ChunkSummary.from_bytes(blob)
    assert back.to_bytes() == blob
    assert (back.names, back.shard, back.shards, back.specs) == (names, 2, 3, ("10000",))
    assert back.slots == 334
    for i, want in enumerate([full, sparse, full]):
        _same(back.service(i), want)
    assert WindowAgg.from_bytes(back.service(0).panes[T]) == agg
    assert isinstance(WindowAgg.from_bytes(back.service(1).panes[T]).users, HyperLogLog)
    assert LateAgg.from_bytes(back.service(2).late[("10000", T - 10 * S)]) == late
    empty = ChunkSummary(T, None).to_bytes()
    assert len(ChunkSummary.from_bytes(empty)) == 0
    for broken in (b"", b"TGCS", blob[:-1], blob + b"x", b"XXXX" + blob[4:], blob[:40]):
        with pytest.raises(ValueError):
            ChunkSummary.from_bytes(broken)


@pytest.mark.parametrize("distinct", [1, 5, 256, 257, 70_000])
def test_chunk_summary_keeps_ids_and_horizons_in_row_order(distinct: int) -> None:
    rng = np.random.default_rng(distinct)
    n = max(distinct, 1_000)
    one = ServiceSummary(T, T, ids=rng.integers(0, 2**63, n, dtype=np.uint64))
    one.horizons = T + rng.permutation(np.arange(n) % distinct).astype(np.int64) * 10 * S
    back = ChunkSummary.from_bytes(
        ChunkSummary.of_services(["api"], [one], _services(1), ()).to_bytes()
    ).service(0)
    assert np.array_equal(back.ids, one.ids) and back.ids.dtype == np.uint64
    assert np.array_equal(back.horizons, one.horizons) and back.horizons.dtype == np.int64


def test_late_events_kept_are_the_newest_by_broker_time_however_chunked() -> None:
    cfg = ExecutorConfig((TUMBLING,), late_events_max=7)
    rng = np.random.default_rng(3)
    pdf = parsed(rng, 500, T, partitions=2)
    pdf = pdf[pdf["kind"] == RecordKind.EVENT].assign(event_ms=T - 60 * S)  # every event late
    pdf["kafka_ms"] = np.where(rng.random(len(pdf)) < 0.5, pdf["kafka_ms"], T + 5 * S)  # ties
    parts = [summary_frame(summarise(c, T, T, cfg)) for c in chunks_of(pdf, rng)]
    out = state_outputs(parts, cfg, T, FakeGroupState(0))
    [row] = out[out["kind"] == "late_events"].to_dict("records")
    got = [json.loads(m) for m in members(decode_columns(row["agg"]), 0)]
    # newest broker time first (unknown = oldest), ties: later partition, then later offset
    by_age = pdf.assign(score=pdf["kafka_ms"].fillna(0)).sort_values(
        ["score", "partition", "offset"], ascending=False
    )
    first = by_age.head(7)
    assert row["count"] == 7
    assert [(e["partition"], e["offset"]) for e in got] == list(
        zip(first["partition"], first["offset"], strict=True)
    )
    assert [e["event_id"] for e in got] == list(first["event_id"])
    assert [e["service"] for e in got] == list(first["service"])


# --- arrival_counts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buckets", "kinds", "expected"),
    [
        ([], [], {}),
        ([T], [ON_TIME], {T: (1, 0, 0)}),
        ([T, T, T], [LATE, LATE, STRAGGLER], {T: (3, 2, 1)}),
        (
            [T + SIZE, T, T + SIZE, T - SIZE],
            [ON_TIME, STRAGGLER, LATE, LATE],
            {T - SIZE: (1, 1, 0), T: (1, 0, 1), T + SIZE: (2, 1, 0)},
        ),
    ],
)
def test_arrival_counts(
    buckets: list[int], kinds: list[int], expected: dict[int, tuple[int, int, int]]
) -> None:
    got = arrival_counts(ms(*buckets), ms(*kinds))
    assert got == expected
    assert all(type(k) is int and all(type(v) is int for v in vs) for k, vs in got.items())


def test_arrival_counts_agree_with_brute_force() -> None:
    rng = np.random.default_rng(21)
    for _ in range(50):
        n = int(rng.integers(0, 200))
        buckets = T + SIZE * rng.integers(-5, 5, n)
        kinds = rng.choice(ms(ON_TIME, STRAGGLER, LATE), n)
        expected = {
            int(b): (
                int(np.sum(buckets == b)),
                int(np.sum((buckets == b) & (kinds == LATE))),
                int(np.sum((buckets == b) & (kinds == STRAGGLER))),
            )
            for b in set(buckets.tolist())
        }
        assert arrival_counts(buckets, kinds) == expected
