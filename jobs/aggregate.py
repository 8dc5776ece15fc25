"""Per-service event-time windows in Spark state; Spark's watermark rule applied to raw rows.

Why `applyInPandasWithState` and not `groupBy(window(...)).count()`: the built-in aggregation drops
late rows before any code of ours sees them, and one streaming query can only have one sink.
Here the stateful function sees every raw row of its group, so it can (a) apply exactly Spark's
rule for windowed aggregation (a row is late when its window end <= the watermark in force) while
counting the late rows instead of hiding them, and (b) pass dead letters through to the same
sink. The watermark itself is still Spark's (`withWatermark` upstream, read here through
`GroupState.getCurrentWatermarkMs`), checkpointed with the state. See docs/architecture.md.

Runs on executors. Groups are (group, shard): event groups ("event", shard) each hold the
services that hash to that shard, and every heartbeat is copied into every shard, so a batch of
heartbeats alone still calls every event group: that is how a quiet stream's sessions close and
its state is evicted (Spark's own event-time timeouts would make Spark drop rows older than the
watermark before we can count them as late). Dead letters form one group ("dead", 0).

Besides window results, each batch emits what it decided about time (docs/time.md): late rows
per window (count and lateness digests), stragglers per window, per-event arrival counts in
processing-time and broker-time windows, the late events themselves (capped), and the broker
timestamps of its records, from which the sink measures freshness (tidegauge/core/freshness.py).

This module is the state function; its parts are modules of their own: the panes of a service
(jobs/panes.py), the state codec (jobs/state.py) and the output rows (jobs/rows.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from jobs.panes import ServiceWindows
from jobs.parse import KIND_DEAD, KIND_EVENT
from jobs.rows import append_row, frame, new_rows
from jobs.state import DeadCounts, ShardState
from tidegauge.core.events import BUILT_IN_FIELDS, EventField, event_fields
from tidegauge.core.freshness import encode_times
from tidegauge.core.plugins import ensure_plugins
from tidegauge.core.registry import metrics
from tidegauge.core.windows import (
    LATE,
    STRAGGLER,
    WindowSpec,
    classify_many,
    frontier,
    primary_size,
    tumbling_start,
    tumbling_starts,
)

__all__ = ["StateConfig", "arrival_counts", "make_state_fn"]


def _metric_names() -> tuple[str, ...]:
    return tuple(m.name for m in metrics())


@dataclass(frozen=True)
class StateConfig:
    """What the state function needs from the job's configuration (pickled to executors)."""

    specs: tuple[WindowSpec, ...]
    allowed_lateness_ms: int = 0
    #: Late events kept per group and batch for the late store (the store itself is capped too).
    late_events_max: int = 1_000
    #: Event groups; fixed for a checkpoint (services are hashed onto shards).
    shards: int = 1
    #: Plugin modules of the driver when the query was built, and the metric and event field
    #: names they give: executors load the same plugins and check they got the same registry.
    plugins: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = field(default_factory=_metric_names)
    fields: tuple[EventField, ...] = field(default_factory=event_fields)

    def __post_init__(self) -> None:
        if self.allowed_lateness_ms < 0:
            raise ValueError("allowed lateness must be >= 0")
        if self.shards < 1:
            raise ValueError("shards must be >= 1")
        if self.late_events_max < 0:
            raise ValueError("late_events_max must be >= 0")

    @property
    def primary_ms(self) -> int:
        """Window size of the per-event views (`tidegauge.core.windows.primary_size`)."""
        return primary_size(self.specs)


def arrival_counts(
    bucket_ms: npt.NDArray[np.int64], kinds: npt.NDArray[np.int64]
) -> dict[int, tuple[int, int, int]]:
    """Window start -> (events, late, stragglers) of one batch, from per-event buckets/classes."""
    out: dict[int, tuple[int, int, int]] = {}
    if not len(bucket_ms):
        return out
    uniq, inverse = np.unique(bucket_ms, return_inverse=True)
    n = np.bincount(inverse)
    late = np.bincount(inverse, weights=kinds == LATE).astype(np.int64)
    strag = np.bincount(inverse, weights=kinds == STRAGGLER).astype(np.int64)
    for i, b in enumerate(uniq.tolist()):
        out[b] = (int(n[i]), int(late[i]), int(strag[i]))
    return out


