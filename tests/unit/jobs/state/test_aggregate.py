"""The state function (jobs/state/aggregate.py): every output row it emits.

`make_state_fn` is driven directly with pandas frames and `FakeGroupState`, a stand-in that
implements the part of `pyspark.sql.streaming.state.GroupState` the function relies on (`exists`,
`get`, `update`, `getCurrentWatermarkMs`; tests/unit/jobs/fixtures.py): that is the function's
contract, in the shape of an `applyInPandasWithState` function; it yields Arrow tables, looked
into here as pandas frames (`frames_of`).

Timelines in the comments and the window specs: tests/unit/jobs/fixtures.py.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from jobs.panes.windows import ServiceWindows
from jobs.parse.columns import decode_columns
from jobs.parse.parser import RecordKind
from jobs.state.aggregate import make_state_fn
from jobs.state.codec import DeadCounts, ShardState
from jobs.state.rows import OUTPUT_SCHEMA
from jobs.summary.late_events import members
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import summarise, summary_frame
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import (
    HK,
    HOPPING,
    SESSION,
    SIZE,
    TIMED_SPECS,
    TK,
    TUMBLING,
    FakeGroupState,
    check_digest,
    counts,
    filled,
    near_boundaries,
    parsed,
    size_of,
    state_outputs,
    windows_of,
)
from tidegauge.core.events import ALL_SERVICES, OVERFLOW_SERVICE
from tidegauge.core.freshness import merge_times
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

OUTPUT_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]


# --- make_state_fn: the contract in the shape of applyInPandasWithState's -------------------------


def event_frame(
    service: str,
    times: list[int],
    latency: list[float] | None = None,
    status: list[int | None] | None = None,
    users: list[str | None] | None = None,
) -> pd.DataFrame:
    """Parsed rows of one service as Spark hands them over (the columns that matter).

    latency_ms is a double (NaN = absent), status a nullable int, user_id a string or None.
    """
    n = len(times)
    return pd.DataFrame(
        {
            "partition": np.zeros(n, dtype=np.int32),
            "offset": np.arange(n, dtype=np.int64),
            "kafka_ms": np.full(n, T, dtype=np.int64),
            "kind": [RecordKind.EVENT] * n,
            "event_time": pd.to_datetime(np.array(times, dtype=np.int64), unit="ms", utc=True),
            "event_ms": np.array(times, dtype=np.int64),
            "service": [service] * n,
            "user_id": pd.Series(users if users is not None else [f"u{i}" for i in range(n)]),
            "latency_ms": np.array(latency if latency is not None else [10.0] * n, np.float64),
            "status": pd.array(status if status is not None else [200] * n, dtype="Int32"),
            # distinct across frames: the state function de-duplicates by id (test_dedup.py)
            "event_id": [f"e{next(_EVENT_IDS)}" for _ in range(n)],
        }
    )


_EVENT_IDS = itertools.count()


def _agg_of(frames: list[pd.DataFrame], start: int, end: int) -> WindowAgg:
    """What a window should hold: the frames' rows of [start, end), added frame by frame."""
    agg = WindowAgg()
    for f in frames:
        sel = f[(f["event_ms"] >= start) & (f["event_ms"] < end)]
        agg.add(
            sel["latency_ms"].to_numpy(np.float64),
            sel["status"].to_numpy(np.int64, na_value=-1),
            sel["user_id"].to_numpy(object),
        )
        agg.lateness.update((sel["kafka_ms"] - sel["event_ms"]).to_numpy(np.float64))
    return agg


DEAD_COLUMNS = ["partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size"]


def dead_frame(rows: list[tuple[int, int, int, str, str, bytes, int]]) -> pd.DataFrame:
    pdf = pd.DataFrame(rows, columns=DEAD_COLUMNS)
    pdf.insert(3, "kind", RecordKind.DEAD)
    pdf["service"] = None
    pdf["event_ms"] = None
    return pdf


_PARSED_COLUMNS = [
    *("partition", "offset", "kafka_ms", "kind", "event_ms", "service", "user_id"),
    *("latency_ms", "status", "event_id", "reason", "detail", "raw", "raw_size"),
]


def summaries(
    frames: list[pd.DataFrame], watermark: int, cfg: ExecutorConfig
) -> list[pd.DataFrame]:
    """What the read task hands the state function for these rows (jobs/summary/summarise.py).

    The frames are the records of one chunk (a batch read by one task), summarised against the
    watermark the state function will get; `proc_ms`, where a frame has it, is the batch's time.
    """
    if not frames:
        return []
    pdf = pd.concat(frames, ignore_index=True)
    for c in _PARSED_COLUMNS:
        if c not in pdf:
            pdf[c] = None
    proc = pdf["proc_ms"].dropna() if "proc_ms" in pdf else pd.Series([], dtype="int64")
    cols = summarise(pdf, watermark, int(proc.iloc[0]) if len(proc) else None, cfg)
    return [summary_frame(cols)]


def frames_of(tables: Iterable[pa.Table]) -> list[pd.DataFrame]:
    """The state function's output tables as pandas frames, to look into."""
    return [t.to_pandas() for t in tables]


def run(
    key: tuple[Any, ...],
    frames: list[pd.DataFrame],
    state: FakeGroupState,
    specs: tuple[WindowSpec, ...] = (TUMBLING,),
    with_all: bool = False,
) -> pd.DataFrame:
    """The state function's output rows; the shard's `*` window rows only `with_all`."""
    if key[0] == RecordKind.EVENT:
        key = (RecordKind.EVENT, 0)
    cfg = ExecutorConfig(specs)
    rows = summaries(frames, state.watermark_ms, cfg)
    out = frames_of(make_state_fn(cfg)(key, iter(rows), state))
    for f in out:
        assert list(f.columns) == OUTPUT_COLUMNS
    if not out:
        return pd.DataFrame(columns=OUTPUT_COLUMNS)
    return without_all(pd.concat(out, ignore_index=True), with_all)


