"""Dimension slices through the read task's summaries and the state function (no Spark).

A slice is a group like a service (jobs/summary/slices.py): its windows, late rows and
stragglers follow the same rules. Checked here against the definition: a slice's window counts
are the events of that value accepted in that window, a service's values add up to it (late rows
too), the `*` slice of a value is the sum over services, a batch cut into chunks in any order
gives the same slices, and the busiest values keep their slice while the rest are `(other)`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from jobs.state.codec import ShardState
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import summarise, summary_frame
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import (
    TUMBLING,
    FakeGroupState,
    chunks_of,
    comparable,
    parsed,
    state_outputs,
)
from tidegauge.core.dimensions import (
    OTHER_VALUE,
    SEP,
    Dimension,
    field_column,
    register_dimension_fields,
    split_group,
)
from tidegauge.core.events import unregister_field
from tidegauge.core.windows import is_late

ROUTES = np.array(["/a", "/b", "/c", "/d", "/e", "/f"])
ROUTE = Dimension.parse("route")


@pytest.fixture
def route_field() -> Iterator[None]:
    register_dimension_fields([ROUTE])
    yield
    unregister_field("route")


def _with_routes(pdf: pd.DataFrame, rng: np.random.Generator, p: list[float]) -> pd.DataFrame:
    out = pdf.copy()
    routes = rng.choice(ROUTES, len(out), p=np.array(p) / sum(p))
    routes[rng.random(len(out)) < 0.1] = None  # events without a route are in no route slice
    out[field_column("route")] = np.where(out["service"].notna(), routes, None)
    return out


def _cfg(values: int) -> ExecutorConfig:
    return ExecutorConfig(
        (TUMBLING,),
        allowed_lateness_ms=20 * S,
        late_events_max=25,
        dimensions=(ROUTE, Dimension.parse("status_class")),
        dimension_values=values,
    )


def _rows(out: pd.DataFrame, kind: str) -> dict[tuple[str, int], int]:
    rows = out[out["kind"] == kind]
    got: Counter[tuple[str, int]] = Counter()
    for n, s, c in zip(rows["service"], rows["window_start"], rows["count"], strict=True):
        got[(n, int(s))] += int(c)
    return dict(got)


def _batch(rng: np.random.Generator, b: int, p: list[float]) -> pd.DataFrame:
    pdf = _with_routes(parsed(rng, 800, T + b * 40 * S), rng, p)
    pdf["event_id"] = [f"b{b}e{i}" for i in range(len(pdf))]  # no repeats across batches
    return pdf


def _by_value(events: pd.DataFrame, start_of: Any) -> Counter[tuple[str, int]]:
    """(route slice name, window start) -> events, for each service and for `*`."""
    out: Counter[tuple[str, int]] = Counter()
    for service, route, t in zip(
        events["service"], events[field_column("route")], events["event_ms"], strict=True
    ):
        if route is None:
            continue
        for who in (service, "*"):
            out[(f"{who}{SEP}route{SEP}{route}", start_of(int(t)))] += 1
    return out


@pytest.mark.usefixtures("route_field")
def test_a_slice_holds_its_values_accepted_and_late_events_batch_after_batch() -> None:
    rng = np.random.default_rng(3)
    cfg = _cfg(values=10)  # more than the routes: every value keeps its slice
    state = FakeGroupState(0)
    watermark = 0
    size = TUMBLING.size_ms

    def start_of(t: int) -> int:
        return t - t % size

    accepted: Counter[tuple[str, int]] = Counter()
    for b in range(4):
        pdf = _batch(rng, b, [6, 5, 4, 3, 2, 1])
        proc = T + b * 40 * S + 500
        out = state_outputs(
            [summary_frame(summarise(pdf, watermark, proc, cfg))], cfg, watermark, state
        )
        events = pdf[pdf["kind"] == "event"]
        late = np.array([is_late(start_of(int(t)) + size, watermark) for t in events["event_ms"]])
        accepted.update(_by_value(events[~late], start_of))
        want_late = _by_value(events[late], start_of)
        windows = _rows(out, "window")
        route_windows = {k: c for k, c in windows.items() if f"{SEP}route{SEP}" in k[0]}
        assert route_windows == {k: accepted[k] for k in route_windows}  # absolute counts
        touched = {k for k in _by_value(events[~late], start_of)}
        assert touched <= set(route_windows)
        route_late = {k: c for k, c in _rows(out, "late").items() if f"{SEP}route{SEP}" in k[0]}
        assert route_late == dict(want_late)
        if b:
            assert route_late, "a batch after the first has late events"
        watermark = max(watermark, int(pdf["event_ms"].max()) - cfg.allowed_lateness_ms)
    kept = ShardState.from_bytes(state.value[0], cfg)  # type: ignore[index]
    assert {"api" + SEP + "route", "*" + SEP + "route"} <= set(kept.hitters)


@pytest.mark.usefixtures("route_field")
def test_any_chunking_in_any_order_gives_the_same_slices() -> None:
    rng = np.random.default_rng(5)
    cfg = _cfg(values=3)
    whole_state, chunked_state = FakeGroupState(0), FakeGroupState(0)
    watermark = 0
    for b in range(3):
        pdf = _batch(rng, b, [9, 1, 5, 1, 3, 1])
        proc = T + b * 40 * S + 500
        whole = [summary_frame(summarise(pdf, watermark, proc, cfg))]
        parts = [summary_frame(summarise(c, watermark, proc, cfg)) for c in chunks_of(pdf, rng)]
        rng.shuffle(parts)  # type: ignore[arg-type]
        exact_a, _ = comparable(state_outputs(whole, cfg, watermark, whole_state))
        exact_c, _ = comparable(state_outputs(parts, cfg, watermark, chunked_state))
        assert exact_a == exact_c
        assert any(SEP in str(k[2]) for k in exact_a)
        watermark = max(watermark, int(pdf["event_ms"].max()) - cfg.allowed_lateness_ms)


@pytest.mark.usefixtures("route_field")
def test_the_busiest_values_keep_their_slice_and_the_rest_are_other() -> None:
    rng = np.random.default_rng(8)
    cfg = _cfg(values=2)
    pdf = _batch(rng, 0, [30, 2, 20, 1, 8, 1])
    out = state_outputs([summary_frame(summarise(pdf, 0, T + 500, cfg))], cfg, 0, FakeGroupState(0))
    events = pdf[(pdf["kind"] == "event") & pdf[field_column("route")].notna()]
    got: Counter[tuple[str, str]] = Counter()
    for (name, _), c in _rows(out, "window").items():
        parts = split_group(name)
        if parts is not None and parts[1] == "route":
            got[(parts[0], parts[2])] += c
    for who in ("api", "web", "pay", "*"):
        mine = events if who == "*" else events[events["service"] == who]
        counts = Counter(mine[field_column("route")].tolist())
        top = sorted(counts, key=lambda v: (-counts[v], v))[:2]
        want = {v: counts[v] for v in top}
        want[OTHER_VALUE] = sum(c for v, c in counts.items() if v not in top)
        assert {v: c for (w, v), c in got.items() if w == who} == want, who


def _retried(rng: np.random.Generator, b: int, earlier: pd.DataFrame | None) -> pd.DataFrame:
    """A batch of new events, retries of some of them (later in Kafka order, another chunk),
    retries of the batch before's events, and other services' events reusing an id."""
    pdf = _batch(rng, b, [6, 5, 4, 3, 2, 1])
    events = pdf[pdf["kind"] == "event"]
    again = [events.sample(60, random_state=b)]
    if earlier is not None:
        again.append(earlier[earlier["kind"] == "event"].sample(60, random_state=b + 10))
    shared = events.sample(40, random_state=b + 20).copy()  # one request id, another service
    shared["service"] = shared["service"].map({"api": "web", "web": "pay", "pay": "api"})
    out = pd.concat([pdf, *again, shared], ignore_index=True)
    for p in range(3):  # the copies after the batch's own records in every partition
        mine = out["partition"] == p
        out.loc[mine, "offset"] = np.arange(int(mine.sum()))
    return out


def _replayed(
    pdf: pd.DataFrame, watermark: int, seen: dict[tuple[str, str], tuple[int, bool]], size: int
) -> tuple[Counter[tuple[str, int]], Counter[tuple[str, int]]]:
    """The definition (docs/time.md), event by event in Kafka order: (slice, window) -> events
    accepted, and -> duplicates dropped; `seen`: accepted (service, id) -> (window end, has a
    route)."""
    accepted: Counter[tuple[str, int]] = Counter()
    dropped: Counter[tuple[str, int]] = Counter()
    events = pdf[pdf["kind"] == "event"].sort_values(["partition", "offset"], kind="stable")
    for service, event_id, route, t in zip(
        events["service"],
        events["event_id"],
        events[field_column("route")],
        events["event_ms"],
        strict=True,
    ):
        start = int(t) - int(t) % size
        if is_late(start + size, watermark):
            continue
        into = dropped if (service, event_id) in seen else accepted
        seen.setdefault((service, event_id), (start + size, route is not None))
        if route is not None:
            for who in (service, "*"):
                into[(f"{who}{SEP}route{SEP}{route}", start)] += 1
    return accepted, dropped


@pytest.mark.usefixtures("route_field")
def test_slices_drop_what_their_service_drops_and_hold_no_ids_of_their_own() -> None:
    """Retries in the same batch (another chunk) and in the next one are duplicates of their
    slices exactly as of their service; an id two services log is two events in `*`'s slice;
    a service's slices add no ids to the state (only services and `*`'s slices hold them)."""
    rng = np.random.default_rng(11)
    cfg = _cfg(values=10)  # every route keeps its slice
    state = FakeGroupState(0)
    watermark, size = 0, TUMBLING.size_ms
    seen: dict[tuple[str, str], tuple[int, bool]] = {}
    accepted: Counter[tuple[str, int]] = Counter()
    earlier = None
    for b in range(3):
        pdf = _retried(rng, b, earlier)
        proc = T + b * 40 * S + 500
        parts = [summary_frame(summarise(c, watermark, proc, cfg)) for c in chunks_of(pdf, rng)]
        out = state_outputs(parts, cfg, watermark, state)
        got, dropped = _replayed(pdf, watermark, seen, size)
        accepted.update(got)
        windows = _rows(out, "window")
        route_windows = {k: c for k, c in windows.items() if f"{SEP}route{SEP}" in k[0]}
        assert route_windows == {k: accepted[k] for k in route_windows}
        assert set(got) <= set(route_windows)
        dups = {k: c for k, c in _rows(out, "duplicate").items() if f"{SEP}route{SEP}" in k[0]}
        assert dups == dict(dropped)
        assert any(k[0].startswith("*") for k in dropped) and any(
            not k[0].startswith("*") for k in dropped
        )
        # Held: each accepted id whose window is open, for its service and for `*`'s slice of
        # each dimension it has a value of (status_class: every event; route: most).
        held = sum(2 + has_route for end, has_route in seen.values() if end > watermark)
        assert len(ShardState.from_bytes(state.value[0], cfg).ids) == held  # type: ignore[index]
        watermark = max(watermark, int(pdf["event_ms"].max()) - cfg.allowed_lateness_ms)
        earlier = pdf