def _extra_columns(
    pdf: pd.DataFrame, fields: tuple[EventField, ...]
) -> dict[str, npt.NDArray[Any]] | None:
    """The columns of registered event fields, by column name (numbers as float, NaN = absent)."""
    out: dict[str, npt.NDArray[Any]] = {}
    for f in fields[len(BUILT_IN_FIELDS) :]:
        col = pdf[f.column]
        if f.type == "string":
            out[f.column] = col.to_numpy(dtype=object)
        else:
            out[f.column] = col.to_numpy(dtype=np.float64, na_value=np.nan)
    return out or None


def _classes(
    event_ms: npt.NDArray[np.int64], size_ms: int, watermark: int, front: int | None
) -> npt.NDArray[np.int64]:
    """Vectorised `classify` for tumbling windows of `size_ms`."""
    return classify_many(tumbling_starts(event_ms, size_ms) + size_ms, watermark, front)


def _service_batch(
    rows: dict[str, list[Any]],
    service: str,
    sw: ServiceWindows,
    pdf: pd.DataFrame,
    watermark: int,
    front: int | None,
    proc_ms: int | None,
    cfg: StateConfig,
    late_budget: int,
) -> int:
    """Add one service's events of the batch and append every output row they cause.

    At most `late_budget` late events are kept (the cap is per group and batch, shared by the
    group's services); returns how many were kept.
    """
    event_ms = pdf["event_ms"].to_numpy(dtype=np.int64)
    arrival = pdf["kafka_ms"].to_numpy(dtype=np.float64, na_value=np.nan)
    added = sw.add(
        event_ms,
        pdf["latency_ms"].to_numpy(dtype=np.float64, na_value=np.nan),
        pdf["status"].to_numpy(dtype=np.int64, na_value=-1),
        pdf["user_id"].to_numpy(dtype=object),
        watermark,
        arrival_ms=arrival,
        frontier_ms=front,
        extra=_extra_columns(pdf, cfg.fields),
    )
    results = sw.windows(added.touched, watermark)
    for (spec, start), agg in sorted(results.items(), key=lambda kv: (kv[0][0].key, kv[0][1])):
        append_row(
            rows,
            kind="window",
            spec=spec.key,
            service=service,
            window_start=start,
            count=agg.count,
            metrics=json.dumps(agg.metrics(spec.size_ms)),
            agg=agg.to_bytes(),
        )
    for (key, start), late in sorted(added.late.items()):
        append_row(
            rows,
            kind="late",
            spec=key,
            service=service,
            window_start=start,
            count=late.count,
            agg=late.to_bytes(),
        )
    for (key, start), n in sorted(added.stragglers.items()):
        append_row(rows, kind="straggler", spec=key, service=service, window_start=start, count=n)
    if not len(event_ms):
        return 0
    size = cfg.primary_ms
    classes = _classes(event_ms, size, watermark, front)
    buckets = {}
    if proc_ms is not None:
        buckets["processing"] = np.full(
            len(event_ms), tumbling_start(proc_ms, size), dtype=np.int64
        )
    known = ~np.isnan(arrival)
    if known.any():
        buckets["broker"] = tumbling_starts(arrival[known].astype(np.int64), size)
    for domain, starts in buckets.items():
        kinds = classes if domain == "processing" else classes[known]
        for start, (n, n_late, n_strag) in sorted(arrival_counts(starts, kinds).items()):
            append_row(
                rows,
                kind="arrivals",
                spec=domain,
                service=service,
                window_start=start,
                count=n,
                metrics=json.dumps(
                    {"late": n_late, "stragglers": n_strag, "proc_ms": proc_ms},
                    sort_keys=True,
                ),
            )
    late_idx = np.flatnonzero(classes == LATE)[: max(late_budget, 0)]
    if len(late_idx):
        part = pdf.iloc[late_idx]
        for i, (p, o, k, e, eid) in enumerate(
            zip(
                part["partition"].tolist(),
                part["offset"].tolist(),
                part["kafka_ms"].tolist(),
                part["event_ms"].tolist(),
                part["event_id"].tolist(),
                strict=True,
            )
        ):
            start = tumbling_start(e, size)
            k = None if k is None or k != k else int(k)
            append_row(
                rows,
                kind="late_event",
                service=service,
                window_start=start,
                partition=p,
                offset=o,
                kafka_ms=k,
                metrics=json.dumps(
                    {
                        "event_id": eid,
                        "event_time": int(e),
                        "window_end": start + size,
                        "watermark": watermark,
                        "behind_ms": watermark - start - size,
                        "lateness_ms": None if k is None else k - int(e),
                        "clock_offset_ms": _int_or_none(part["clock_offset_ms"].iloc[i])
                        if "clock_offset_ms" in part
                        else None,
                    },
                    sort_keys=True,
                ),
            )
    return len(late_idx)