def without_all(out: pd.DataFrame, keep: bool = False) -> pd.DataFrame:
    """`out` without the shard's `*` window rows (tested on their own), unless `keep`."""
    if keep:
        return out
    return out[~((out["kind"] == "window") & (out["service"] == ALL_SERVICES))].reset_index(
        drop=True
    )


def rows_of(out: pd.DataFrame, kind: str, *cols: str) -> set[tuple[Any, ...]]:
    sel = out[out["kind"] == kind]
    return {tuple(r) for r in sel[list(cols)].itertuples(index=False, name=None)}


def kept_late_events(out: pd.DataFrame) -> list[dict[str, Any]]:
    """The late events a state function's output keeps, as stored (jobs/summary/late_events.py)."""
    events = []
    for r in out[out["kind"] == "late_events"].to_dict("records"):
        cols = decode_columns(r["agg"])
        assert r["count"] == len(cols["offset"])
        events += [json.loads(m) for m in members(cols, 0)]
    return events


def window_aggs(out: pd.DataFrame) -> dict[tuple[str, int], WindowAgg]:
    """(spec key, start) -> the window's WindowAgg, after checking each row is self-consistent."""
    found = {}
    for r in out[out["kind"] == "window"].to_dict("records"):
        agg = WindowAgg.from_bytes(r["agg"])
        assert r["count"] == agg.count
        assert r["metrics"] is None or pd.isna(r["metrics"])  # readers compute them from agg
        for c in ("partition", "offset", "reason", "raw"):
            assert r[c] is None or pd.isna(r[c])
        found[(r["spec"], int(r["window_start"]))] = agg
    return found


def shard_blob(service: str, sw: ServiceWindows) -> bytes:
    """State of the one-shard event group holding `service`'s windows."""
    return ShardState(1, {service: sw}).to_bytes()


def state_counts(
    state: FakeGroupState, specs: tuple[WindowSpec, ...], service: str = "api"
) -> dict[int, int]:
    shard = ShardState.from_bytes(state.get[0], ExecutorConfig(specs))
    return counts(shard.services[service]) if service in shard.services else {}


def test_state_fn_events_first_batch() -> None:
    #   T         T+10s     T+20s
    #   [x-x--x---)[x-------)        W = 0: nothing late
    frames = [
        event_frame(
            "api",
            [T + 1 * S, T + 2 * S, T + 11 * S],
            latency=[12.5, np.nan, 40.0],
            status=[200, 503, None],
            users=["alice", "bob", None],
        ),
        event_frame("api", [T + 5 * S], latency=[7.25], status=[500], users=["alice"]),
    ]
    state = FakeGroupState(0)
    out = run((RecordKind.EVENT, "api"), frames, state)
    assert rows_of(out, "window", "spec", "service", "window_start", "count") == {
        (TK, "api", T, 3),
        (TK, "api", T + SIZE, 1),
    }
    # (broker times reach the sink through the chunk's `times` row, in the dead-letter group)
    assert set(out["kind"]) == {"window", "arrivals"}
    aggs = window_aggs(out)
    assert aggs == {
        (TK, T): _agg_of(frames, T, T + SIZE),
        (TK, T + SIZE): _agg_of(frames, T + SIZE, T + 2 * SIZE),
    }
    m = aggs[(TK, T)].metrics(SIZE)
    assert (m["count"], m["errors"], m["latency_count"], m["distinct_users"]) == (3, 2, 2, 2)
    assert m["events_per_s"] == 0.3 and m["latency_mean"] == pytest.approx((12.5 + 7.25) / 2)
    assert state.updates == 1
    assert state_counts(state, (TUMBLING,)) == {T: 3, T + SIZE: 1}


def test_state_fn_tumbling_and_hopping_across_batches() -> None:
    specs = (TUMBLING, HOPPING)
    # batch 1, W = 0:
    #   T         T+10s     T+20s
    #   |x-x------|x--------|
    state = FakeGroupState(0)
    first = [event_frame("api", [T + 1 * S, T + 2 * S, T + 11 * S])]
    out1 = run((RecordKind.EVENT, "api"), first, state, specs)
    assert rows_of(out1, "window", "spec", "window_start", "count") == {
        (TK, T, 2),
        (TK, T + SIZE, 1),
        (HK, T - 20 * S, 2),
        (HK, T - 10 * S, 3),
        (HK, T, 3),
        (HK, T + 10 * S, 1),
    }
    assert rows_of(out1, "late", "spec", "window_start") == set()

    # batch 2, W = T+15s:
    #   T-20s     T-10s     T         T+10s     T+20s     T+30s     T+40s
    #                       |--x------|-x---W---|----x----|
    #   tumbling            [--x------)                     T ended: late
    #   hopping   [------------x------)                     T-20s ended: late
    #             [------------x--------x-------)           T-10s open: pane T keeps the row
    state.watermark_ms = T + 15 * S
    second = [event_frame("api", [T + 3 * S, T + 12 * S]), event_frame("api", [T + 25 * S])]
    out2 = run((RecordKind.EVENT, "api"), second, state, specs)
    assert rows_of(out2, "late", "spec", "service", "window_start", "count") == {
        (TK, "api", T, 1),
        (HK, "api", T - 20 * S, 1),
    }
    # absolute counts of every open window containing a touched pane; tumbling T is closed
    assert rows_of(out2, "window", "spec", "window_start", "count") == {
        (TK, T + SIZE, 2),
        (TK, T + 2 * SIZE, 1),
        (HK, T - 10 * S, 3 + 2),
        (HK, T, 3 + 2 + 1),
        (HK, T + 10 * S, 2 + 1),
        (HK, T + 20 * S, 1),
    }
    both = first + second
    for (key, start), agg in window_aggs(out2).items():
        size = WindowSpec.from_key(key).size_ms
        expected = _agg_of(both, start, start + size)
        expected.overdue = agg.overdue  # overdue has its own tests (test_overdue_*)
        assert agg == expected, (key, start - T)
    # window rows come sorted by spec key then start, late rows after them
    kinds = [k for k in out2["kind"] if k in ("window", "late")]
    assert kinds == ["window"] * 6 + ["late"] * 2
    windows = out2[out2["kind"] == "window"]
    assert list(zip(windows["spec"], windows["window_start"], strict=True)) == sorted(
        zip(windows["spec"], windows["window_start"], strict=True)
    )
    late_rows = out2[out2["kind"] == "late"]
    assert late_rows["metrics"].isna().all()
    # a late row carries the LateAgg of its window's late events in this batch
    for r in late_rows.to_dict("records"):
        assert LateAgg.from_bytes(r["agg"]).count == r["count"]
    # pane T stays: hopping window T (until T+30s) still needs it
    assert state_counts(state, specs) == {T: 3, T + SIZE: 2, T + 2 * SIZE: 1}

    # batch 3, W = T+30s: a row at T+5s is late for all four windows holding it; pane T goes
    state.watermark_ms = T + 30 * S
    out3 = run((RecordKind.EVENT, "api"), [event_frame("api", [T + 5 * S])], state, specs)
    assert rows_of(out3, "late", "spec", "window_start", "count") == {
        (TK, T, 1),
        (HK, T - 20 * S, 1),
        (HK, T - 10 * S, 1),
        (HK, T, 1),
    }
    assert rows_of(out3, "window", "spec", "window_start") == set()
    assert state_counts(state, specs) == {T + SIZE: 2, T + 2 * SIZE: 1}


