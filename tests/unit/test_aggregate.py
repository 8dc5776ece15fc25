"""Per-service window state and the `applyInPandasWithState` function (jobs/aggregate.py), no Spark.

`make_state_fn` is driven directly with pandas frames and `FakeGroupState`, a stand-in that
implements the part of `pyspark.sql.streaming.state.GroupState` the function relies on
(`exists`, `get`, `update`, `getCurrentWatermarkMs`): that is the function's contract with Spark.

Timelines in the comments: `[` / `)` the closed start and open end of a window, `x` an event,
`W` the watermark in force for the batch. Windows are 10 s long and start at T.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from jobs.aggregate import OUTPUT_SCHEMA, DeadCounts, WindowCounts, make_state_fn
from jobs.parse import KIND_DEAD, KIND_EVENT, KIND_HEARTBEAT

S = 1_000
SIZE = 10 * S
T = 1_795_341_600_000  # a window boundary: T % SIZE == 0
OUTPUT_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]


def ms(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# --- WindowCounts.add: the watermark rule ---------------------------------------------------


@pytest.mark.parametrize(
    ("event", "watermark", "late"),
    [
        #   T        T+10s
        #   [x--------)          W=0 (first batch): nothing is late
        (T, 0, False),
        #   [x--------)  W       event exactly at the window start, W well before the end
        #   W                    (W = T+5s)
        (T, T + 5 * S, False),
        #   [--------x)          event at end-1ms, same window, still open
        (T + SIZE - 1, T + 5 * S, False),
        #   [x--------)W         window end == watermark -> late, even at the window start
        (T, T + SIZE, True),
        #   [--------x)W         ... and at end-1ms
        (T + SIZE - 1, T + SIZE, True),
        #   [--------x)          window end == watermark + 1 -> accepted
        #           W^           (W = T+10s-1ms)
        (T + SIZE - 1, T + SIZE - 1, False),
        (T, T + SIZE - 1, False),
        #   [--------x)|[x-------)    event exactly at the NEXT window's start with W at the
        #              W              first window's end: its own window is open
        (T + SIZE, T + SIZE, False),
        #   [x--------)........W      long past
        (T, T + 10 * SIZE, True),
    ],
)
def test_add_applies_the_watermark_rule(event: int, watermark: int, late: bool) -> None:
    counts = WindowCounts(SIZE)
    updated, late_counts = counts.add(ms(event), watermark)
    start = event - event % SIZE
    if late:
        assert updated == {}
        assert late_counts == {start: 1}
        assert counts.panes == {}  # late rows never reach a window
    else:
        assert updated == {start: 1}
        assert late_counts == {}
        assert counts.panes == {start: 1}


def test_add_splits_one_batch_into_accepted_and_late() -> None:
    #   T        T+10s     T+20s     T+30s
    #   [x-x----x)[x-------x)[-x------)
    #                      W = T+10s: window T is late, T+10s and T+20s are open
    counts = WindowCounts(SIZE)
    updated, late = counts.add(
        ms(T, T + 3 * S, T + SIZE - 1, T + SIZE, T + 2 * SIZE - 1, T + 2 * SIZE + 1), T + SIZE
    )
    assert late == {T: 3}
    assert updated == {T + SIZE: 2, T + 2 * SIZE: 1}
    assert counts.panes == {T + SIZE: 2, T + 2 * SIZE: 1}
    assert all(isinstance(k, int) and isinstance(v, int) for k, v in updated.items())
    assert all(isinstance(k, int) and isinstance(v, int) for k, v in late.items())


def test_add_accumulates_across_calls_and_reports_absolute_counts() -> None:
    counts = WindowCounts(SIZE)
    assert counts.add(ms(T + 1, T + 2, T + SIZE), 0) == ({T: 2, T + SIZE: 1}, {})
    # second call: only the touched window is reported, with its absolute count (2 + 3)
    assert counts.add(ms(T + 3, T + 4, T + 5), 0) == ({T: 5}, {})
    assert counts.panes == {T: 5, T + SIZE: 1}
    # duplicate timestamps are separate rows (nothing is de-duplicated here)
    assert counts.add(ms(T + SIZE, T + SIZE), 0) == ({T + SIZE: 3}, {})


def test_add_empty_batch() -> None:
    counts = WindowCounts(SIZE, {T: 4})
    assert counts.add(ms(), T) == ({}, {})
    assert counts.panes == {T: 4}


def test_add_late_rows_do_not_touch_an_open_pane_of_the_same_window() -> None:
    # the pane was opened in an earlier batch; now the watermark has passed its end
    counts = WindowCounts(SIZE, {T: 7})
    assert counts.add(ms(T + 1, T + 2), T + SIZE) == ({}, {T: 2})
    assert counts.panes == {T: 7}


def test_add_before_the_epoch_floors() -> None:
    counts = WindowCounts(SIZE)
    assert counts.add(ms(-1, -SIZE), -2 * SIZE) == ({-SIZE: 2}, {})


# --- WindowCounts.evict ---------------------------------------------------------------------


def test_evict_removes_only_windows_that_ended_at_or_before_the_watermark() -> None:
    #   T         T+10s     T+20s     T+30s
    #   [---------)[--------)[--------)
    #                       W          T and T+10s end <= W: gone; T+20s stays
    counts = WindowCounts(SIZE, {T: 1, T + SIZE: 2, T + 2 * SIZE: 3})
    assert sorted(counts.evict(T + 2 * SIZE)) == [T, T + SIZE]
    assert counts.panes == {T + 2 * SIZE: 3}
    #                              W       one ms before T+20s's end: stays
    assert counts.evict(T + 3 * SIZE - 1) == []
    assert counts.panes == {T + 2 * SIZE: 3}
    #                               W      at its end: gone
    assert counts.evict(T + 3 * SIZE) == [T + 2 * SIZE]
    assert counts.panes == {}
    assert counts.evict(T + 10 * SIZE) == []


def test_evict_with_initial_watermark_keeps_everything() -> None:
    counts = WindowCounts(SIZE, {T: 1})
    assert counts.evict(0) == []
    assert counts.panes == {T: 1}


# --- serialisation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "panes",
    [
        {},
        {T: 1},
        {T: 3, T + SIZE: 10**12, -SIZE: 2, 0: 5},
    ],
)
def test_window_counts_round_trip(panes: dict[int, int]) -> None:
    counts = WindowCounts(SIZE, dict(panes))
    back = WindowCounts.from_bytes(counts.to_bytes(), SIZE)
    assert back == counts
    assert back.panes == panes
    assert all(isinstance(k, int) for k in back.panes)  # JSON keys are strings on the wire
    # and it keeps working after the round trip
    assert back.add(ms(T + 1), 0)[0] == {T: panes.get(T, 0) + 1}


def test_window_counts_refuse_another_window_size() -> None:
    blob = WindowCounts(10 * S, {T: 1}).to_bytes()
    with pytest.raises(ValueError, match=r"10000 ms windows but --window is 5000 ms") as e:
        WindowCounts.from_bytes(blob, 5 * S)
    assert "--checkpoint" in str(e.value)  # says how to fix it


def test_window_counts_refuse_another_state_version() -> None:
    blob = json.dumps({"v": 99, "size": SIZE, "panes": {}}).encode()
    with pytest.raises(ValueError, match="version 99"):
        WindowCounts.from_bytes(blob, SIZE)


def test_dead_counts_add_and_round_trip() -> None:
    counts = DeadCounts()
    counts.add(["invalid_json", "empty", "invalid_json"])
    counts.add([])
    counts.add(iter(["wrong_type"]))
    assert counts.by_reason == {"invalid_json": 2, "empty": 1, "wrong_type": 1}
    back = DeadCounts.from_bytes(counts.to_bytes())
    assert back == counts
    assert DeadCounts.from_bytes(DeadCounts().to_bytes()) == DeadCounts()


# --- make_state_fn: the contract with applyInPandasWithState ----------------------------------


class FakeGroupState:
    """The part of Spark's GroupState that the state function uses (properties as in PySpark)."""

    def __init__(self, watermark_ms: int, value: tuple[Any, ...] | None = None) -> None:
        self.watermark_ms = watermark_ms
        self._value = value
        self.updates = 0

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("state does not exist")
        return tuple(self._value)

    def update(self, new_value: tuple[Any, ...]) -> None:
        assert isinstance(new_value, tuple) and new_value is not None
        self._value = new_value
        self.updates += 1

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 (Spark's name)
        return self.watermark_ms


def event_frame(service: str, times: list[int]) -> pd.DataFrame:
    """Parsed rows of one service as Spark hands them over (only the columns that matter)."""
    n = len(times)
    return pd.DataFrame(
        {
            "partition": np.zeros(n, dtype=np.int32),
            "offset": np.arange(n, dtype=np.int64),
            "kafka_ms": np.full(n, T, dtype=np.int64),
            "kind": [KIND_EVENT] * n,
            "event_time": pd.to_datetime(np.array(times, dtype=np.int64), unit="ms", utc=True),
            "event_ms": np.array(times, dtype=np.int64),
            "service": [service] * n,
        }
    )


DEAD_COLUMNS = ["partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size"]


def dead_frame(rows: list[tuple[int, int, int, str, str, bytes, int]]) -> pd.DataFrame:
    pdf = pd.DataFrame(rows, columns=DEAD_COLUMNS)
    pdf.insert(3, "kind", KIND_DEAD)
    pdf["service"] = None
    pdf["event_ms"] = None
    return pdf


def run(
    key: tuple[Any, ...], frames: list[pd.DataFrame], state: FakeGroupState, size: int = SIZE
) -> pd.DataFrame:
    out = list(make_state_fn(size)(key, iter(frames), state))
    for f in out:
        assert list(f.columns) == OUTPUT_COLUMNS
    if not out:
        return pd.DataFrame(columns=OUTPUT_COLUMNS)
    return pd.concat(out, ignore_index=True)


def rows_of(out: pd.DataFrame, kind: str, *cols: str) -> set[tuple[Any, ...]]:
    sel = out[out["kind"] == kind]
    return {tuple(r) for r in sel[list(cols)].itertuples(index=False, name=None)}


def test_state_fn_events_first_batch() -> None:
    #   T         T+10s     T+20s
    #   [x-x--x---)[x-------)        W = 0: nothing late
    state = FakeGroupState(0)
    out = run(
        (KIND_EVENT, "api"),
        [event_frame("api", [T + 1 * S, T + 2 * S, T + 11 * S]), event_frame("api", [T + 5 * S])],
        state,
    )
    assert rows_of(out, "window", "service", "window_start", "count") == {
        ("api", T, 3),
        ("api", T + SIZE, 1),
    }
    assert set(out["kind"]) == {"window"}
    assert out["partition"].isna().all() and out["reason"].isna().all()
    assert state.updates == 1
    assert WindowCounts.from_bytes(state.get[0], SIZE).panes == {T: 3, T + SIZE: 1}


def test_state_fn_events_next_batch_counts_late_rows_per_window_and_evicts() -> None:
    # state from batch 1: {T: 3, T+10s: 1}; watermark in force for batch 2 is T+15s
    #   T         T+10s     T+20s     T+30s
    #   [x-x------)[-x--W---)[----x---)
    #    late: 2    +1 -> 2    new -> 1
    state = FakeGroupState(T + 15 * S, (WindowCounts(SIZE, {T: 3, T + SIZE: 1}).to_bytes(),))
    out = run(
        (KIND_EVENT, "api"),
        [event_frame("api", [T + 1 * S, T + 12 * S]), event_frame("api", [T + 3 * S, T + 25 * S])],
        state,
    )
    # window rows: absolute counts of the windows this batch touched
    assert rows_of(out, "window", "service", "window_start", "count") == {
        ("api", T + SIZE, 2),
        ("api", T + 2 * SIZE, 1),
    }
    # late rows: this batch's late rows per window, summed over the frames of the group
    assert rows_of(out, "late", "service", "window_start", "count") == {("api", T, 2)}
    assert len(out) == 3
    # window T ended at or before the watermark: evicted from state
    assert WindowCounts.from_bytes(state.get[0], SIZE).panes == {T + SIZE: 2, T + 2 * SIZE: 1}


def test_state_fn_events_late_only_batch() -> None:
    state = FakeGroupState(T + 3 * SIZE, (WindowCounts(SIZE, {T + 3 * SIZE: 4}).to_bytes(),))
    out = run(
        (KIND_EVENT, "web"), [event_frame("web", [T, T + 1, T + SIZE, T + 3 * SIZE - 1])], state
    )
    assert rows_of(out, "late", "service", "window_start", "count") == {
        ("web", T, 2),
        ("web", T + SIZE, 1),
        ("web", T + 2 * SIZE, 1),
    }
    assert rows_of(out, "window", "window_start") == set()
    assert WindowCounts.from_bytes(state.get[0], SIZE).panes == {T + 3 * SIZE: 4}


def test_state_fn_events_empty_frame_emits_nothing_but_keeps_state() -> None:
    state = FakeGroupState(0, (WindowCounts(SIZE, {T: 3}).to_bytes(),))
    out = run((KIND_EVENT, "api"), [event_frame("api", [])], state)
    assert len(out) == 0
    assert WindowCounts.from_bytes(state.get[0], SIZE).panes == {T: 3}


def test_state_fn_refuses_state_of_another_window_size() -> None:
    state = FakeGroupState(0, (WindowCounts(5 * S, {T: 3}).to_bytes(),))
    with pytest.raises(ValueError, match="--checkpoint"):
        run((KIND_EVENT, "api"), [event_frame("api", [T])], state, size=SIZE)


def test_state_fn_dead_letters_pass_through_with_absolute_counts() -> None:
    state = FakeGroupState(T)
    first = dead_frame(
        [
            (0, 10, T + 1, "invalid_json", "not JSON: Expecting value", b"{oops", 5),
            (1, 11, T + 2, "empty", "record has no value", b"", 0),
        ]
    )
    second = dead_frame([(2, 12, T + 3, "invalid_json", "not JSON: x", b"x" * 4096, 10_000)])
    out = run((KIND_DEAD, None), [first, second], state)
    dead = out[out["kind"] == "dead"]
    assert [tuple(r) for r in dead[DEAD_COLUMNS].itertuples(index=False, name=None)] == [
        (0, 10, T + 1, "invalid_json", "not JSON: Expecting value", b"{oops", 5),
        (1, 11, T + 2, "empty", "record has no value", b"", 0),
        (2, 12, T + 3, "invalid_json", "not JSON: x", b"x" * 4096, 10_000),
    ]
    assert dead["service"].isna().all() and dead["window_start"].isna().all()
    assert rows_of(out, "dead_count", "reason", "count") == {("invalid_json", 2), ("empty", 1)}
    assert out[out["kind"] == "dead_count"]["partition"].isna().all()

    # next batch: the counts are absolute (every reason, not only the ones seen now)
    out2 = run(
        (KIND_DEAD, None),
        [dead_frame([(0, 13, T + 4, "invalid_json", "not JSON", b"[", 1)])],
        state,
    )
    assert len(out2[out2["kind"] == "dead"]) == 1
    assert rows_of(out2, "dead_count", "reason", "count") == {("invalid_json", 3), ("empty", 1)}
    assert DeadCounts.from_bytes(state.get[0]).by_reason == {"invalid_json": 3, "empty": 1}


def test_state_fn_heartbeats_produce_nothing() -> None:
    hb = pd.DataFrame(
        {"kind": [KIND_HEARTBEAT] * 2, "event_ms": [T, T + S], "service": [None, None]}
    )
    frames: Iterator[pd.DataFrame] = iter([hb, hb])
    state = FakeGroupState(T)
    out = list(make_state_fn(SIZE)((KIND_HEARTBEAT, None), frames, state))
    assert out == []
    assert next(frames, None) is None  # the frames were consumed
    assert not state.exists and state.updates == 0