def _int_or_none(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _broker_times_row(rows: dict[str, list[Any]], kafka_ms: pd.Series) -> None:
    """Append the histogram of these records' broker timestamps (tidegauge/core/freshness.py)."""
    if len(kafka_ms):
        times = kafka_ms.to_numpy(dtype=np.float64, na_value=np.nan)
        append_row(rows, kind="broker_times", agg=encode_times(times))


def _events(
    pdfs: Iterator[pd.DataFrame], state: Any, cfg: StateConfig, shard_no: int = 0
) -> Iterator[pd.DataFrame]:
    watermark = int(state.getCurrentWatermarkMs())
    front = frontier(watermark, cfg.allowed_lateness_ms)
    shard = ShardState.from_bytes(state.get[0], cfg) if state.exists else ShardState(cfg.shards)
    # One add per batch, not per Arrow chunk: how Spark chunks a group depends on shuffle fetch
    # order, and the sketches must depend only on the batch's rows so a replay is byte-identical.
    frames = list(pdfs)
    if not frames:
        return
    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    proc_ms = None
    if "proc_ms" in pdf and len(pdf):
        proc_ms = _int_or_none(pdf["proc_ms"].iloc[0])
    events = pdf[pdf["kind"] == KIND_EVENT]
    if len(events):
        # A stable order of rows inside a batch (Kafka position), whatever the shuffle did.
        events = events.sort_values(["partition", "offset"], kind="stable")
    by_service = {str(k): g for k, g in events.groupby("service", sort=True)} if len(events) else {}
    rows: dict[str, list[Any]] = new_rows()
    # Every shard gets a copy of each heartbeat: shard 0 reports theirs.
    _broker_times_row(rows, events["kafka_ms"] if shard_no else pdf["kafka_ms"])
    empty = (
        events.iloc[0:0] if len(events) else pdf.iloc[0:0].assign(event_ms=pd.Series(dtype="int64"))
    )
    late_budget = cfg.late_events_max
    for service in sorted(set(by_service) | set(shard.services)):
        sw = shard.services.get(service)
        if sw is None:
            sw = shard.services[service] = ServiceWindows(cfg.specs)
        # A service without events in this batch is still called: its sessions may close.
        part = by_service.get(service, empty)
        late_budget -= _service_batch(
            rows, service, sw, part, watermark, front, proc_ms, cfg, late_budget
        )
        sw.evict(watermark)
        if sw.is_empty:
            del shard.services[service]
    if shard.services:
        state.update((shard.to_bytes(),))
    elif state.exists:
        state.remove()
    yield frame(rows)


def _dead(pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    counts = DeadCounts.from_bytes(state.get[0]) if state.exists else DeadCounts()
    times: list[pd.Series] = []
    for pdf in pdfs:
        counts.add(pdf["reason"].tolist())
        times.append(pdf["kafka_ms"])
        out = pdf[["partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size"]].copy()
        out.insert(0, "kind", "dead")
        yield frame({c: out[c].tolist() for c in out.columns})
    state.update((counts.to_bytes(),))
    rows = new_rows()
    for reason, n in counts.by_reason.items():
        append_row(rows, kind="dead_count", reason=reason, count=n)
    if times:
        _broker_times_row(rows, pd.concat(times))
    yield frame(rows)


def make_state_fn(
    cfg: StateConfig | tuple[WindowSpec, ...],
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The `applyInPandasWithState` function, grouped by (group, shard).

    Group "event" holds events and heartbeats (copied into every shard), "dead" dead letters;
    anything else is drained and ignored.
    """
    config = cfg if isinstance(cfg, StateConfig) else StateConfig(cfg)

    def fn(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        ensure_plugins(config.plugins, config.metric_names, [f.name for f in config.fields])
        group = key[0]
        if group == KIND_EVENT:
            yield from _events(pdfs, state, config, int(key[1]))
        elif group == KIND_DEAD:
            yield from _dead(pdfs, state)
        else:
            for _ in pdfs:
                pass

    return fn