def test_state_fn_events_late_only_batch() -> None:
    state = FakeGroupState(
        T + 3 * SIZE, (shard_blob("web", filled((TUMBLING,), {T + 3 * SIZE: 4})),)
    )
    out = run(
        (RecordKind.EVENT, "web"),
        [event_frame("web", [T, T + 1, T + SIZE, T + 3 * SIZE - 1])],
        state,
    )
    assert rows_of(out, "late", "spec", "service", "window_start", "count") == {
        (TK, "web", T, 2),
        (TK, "web", T + SIZE, 1),
        (TK, "web", T + 2 * SIZE, 1),
    }
    assert rows_of(out, "window", "window_start") == set()
    assert state_counts(state, (TUMBLING,), "web") == {T + 3 * SIZE: 4}


def test_state_fn_events_empty_frame_emits_nothing_but_keeps_state() -> None:
    state = FakeGroupState(0, (shard_blob("api", filled((TUMBLING,), {T: 3})),))
    out = run((RecordKind.EVENT, "api"), [event_frame("api", [])], state)
    assert len(out) == 0
    assert state_counts(state, (TUMBLING,)) == {T: 3}


@pytest.mark.parametrize(
    ("status", "users"),
    [
        (pd.array([200, None, 503], dtype="Int32"), pd.Series(["a", None, "a"], dtype=object)),
        (pd.Series([200.0, np.nan, 503.0]), pd.Series(["a", np.nan, "a"], dtype=object)),
        (pd.Series([200, None, 503], dtype=object), pd.array(["a", None, "a"], dtype="string")),
    ],
    ids=["Int32-None", "float-NaN", "object-None+string-NA"],
)
def test_state_fn_missing_status_and_user_in_any_pandas_form(status: Any, users: Any) -> None:
    # Arrow -> pandas may give a nullable int column as Int32 or as float64 with NaN, and a
    # string column with None or NA; every form means "absent", never an error or a user
    frame = event_frame("api", [T + 1, T + 2, T + 3], latency=[1.0, np.nan, 3.0])
    frame["status"] = status
    frame["user_id"] = users
    out = run((RecordKind.EVENT, "api"), [frame], FakeGroupState(0))
    ((_, agg),) = window_aggs(out).items()
    assert (agg.count, agg.errors, agg.latency.count, round(agg.users.estimate())) == (3, 1, 2, 1)


def test_state_fn_refuses_state_of_other_window_specs() -> None:
    state = FakeGroupState(0, (filled((WindowSpec.tumbling(5 * S),), {T: 3}).to_bytes(),))
    with pytest.raises(ValueError, match="--checkpoint"):
        run((RecordKind.EVENT, "api"), [event_frame("api", [T])], state, (TUMBLING,))


def test_state_fn_dead_letters_pass_through_with_absolute_counts() -> None:
    state = FakeGroupState(T)
    first = dead_frame(
        [
            (0, 10, T + 1, "invalid_json", "not JSON: Expecting value", b"{oops", 5),
            (1, 11, T + 2, "empty", "record has no value", b"", 0),
        ]
    )
    second = dead_frame([(2, 12, T + 3, "invalid_json", "not JSON: x", b"x" * 4096, 10_000)])
    out = run((RecordKind.DEAD, None), [first, second], state)
    dead = out[out["kind"] == "dead"]
    assert [tuple(r) for r in dead[DEAD_COLUMNS].itertuples(index=False, name=None)] == [
        (0, 10, T + 1, "invalid_json", "not JSON: Expecting value", b"{oops", 5),
        (1, 11, T + 2, "empty", "record has no value", b"", 0),
        (2, 12, T + 3, "invalid_json", "not JSON: x", b"x" * 4096, 10_000),
    ]
    assert dead["service"].isna().all() and dead["window_start"].isna().all()
    assert dead["spec"].isna().all() and dead["agg"].isna().all()
    assert rows_of(out, "dead_count", "reason", "count") == {("invalid_json", 2), ("empty", 1)}
    assert out[out["kind"] == "dead_count"]["partition"].isna().all()

    # next batch: the counts are absolute (every reason, not only the ones seen now)
    out2 = run(
        (RecordKind.DEAD, None),
        [dead_frame([(0, 13, T + 4, "invalid_json", "not JSON", b"[", 1)])],
        state,
    )
    assert len(out2[out2["kind"] == "dead"]) == 1
    assert rows_of(out2, "dead_count", "reason", "count") == {("invalid_json", 3), ("empty", 1)}
    assert DeadCounts.from_bytes(state.get[0]).by_reason == {"invalid_json": 3, "empty": 1}


