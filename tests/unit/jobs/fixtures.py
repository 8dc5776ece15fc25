"""What the job's unit tests share: Spark's GroupState stand-in, window specs, rows and chunks.

`FakeGroupState` implements the part of `pyspark.sql.streaming.state.GroupState` the state
function relies on (`exists`, `get`, `update`, `remove`, `getCurrentWatermarkMs`): that is the
function's contract with Spark.

Timelines in the comments: `[` / `)` the closed start and open end of a window, `|` a pane
boundary, `x` an event, `W` the watermark in force for the batch. Tumbling windows are 10 s
long (spec key "10000"); hopping windows are 30 s long every 10 s (spec key "30000-10000"),
so both are made of 10 s panes. T is a boundary of every window here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.panes.windows import ServiceWindows
from jobs.parse.columns import decode_columns
from jobs.parse.parser import RecordKind
from jobs.state.aggregate import make_state_fn
from jobs.summary.late_events import members
from jobs.summary.schema import SummaryKind
from jobs.summary.settings import ExecutorConfig
from sketches.tdigest import TDigest
from tests.fixtures import S
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

SIZE = 10 * S
TUMBLING = WindowSpec.tumbling(SIZE)
HOPPING = WindowSpec(30 * S, 10 * S)
SESSION = WindowSpec.session(30 * S, SIZE)
TK, HK = TUMBLING.key, HOPPING.key  # "10000", "30000-10000"

#: Window specs the time rules are checked with, against brute force.
TIMED_SPECS = [
    (TUMBLING,),
    (HOPPING,),
    (TUMBLING, HOPPING),
    (WindowSpec.tumbling(60 * S), WindowSpec(60 * S, 15 * S)),
]


class FakeGroupState:
    """The part of Spark's GroupState that the state function uses (properties as in PySpark).

    `value` is the state as stored (None: there is none); `updates` counts the writes.
    """

    def __init__(self, watermark_ms: int, value: tuple[Any, ...] | None = None) -> None:
        self.watermark_ms = watermark_ms
        self.value = value
        self.updates = 0

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self.value is None:
            raise ValueError("state does not exist")
        return tuple(self.value)

    def update(self, new_value: tuple[Any, ...]) -> None:
        assert isinstance(new_value, tuple) and new_value is not None
        self.value = new_value
        self.updates += 1

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 (Spark's name)
        return self.watermark_ms

    def remove(self) -> None:
        self.value = None


# --- ServiceWindows: adding rows, reading panes ---------------------------------------------


def ms(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def add(
    sw: ServiceWindows,
    times: Sequence[int],
    watermark: int,
    latency: Sequence[float] | None = None,
    status: Sequence[int] | None = None,
    users: Sequence[str | None] | None = None,
) -> tuple[set[int], Counter[tuple[str, int]]]:
    """`sw.add` with defaults for the columns a test does not care about."""
    n = len(times)
    added = sw.add(
        ms(*times),
        np.array(latency if latency is not None else [1.0] * n, dtype=np.float64),
        np.array(status if status is not None else [200] * n, dtype=np.int64),
        np.array(users if users is not None else ["u"] * n, dtype=object),
        watermark,
    )
    return added.touched, added.late_counts()


def counts(sw: ServiceWindows) -> dict[int, int]:
    """Pane start -> events in it."""
    return {p: a.count for p, a in sw.pane_aggs().items()}


def filled(specs: tuple[WindowSpec, ...], panes: dict[int, int]) -> ServiceWindows:
    """ServiceWindows whose panes hold these event counts (one event per ms from the start).

    Added with a watermark before every window (0 would already close windows before the epoch).
    """
    sw = ServiceWindows(specs)
    for start, n in panes.items():
        add(sw, [start + i for i in range(n)], -(2**62))
    assert counts(sw) == panes
    return sw


def windows_of(t: int, spec: WindowSpec) -> list[int]:
    """Starts of the windows holding event time t, straight from the definition (no panes)."""
    first = (t - spec.size_ms) // spec.slide_ms + 1  # smallest k with k * slide + size > t
    return [k * spec.slide_ms for k in range(first, t // spec.slide_ms + 1)]


def size_of(key: str) -> int:
    return WindowSpec.from_key(key).size_ms


def check_digest(d: TDigest, expected: Sequence[float]) -> bool:
    """Exact stats always; every value when the digest keeps them all. True if it did."""
    assert d.count == len(expected)
    if not expected:
        return False
    # integer-valued ms: min, max and sum are exact in float64
    assert (d.min, d.max, d.sum) == (min(expected), max(expected), float(sum(expected)))
    means, weights = d.centroids
    if not (weights == 1.0).all():
        return False
    assert sorted(means.tolist()) == sorted(expected)
    return True


def timed_add(
    sw: ServiceWindows,
    times: list[int],
    arrival: list[float],
    watermark: int,
    front: int | None,
) -> Any:
    n = len(times)
    return sw.add(
        ms(*times),
        np.full(n, 1.0),
        np.full(n, 200, dtype=np.int64),
        np.array([f"u{i}" for i in range(n)], dtype=object),
        watermark,
        arrival_ms=np.array(arrival, dtype=np.float64),
        frontier_ms=front,
    )


def near_boundaries(rng: np.random.Generator, now: int, n: int, longest: int) -> list[int]:
    """n event times up to 50 s + `longest` before `now`, on a 5 s grid give or take 1 ms.

    Window ends, watermarks and frontiers then often coincide or miss by one ms, which is where
    the rules (end <= W, end <= F) can go wrong; uniform ms times would almost never hit them.
    """
    steps = rng.integers(-(50 * S + longest) // (5 * S), 2, n)
    jitter = rng.choice(np.array([-1, 0, 0, 1]), n)
    return (now + 5 * S * steps + jitter).tolist()


# --- parsed rows, cut into chunks as read tasks read them ----------------------------------


def parsed(rng: np.random.Generator, n: int, now: int, partitions: int = 3) -> pd.DataFrame:
    """n parsed rows: events of three services (some late, some stragglers), heartbeats, dead."""
    kinds = rng.choice([RecordKind.EVENT] * 18 + [RecordKind.HEARTBEAT, RecordKind.DEAD], n)
    event_ms = now - rng.integers(0, 90 * S, n)
    kafka = (now + rng.integers(0, 2 * S, n)).astype(np.float64)
    kafka[rng.random(n) < 0.1] = np.nan
    part = rng.integers(0, partitions, n)
    offsets = np.zeros(n, dtype=np.int64)
    for p in range(partitions):
        sel = part == p
        offsets[sel] = np.arange(int(sel.sum()))
    is_event = kinds == RecordKind.EVENT
    pdf = pd.DataFrame(
        {
            "partition": part.astype(np.int32),
            "offset": offsets,
            "kafka_ms": kafka,
            "kind": kinds,
            "event_ms": np.where(kinds == RecordKind.DEAD, 0, event_ms),
            "service": np.where(is_event, rng.choice(["api", "web", "pay"], n), None),
            "user_id": np.where(is_event, [f"u{i}" for i in rng.integers(0, 40, n)], None),
            "latency_ms": np.where(is_event, rng.lognormal(4, 1, n), np.nan),
            "status": pd.array(np.where(is_event, rng.choice([200, 500], n), 0), dtype="Int32"),
            "event_id": [f"e{i}" for i in range(n)],
            "reason": np.where(kinds == RecordKind.DEAD, "invalid_json", None),
            "detail": np.where(kinds == RecordKind.DEAD, "not JSON", None),
            "raw": [b"{x" if k == RecordKind.DEAD else None for k in kinds],
            "raw_size": np.where(kinds == RecordKind.DEAD, 2, 0).astype(np.int32),
            "clock_offset_ms": np.where(rng.random(n) < 0.5, np.nan, 7.0),
        }
    )
    return pdf.sort_values(["partition", "offset"], ignore_index=True)


def chunks_of(pdf: pd.DataFrame, rng: np.random.Generator) -> list[pd.DataFrame]:
    """Each partition's rows cut into consecutive chunks of random sizes, as read tasks read."""
    out = []
    for _, rows in pdf.groupby("partition"):
        cuts = [0, *sorted(set(rng.integers(1, max(len(rows), 2), 3).tolist())), len(rows)]
        out += [rows.iloc[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    return out


def state_outputs(
    summaries: list[pd.DataFrame], cfg: ExecutorConfig, watermark: int, state: FakeGroupState
) -> pd.DataFrame:
    state.watermark_ms = watermark
    fn = make_state_fn(cfg)
    pdf = pd.concat(summaries, ignore_index=True)
    event = pdf[pdf["kind"].isin([SummaryKind.SHARD, RecordKind.HEARTBEAT])]
    out = list(fn((RecordKind.EVENT, 0), iter([event]), state))
    return pa.concat_tables(out).to_pandas()


def comparable(out: pd.DataFrame) -> tuple[dict[Any, Any], dict[Any, WindowAgg]]:
    """Everything but the t-digests exactly; the window aggregates apart."""
    exact: dict[Any, Any] = {}
    aggs = {}
    for r in out.astype(object).where(out.notna(), None).to_dict("records"):
        key = (r["kind"], r["spec"], r["service"], r["window_start"], r["partition"], r["offset"])
        if r["kind"] == "window":
            agg = WindowAgg.from_bytes(r["agg"])
            aggs[key] = agg
            exact[key] = (r["count"], agg.errors, agg.users.registers.tobytes())
        elif r["kind"] == "late":
            exact[key] = (r["count"], LateAgg.from_bytes(r["agg"]).lateness.count)
        elif r["kind"] == "late_events":  # the events themselves, in the order kept
            exact[key] = (r["count"], list(members(decode_columns(r["agg"]), 0)))
        else:
            exact[key] = (r["count"], r["metrics"])
    return exact, aggs