def test_state_fn_heartbeats_produce_nothing() -> None:
    hb = pd.DataFrame(
        {"kind": [RecordKind.HEARTBEAT] * 2, "event_ms": [T, T + S], "service": [None, None]}
    )
    frames: Iterator[pd.DataFrame] = iter([hb, hb])
    state = FakeGroupState(T)
    out = list(make_state_fn((TUMBLING, HOPPING))((RecordKind.HEARTBEAT, None), frames, state))
    assert out == []
    assert next(frames, None) is None  # the frames were consumed
    assert not state.exists and state.updates == 0


def test_state_fn_refuses_summaries_of_another_watermark() -> None:
    pdf = parsed(np.random.default_rng(1), 50, T, partitions=1)
    cfg = ExecutorConfig((TUMBLING,))
    rows = summary_frame(summarise(pdf, T - 5 * S, T, cfg))
    with pytest.raises(RuntimeError, match="watermark"):
        state_outputs([rows], cfg, T - 4 * S, FakeGroupState(0))


# --- make_state_fn: what each batch decided about time ------------------------------------------

EVENT_GROUP = (RecordKind.EVENT, 0)


def timed_frame(
    rows: list[tuple[str, int, float, int, int, float]], proc_ms: int | None = None
) -> pd.DataFrame:
    """Event rows (service, event ms, kafka ms or NaN, partition, offset, clock offset or NaN)."""
    n = len(rows)
    col: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * 6
    frame = pd.DataFrame(
        {
            "partition": np.array(col[3], dtype=np.int32),
            "offset": np.array(col[4], dtype=np.int64),
            "kafka_ms": np.array(col[2], dtype=np.float64),  # Spark: a nullable long as float
            "kind": [RecordKind.EVENT] * n,
            "event_ms": np.array(col[1], dtype=np.int64),
            "service": list(col[0]),
            "user_id": [f"u{o % 7}" for o in col[4]],
            "latency_ms": np.full(n, 10.0),
            "status": pd.array([200] * n, dtype="Int32"),
            "event_id": [f"e{p}-{o}" for p, o in zip(col[3], col[4], strict=True)],
            "clock_offset_ms": np.array(col[5], dtype=np.float64),
        }
    )
    if proc_ms is not None:
        frame["proc_ms"] = np.full(n, proc_ms, dtype=np.int64)
    return frame


def heartbeat_frame(times: list[int], proc_ms: int) -> pd.DataFrame:
    n = len(times)
    return pd.DataFrame(
        {
            "partition": np.zeros(n, dtype=np.int32),
            "offset": np.arange(n, dtype=np.int64),
            "kafka_ms": np.array(times, dtype=np.float64),
            "kind": [RecordKind.HEARTBEAT] * n,
            "event_ms": np.array(times, dtype=np.int64),
            "service": [None] * n,
            "user_id": [None] * n,
            "latency_ms": np.full(n, np.nan),
            "status": pd.array([None] * n, dtype="Int32"),
            "event_id": [None] * n,
            "proc_ms": np.full(n, proc_ms, dtype=np.int64),
        }
    )


def run_cfg(cfg: ExecutorConfig, frames: list[pd.DataFrame], state: FakeGroupState) -> pd.DataFrame:
    rows = summaries(frames, state.watermark_ms, cfg)
    out = frames_of(make_state_fn(cfg)(EVENT_GROUP, iter(rows), state))
    for f in out:
        assert list(f.columns) == OUTPUT_COLUMNS
    if not out:
        return pd.DataFrame(columns=OUTPUT_COLUMNS)
    return pd.concat(out, ignore_index=True)


def _primary(specs: tuple[WindowSpec, ...]) -> int:
    """Smallest tumbling size, else the largest size dividing every size and slide."""
    tumbling = [s.size_ms for s in specs if s.kind == "tumbling"]
    if tumbling:
        return min(tumbling)
    values = [v for s in specs if s.kind != "session" for v in (s.size_ms, s.slide_ms)]
    return max(d for d in range(1, min(values) + 1) if all(v % d == 0 for v in values))


@pytest.mark.parametrize("specs", TIMED_SPECS, ids=lambda specs: "+".join(s.key for s in specs))
@pytest.mark.parametrize("lateness", [0, 20 * S])
@pytest.mark.parametrize("seed", range(2))
def test_state_fn_time_outputs_agree_with_the_definition(
    specs: tuple[WindowSpec, ...], lateness: int, seed: int
) -> None:
    """Several batches, two services in one group, frames split in two chunks and shuffled."""
    rng = np.random.default_rng(200 + seed)
    cfg = ExecutorConfig(specs, allowed_lateness_ms=lateness, late_events_max=10_000)
    size = _primary(specs)
    assert cfg.primary_ms == size
    longest = max(spec.size_ms for spec in specs)
    state = FakeGroupState(0)
    watermark, max_seen, offset = 0, None, 0
    totals: Counter[str] = Counter()
    for b in range(6):
        now, proc = T + b * 15 * S, T + 300 * S + b * 7_001
        rows = []
        for _ in range(int(rng.integers(0, 12))):
            (e,) = near_boundaries(rng, now, 1, longest)
            k = math.nan if rng.random() < 0.15 else float(e + int(rng.integers(-2 * S, 90 * S)))
            clock = math.nan if rng.random() < 0.5 else float(rng.integers(-3 * S, 3 * S))
            service = str(rng.choice(["api", "web"]))
            rows.append((service, e, k, int(rng.integers(0, 3)), offset, clock))
            offset += 1
        frame = timed_frame(rows, proc).sample(frac=1.0, random_state=seed)  # shuffled
        chunks = [frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :]]
        front = max_seen
        state.watermark_ms = watermark
        out = run_cfg(cfg, chunks, state)

        exp_late: Counter[tuple[str, str, int]] = Counter()
        exp_late_lateness: dict[tuple[str, str, int], list[float]] = {}
        exp_strag: Counter[tuple[str, str, int]] = Counter()
        exp_arrivals: Counter[tuple[str, str, int, str]] = Counter()
        exp_late_events = {}
        for service, e, k, p, o, clock in rows:
            for spec in specs:
                for w in windows_of(e, spec):
                    end = w + spec.size_ms
                    if end <= watermark:
                        exp_late[(spec.key, service, w)] += 1
                        lat = exp_late_lateness.setdefault((spec.key, service, w), [])
                        if not math.isnan(k):
                            lat.append(k - e)
                    elif front is not None and end <= front:
                        exp_strag[(spec.key, service, w)] += 1
            start = e - e % size
            end = start + size
            cls = "late" if end <= watermark else "on_time"
            if cls == "on_time" and front is not None and end <= front:
                cls = "stragglers"
            domains = [("processing", proc - proc % size)]
            if not math.isnan(k):
                domains.append(("broker", int(k) - int(k) % size))
            for domain, bucket in domains:
                exp_arrivals[(domain, service, bucket, "count")] += 1
                exp_arrivals[(domain, service, bucket, cls)] += 1
            if cls == "late":
                exp_late_events[(service, p, o)] = {
                    "window_start": start,
                    "kafka_ms": None if math.isnan(k) else int(k),
                    "metrics": {
                        "event_id": f"e{p}-{o}",
                        "event_time": e,
                        "window_end": end,
                        "watermark": watermark,
                        "behind_ms": watermark - end,
                        "lateness_ms": None if math.isnan(k) else int(k) - e,
                        "clock_offset_ms": None if math.isnan(clock) else int(clock),
                    },
                }

        assert set(out["kind"]) <= {
            "window",
            "late",
            "straggler",
            "arrivals",
            "late_events",
            "broker_times",
        }
        # late: count per window, and a LateAgg of exactly those events
        late_rows = out[out["kind"] == "late"].to_dict("records")
        assert {(r["spec"], r["service"], r["window_start"]): r["count"] for r in late_rows} == (
            dict(exp_late)
        )
        for r in late_rows:
            key = (r["spec"], r["service"], r["window_start"])
            late = LateAgg.from_bytes(r["agg"])
            assert late.count == r["count"] == LateAgg.count_of(r["agg"])
            check_digest(late.lateness, exp_late_lateness[key])
            assert front is not None
            end = r["window_start"] + size_of(r["spec"])
            check_digest(late.overdue, [front - end] * late.count)
        # stragglers per window
        assert rows_of(out, "straggler", "spec", "service", "window_start", "count") == {
            (*k, n) for k, n in exp_strag.items()
        }
        # arrivals by processing-time and broker-time window of the primary size
        got_arrivals = {}
        for r in out[out["kind"] == "arrivals"].to_dict("records"):
            assert r["proc_ms"] == proc
            got_arrivals[(r["spec"], r["service"], r["window_start"])] = (
                r["count"],
                r["late"],
                r["stragglers"],
            )
        expected_arrivals = {
            (d, s, bk): (
                exp_arrivals[(d, s, bk, "count")],
                exp_arrivals[(d, s, bk, "late")],
                exp_arrivals[(d, s, bk, "stragglers")],
            )
            for d, s, bk, c in exp_arrivals
            if c == "count"
        }
        assert got_arrivals == expected_arrivals
        # the late events themselves, judged by the primary window
        got_events = {}
        for e in kept_late_events(out):
            got_events[(e["service"], e["partition"], e["offset"])] = {
                "window_start": e["window_start"],
                "kafka_ms": e["kafka_timestamp"],
                "metrics": {
                    k: e[k]
                    for k in (
                        "event_id",
                        "event_time",
                        "window_end",
                        "watermark",
                        "behind_ms",
                        "lateness_ms",
                        "clock_offset_ms",
                    )
                },
            }
        assert got_events == exp_late_events

        totals["late"] += sum(exp_late.values())
        totals["stragglers"] += sum(exp_strag.values())
        totals["late_events"] += len(exp_late_events)
        if rows:
            max_seen = max([r[1] for r in rows] + ([] if max_seen is None else [max_seen]))
            watermark = max(watermark, max_seen - lateness)
    assert totals["late"] > 0 and totals["late_events"] > 0
    assert (totals["stragglers"] > 0) is (lateness > 0)


def _late_rows(service: str, n: int, first_offset: int = 0) -> list[Any]:
    # n events of window [T, T+10s), arriving when the watermark is T+20s: all late
    return [(service, T + i, float(T + 30 * S), 0, first_offset + i, math.nan) for i in range(n)]


@pytest.mark.parametrize(("n_late", "cap", "kept"), [(6, 4, 4), (6, 6, 6), (3, 10, 3), (5, 0, 0)])
def test_state_fn_late_events_are_capped(n_late: int, cap: int, kept: int) -> None:
    cfg = ExecutorConfig((TUMBLING,), late_events_max=cap)
    on_time = [("api", T + 25 * S, float(T + 26 * S), 0, 100, math.nan)]
    frame = timed_frame(_late_rows("api", n_late) + on_time, proc_ms=T + 40 * S)
    out = run_cfg(cfg, [frame], FakeGroupState(T + 20 * S))
    events = kept_late_events(out)
    assert len(events) == kept
    assert {e["offset"] for e in events} <= set(range(n_late))  # only late events, never others
    # the cap limits the stored events, not the counts
    assert rows_of(out, "late", "spec", "window_start", "count") == {(TK, T, n_late)}
    arrivals = out[(out["kind"] == "arrivals") & (out["spec"] == "processing")]
    assert arrivals["late"].tolist() == [n_late]


def test_state_fn_late_events_cap_keeps_the_group_s_newest_of_all_services() -> None:
    cfg = ExecutorConfig((TUMBLING,), late_events_max=4)
    rows = _late_rows("api", 3) + _late_rows("web", 3, first_offset=3)
    # broker times: api's events newest, then web's (the rows' own have none)
    rows = [(*r[:2], float(T + 100 * S - r[4] * S), *r[3:]) for r in rows]
    out = run_cfg(cfg, [timed_frame(rows)], FakeGroupState(T + 20 * S))
    assert rows_of(out, "late", "service", "count") == {("api", 3), ("web", 3)}
    kept = kept_late_events(out)
    # the cap is shared by the group's services: its newest 4 by broker time, newest first
    assert [(e["service"], e["offset"]) for e in kept] == [
        ("api", 0),
        ("api", 1),
        ("api", 2),
        ("web", 3),
    ]


def test_state_fn_without_processing_or_broker_time_emits_no_such_arrivals() -> None:
    cfg = ExecutorConfig((TUMBLING,))
    rows = [("api", T + 1, math.nan, 0, 0, math.nan), ("api", T + 2, math.nan, 0, 1, math.nan)]
    out = run_cfg(cfg, [timed_frame(rows)], FakeGroupState(0))  # no proc_ms column
    assert rows_of(out, "arrivals", "spec") == set()
    out = run_cfg(cfg, [timed_frame(rows, proc_ms=T + 15 * S)], FakeGroupState(0))
    assert rows_of(out, "arrivals", "spec", "window_start", "count") == {
        ("processing", T + SIZE, 2)
    }


#   user a:  x   x                      session [T+1s, T+5s]  closes at W >= T+35s
#   user b:    x                        session [T+2s, T+2s]  closes at W >= T+32s
#   user c:     x   (service web)       session [T+3s, T+3s]  closes at W >= T+33s
#   T    T+5s         T+30s    T+35s   T+40s
#   |----|-----...-----|---------|------|-->  watermark of the heartbeat-only batches
#   bucket [T, T+10s) (the last event's tumbling window) is kept until W >= T+10s+30s
@pytest.mark.parametrize(
    ("watermark", "closed", "alive"),
    [
        (T + 20 * S, set(), True),  # nothing to close; the tumbling pane is evicted
        (T + 34 * S, {("api", 1), ("web", 1)}, True),  # b and c
        (T + 36 * S, {("api", 2)}, True),  # a joins b in api's bucket (absolute counts)
        (T + 40 * S, set(), False),  # nothing open, buckets evicted: state removed
    ],
)
def test_state_fn_heartbeats_alone_close_sessions_and_evict_state(
    watermark: int, closed: set[tuple[str, int]], alive: bool
) -> None:
    cfg = ExecutorConfig((TUMBLING, SESSION))
    state = FakeGroupState(0)
    first = [
        ("api", T + 1 * S, float(T + 1 * S), 0, 0, math.nan),
        ("api", T + 5 * S, float(T + 5 * S), 0, 1, math.nan),
        ("api", T + 2 * S, float(T + 2 * S), 0, 2, math.nan),
        ("web", T + 3 * S, float(T + 3 * S), 0, 3, math.nan),
    ]
    frame = timed_frame(first)
    frame["user_id"] = ["a", "a", "b", "c"]
    run_cfg(cfg, [frame], state)
    assert state.exists
    # walk the heartbeat-only batches up to this row's watermark
    steps = [T + 20 * S, T + 34 * S, T + 36 * S, T + 40 * S]
    for w in steps[: steps.index(watermark) + 1]:
        state.watermark_ms = w
        out = run_cfg(cfg, [heartbeat_frame([w, w + 1], proc_ms=w + 500)], state)
    assert set(out["kind"]) <= {"window", "broker_times"}
    assert rows_of(out, "window", "spec", "service", "window_start") == {
        (SESSION.key, s, T) for s, _ in closed
    }
    assert rows_of(out, "window", "service", "count") == closed
    for r in out[out["kind"] == "window"].to_dict("records"):
        agg = WindowAgg.from_bytes(r["agg"])
        lengths = {"api": {1: [0.0], 2: [0.0, 4 * S]}, "web": {1: [0.0]}}
        assert check_digest(agg.latency, lengths[r["service"]][r["count"]])  # session lengths
    assert state.exists is alive
    if alive:
        shard = ShardState.from_bytes(state.get[0], cfg)
        assert all(not sw.panes for sw in shard.services.values())  # tumbling pane evicted


def test_state_fn_heartbeats_without_state_create_none() -> None:
    state = FakeGroupState(T + 50 * S)
    out = run_cfg(ExecutorConfig((TUMBLING, SESSION)), [heartbeat_frame([T], T)], state)
    assert out.empty  # (its broker time goes to the dead-letter group: see the next test)
    assert not state.exists and state.updates == 0


def test_state_fn_reports_each_records_broker_time_once() -> None:
    """Events, heartbeats and dead letters: each record's broker time once, every record counted."""
    events = timed_frame(
        [("api", T + 1, float(T + 7), 0, 0, math.nan), ("api", T + 2, math.nan, 0, 1, math.nan)]
    )
    beats = heartbeat_frame([T + 3, T + 3], proc_ms=T).assign(offset=[2, 3])
    dead = dead_frame([(0, o, T + 9, "bad_json", "", b"{", 1) for o in (4, 5)])
    cfg = ExecutorConfig((TUMBLING,), shards=2)
    [chunk] = summaries([events, beats, dead], 0, cfg)
    to_dead = chunk[chunk["kind"].isin([RecordKind.DEAD, SummaryKind.TIMES])]
    out = frames_of(make_state_fn(cfg)((RecordKind.DEAD, 0), iter([to_dead]), FakeGroupState(0)))
    rows = pd.concat(out, ignore_index=True)
    times = rows[rows["kind"] == "broker_times"]
    hist = merge_times(times["agg"])
    assert dict(zip(*(h.tolist() for h in hist), strict=True)) == {T + 7: 1, T + 3: 2, T + 9: 2}
    assert times["count"].sum() == 6  # the event without a broker time is a record too
    # and no event group reports broker times any more
    for shard in (0, 1):
        mine = chunk[(chunk["kind"] != SummaryKind.SHARD) | (chunk["shard"] == shard)]
        ev = frames_of(
            make_state_fn(cfg)((RecordKind.EVENT, shard), iter([mine]), FakeGroupState(0))
        )
        assert not any((f["kind"] == "broker_times").any() for f in ev)


def test_state_fn_counts_events_late_for_their_session_as_late() -> None:
    # watermark T+50s, gap 30s: events at T+1..T+5ms end their own session at <= T+35s, so
    # Spark's session rule drops them; the one at T+25s still opens a session (ends T+55s)
    cfg = ExecutorConfig((TUMBLING, SESSION))
    rows = _late_rows("api", 5) + [("api", T + 25 * S, float(T + 60 * S), 0, 50, math.nan)]
    out = run_cfg(cfg, [timed_frame(rows)], FakeGroupState(T + 50 * S))
    assert rows_of(out, "late", "spec", "window_start", "count") == {
        (TK, T, 5),
        (TK, T + 20 * S, 1),
        (SESSION.key, T, 5),
    }
    row = out[(out["kind"] == "late") & (out["spec"] == SESSION.key)].iloc[0]
    late = LateAgg.from_bytes(row["agg"])
    # overdue = frontier - (event + gap) = T+50s - (T+i+30s) for i in 0..4 ms
    assert 20 * S - 4 <= late.overdue.quantile(0.0) <= late.overdue.quantile(1.0) <= 20 * S
    assert late.lateness.quantile(0.5) == pytest.approx(30 * S, abs=5)
    assert SESSION.key not in set(out[out["kind"] == "window"]["spec"])  # no session closed


# --- the cardinality guard (--max-services) ------------------------------------------------------


def run_guarded(
    frames: list[pd.DataFrame],
    state: FakeGroupState,
    max_services: int,
    slots: tuple[int, ...] = (),
) -> pd.DataFrame:
    """The state function on these frames; `slots`: the quotas the planner gave the read task."""
    cfg = ExecutorConfig((TUMBLING,), max_services=max_services)
    read = ExecutorConfig((TUMBLING,), max_services=max_services, slots=slots)
    rows = summaries(frames, state.watermark_ms, read)
    return without_all(
        pd.concat(frames_of(make_state_fn(cfg)((RecordKind.EVENT, 0), iter(rows), state)))
    )


def _named_frames(names: list[str], t: int) -> list[pd.DataFrame]:
    frames = []
    for i, name in enumerate(names):
        f = event_frame(name, [t + i, t + i + 1])
        f["offset"] = np.arange(2 * i, 2 * i + 2)  # Kafka order: the names in list order
        frames.append(f)
    return frames


def _windows_by_service(out: pd.DataFrame) -> dict[str, int]:
    return {r["service"]: r["count"] for r in out[out["kind"] == "window"].to_dict("records")}


def test_guard_tracks_the_first_names_and_counts_the_rest_under_overflow() -> None:
    state = FakeGroupState(T)
    names = [f"s{i}" for i in range(7)]
    out = run_guarded(_named_frames(names, T + 100), state, max_services=3)
    assert _windows_by_service(out) == {"s0": 2, "s1": 2, "s2": 2, OVERFLOW_SERVICE: 8}
    (over,) = out[out["kind"] == "overflow"].to_dict("records")
    assert over["count"] == 8
    assert json.loads(over["metrics"]) == {"names": 4, "shard": 0, "tracked": 3}
    # the next batch: known names keep their rows, a new one still overflows
    out = run_guarded(_named_frames(["s1", "s9"], T + 200), state, max_services=3)
    assert _windows_by_service(out) == {"s1": 4, OVERFLOW_SERVICE: 10}
    # windows closed, state gone: the names still hold their slots while idle for < 1 hour...
    later = FakeGroupState(T + 30_000, state.get)
    run_guarded(_named_frames(["s1"], T + 40_000), later, max_services=3)
    out = run_guarded(_named_frames(["s8"], T + 41_000), later, max_services=3)
    assert _windows_by_service(out) == {OVERFLOW_SERVICE: 2}
    # ...and give them up after: s0 and s2 had no events for an hour (s1 still has state)
    hour_later = FakeGroupState(T + 3_700_000, later.get)
    out = run_guarded(_named_frames(["s8", "s9", "s7"], T + 3_710_000), hour_later, 3)
    assert _windows_by_service(out) == {"s8": 2, "s9": 2, OVERFLOW_SERVICE: 2}
    shard = ShardState.from_bytes(hour_later.get[0], ExecutorConfig((TUMBLING,)))
    assert set(shard.names) == {"s1", "s8", "s9"}


def test_guard_takes_the_quota_the_read_tasks_carry() -> None:
    # --max-services 3, but the planner gave this shard 5 slots (others left theirs free)
    state = FakeGroupState(T)
    names = [f"s{i}" for i in range(7)]
    out = run_guarded(_named_frames(names, T + 100), state, max_services=3, slots=(5,))
    assert _windows_by_service(out) == {**{f"s{i}": 2 for i in range(5)}, OVERFLOW_SERVICE: 4}
    (over,) = out[out["kind"] == "overflow"].to_dict("records")
    assert json.loads(over["metrics"]) == {"names": 2, "shard": 0, "tracked": 5}
    # a smaller quota later admits no new name, and the tracked ones keep their slots
    out = run_guarded(_named_frames(["s0", "s6"], T + 200), state, max_services=3, slots=(2,))
    assert _windows_by_service(out) == {"s0": 4, OVERFLOW_SERVICE: 6}


def test_guard_reports_what_it_tracks_in_a_batch_without_new_names() -> None:
    state = FakeGroupState(T)
    run_guarded(_named_frames(["a", "b"], T + 100), state, max_services=10)
    out = run_guarded(_named_frames(["a"], T + 200), state, max_services=10)
    (over,) = out[out["kind"] == "overflow"].to_dict("records")
    assert over["count"] == 0
    assert json.loads(over["metrics"]) == {"names": 0, "shard": 0, "tracked": 2}


def test_chunks_of_one_batch_with_different_quotas_are_refused() -> None:
    cfg = ExecutorConfig((TUMBLING,), max_services=4)
    state = FakeGroupState(T)
    rows = summaries(_named_frames(["a"], T + 100), T, replace(cfg, slots=(2,)))
    rows += summaries(_named_frames(["b"], T + 100), T, replace(cfg, slots=(3,)))
    with pytest.raises(ValueError, match=r"slots \[2, 3\]"):
        list(make_state_fn(cfg)((RecordKind.EVENT, 0), iter(rows), state))


def test_guard_off_tracks_every_name() -> None:
    out = run_guarded(_named_frames([f"s{i}" for i in range(50)], T), FakeGroupState(0), 0)
    assert len(out[out["kind"] == "window"]) == 50


# --- the shard's `*` ------------------------------------------------------------------------------


def _service_frame(service: str, times: list[int], rng: np.random.Generator) -> pd.DataFrame:
    n = len(times)
    return event_frame(
        service,
        times,
        latency=rng.lognormal(3.0, 0.8, n).tolist(),
        status=rng.choice([200, 200, 200, 503], n).tolist(),
        users=[f"u{u}" for u in rng.integers(0, 40, n)],
    )


def _all_rows(out: pd.DataFrame) -> dict[tuple[str, int], dict[str, Any]]:
    sel = out[(out["kind"] == "window") & (out["service"] == ALL_SERVICES)]
    return {(r["spec"], int(r["window_start"])): r for r in sel.to_dict("records")}


def _services_merged(state: FakeGroupState, specs: tuple[WindowSpec, ...]) -> dict[Any, WindowAgg]:
    """Each open window of every service the shard holds, merged over services (reference)."""
    shard = ShardState.from_bytes(state.get[0], ExecutorConfig(specs))
    out: dict[Any, list[WindowAgg]] = {}
    for name, sw in shard.services.items():
        if name == ALL_SERVICES:
            continue
        aggs = sw.pane_aggs()
        for spec in specs:
            for start in {p - p % spec.size_ms for p in aggs} if spec.kind == "tumbling" else ():
                inside = [a for p, a in aggs.items() if start <= p < spec.end(start)]
                out.setdefault((spec.key, start), []).append(WindowAgg.merged(inside))
    return {k: WindowAgg.merged(v) for k, v in out.items()}


def test_the_shard_keeps_a_star_of_all_its_services_including_untouched_ones() -> None:
    rng = np.random.default_rng(3)
    state = FakeGroupState(0)
    first = [
        _service_frame("a", [T + i * 97 for i in range(40)], rng),
        _service_frame("b", [T + 500 + i * 131 for i in range(60)], rng),
        _service_frame("c", [T + SIZE + i * 50 for i in range(30)], rng),
    ]
    out = run((RecordKind.EVENT, 0), first, state, with_all=True)
    stars = _all_rows(out)
    assert {k: r["count"] for k, r in stars.items()} == {(TK, T): 100, (TK, T + SIZE): 30}
    # the next batch touches only "a" in the first window: `*` still holds b's events there
    out = run(
        (RecordKind.EVENT, 0),
        [_service_frame("a", [T + 9_000, T + 9_500], rng)],
        state,
        with_all=True,
    )
    stars = _all_rows(out)
    assert set(stars) == {(TK, T)}
    star = stars[(TK, T)]
    assert star["count"] == 102 and star["partition"] == 0  # the shard it is of
    got = WindowAgg.from_bytes(star["agg"])
    want = _services_merged(state, (TUMBLING,))[(TK, T)]
    assert (got.count, got.errors) == (want.count, want.errors)
    assert got.users.registers.tobytes() == want.users.registers.tobytes()  # the same union
    assert got.latency.count == want.latency.count
    for q in (0.5, 0.9, 0.99):  # digests merged in another grouping: within the rank error
        assert got.latency.quantile(q) == pytest.approx(want.latency.quantile(q), rel=0.05)


def test_a_state_from_before_the_star_builds_it_from_its_services() -> None:
    rng = np.random.default_rng(4)
    state = FakeGroupState(0)
    run(
        (RecordKind.EVENT, 0),
        [
            _service_frame(s, [T + 10 * i + k for i in range(20)], rng)
            for k, s in enumerate(["a", "b", "c"])
        ],
        state,
    )
    shard = ShardState.from_bytes(state.get[0], ExecutorConfig((TUMBLING,)))
    del shard.services[ALL_SERVICES]  # as a state written before shards kept a `*`
    old = FakeGroupState(0, (shard.to_bytes(),))
    out = run((RecordKind.EVENT, 0), [_service_frame("a", [T + 5_000], rng)], old, with_all=True)
    assert _all_rows(out)[(TK, T)]["count"] == 61
