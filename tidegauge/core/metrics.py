"""The built-in metrics, registered into tidegauge/core/registry.py when this module is imported.

count, errors, latency (t-digest), users (HyperLogLog), lateness and overdue (t-digests) and the
sliding windows' timeline: one `Metric` declaration each, in the order their fields are
reported, plus the digest helpers plugins use for their own percentile metrics
(`update_digest_of`, `digest_quantiles`) and `fraction_at_least` (the lateness what-if).

A `WindowAgg` (tidegauge/core/window_agg.py) holds one state per registered metric; that module
imports this one, so the built-ins are registered, first, before any aggregate is built,
whichever module a process imports first. Plugins register theirs after (tidegauge/core/plugins.py).
Pure (numpy + sketches, no Spark).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sketches.hll import HyperLogLog
from sketches.tdigest import TDigest
from tidegauge.core.registry import (
    Batch,
    Metric,
    ResultContext,
    finite_or_none,
    metrics,
    register_metric,
)
from tidegauge.core.sliding import Timeline

__all__ = [
    "BUILT_IN_METRICS",
    "COUNT",
    "ERRORS",
    "LATENCY",
    "LATENESS",
    "LATENESS_PERCENTILES",
    "OVERDUE",
    "PERCENTILES",
    "TIMELINE",
    "TIMELINE_FIELDS",
    "USERS",
    "added_result_fields",
    "digest_quantiles",
    "field_label",
    "fraction_at_least",
    "update_digest_of",
]

#: Percentiles reported for every window: metric name -> quantile.
PERCENTILES: dict[str, float] = {
    "p50": 0.5,
    "p90": 0.9,
    "p95": 0.95,
    "p99": 0.99,
    "p999": 0.999,
}

#: Lateness (arrival - event time, ms) percentiles reported for every window.
LATENESS_PERCENTILES: dict[str, float] = {"lateness_p50": 0.5, "lateness_p99": 0.99}

#: How the count and errors metrics store their state: one little-endian i64.
_INT = struct.Struct("<q")


def fraction_at_least(digest: TDigest, threshold_ms: float, total: int) -> float:
    """Estimated share of `total` events whose digest value is >= `threshold_ms` (0 if none).

    Values are whole milliseconds, so ">= L" is "> L - 0.5": the CDF is read half a
    millisecond below the threshold, which keeps exact answers for exactly-represented values.
    """
    if total <= 0 or digest.count == 0:
        return 0.0
    below = float(digest.cdf(threshold_ms - 0.5))
    return digest.count * (1.0 - below) / total


def _lateness_metrics(digest: TDigest) -> dict[str, float | None]:
    if not digest.count:
        empty: dict[str, float | None] = dict.fromkeys(LATENESS_PERCENTILES)
        empty["lateness_max"] = None
        return empty
    q = digest.quantile(np.array(list(LATENESS_PERCENTILES.values())))
    out: dict[str, float | None] = {
        name: _finite(float(q[i])) for i, name in enumerate(LATENESS_PERCENTILES)
    }
    out["lateness_max"] = _finite(float(digest.max))
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# --- the built-in metrics, in the order their fields are reported --------------------------------


def _pack_int(value: int) -> bytes:
    return _INT.pack(value)


def _unpack_int(data: bytes) -> int:
    return int(_INT.unpack(data)[0])


def _sum(states: Sequence[int]) -> int:
    return sum(states)


def _int_metric(
    name: str, update: Any, results: Any, fields: tuple[str, ...], labels: Mapping[str, str]
) -> Metric:
    # Named functions, not lambdas: the job pickles the registry to its executors.
    return Metric(
        name=name,
        empty=int,
        update=update,
        merge=_sum,
        results=results,
        fields=fields,
        encode=_pack_int,
        decode=_unpack_int,
        labels=labels,
    )


def _count_results(state: int, context: ResultContext) -> dict[str, Any]:
    return {"count": state, "events_per_s": state * 1000.0 / context.duration_ms}


def _errors_results(state: int, context: ResultContext) -> dict[str, Any]:
    return {"errors": state, "error_rate": state / context.count if context.count else 0.0}


def _users_results(state: HyperLogLog, _: ResultContext) -> dict[str, Any]:
    return {"distinct_users": round(state.estimate())}


def _lateness_results(state: TDigest, _: ResultContext) -> dict[str, Any]:
    return dict(_lateness_metrics(state))


def _no_results(state: Any, _: ResultContext) -> dict[str, Any]:
    return {}


def _shift(state: TDigest, delta_ms: float) -> TDigest:
    return state.shifted(delta_ms)


def _lateness_update(state: TDigest, batch: Batch) -> TDigest:
    return _digest_update(state, batch, "lateness_ms")


def _overdue_update(state: TDigest, batch: Batch) -> TDigest:
    return _digest_update(state, batch, "overdue_ms")


def _count_update(state: int, batch: Batch) -> int:
    return state + batch.n


def _errors_update(state: int, batch: Batch) -> int:
    status = batch.get("status")
    return state if status is None else state + int(np.count_nonzero(status >= 500))


def _digest_update(state: TDigest, batch: Batch, column: str) -> TDigest:
    values = batch.get(column)
    if values is not None and len(values):
        state.update(values)
    return state


def update_digest_of(state: TDigest, values: npt.NDArray[Any] | None) -> TDigest:
    """Add a column's values to a t-digest, leaving out NaN (absent) ones."""
    if values is not None and len(values):
        values = np.asarray(values, dtype=np.float64)
        values = values[~np.isnan(values)]
        if len(values):
            state.update(values)
    return state


def digest_quantiles(state: TDigest, quantiles: Mapping[str, float]) -> dict[str, float | None]:
    """{name: the digest's quantile q} (None for an empty digest or a non-finite answer)."""
    if not state.count:
        return dict.fromkeys(quantiles)
    q = state.quantile(np.array(list(quantiles.values())))
    return {name: finite_or_none(float(q[i])) for i, name in enumerate(quantiles)}


def _latency_update(state: TDigest, batch: Batch) -> TDigest:
    return update_digest_of(state, batch.get("latency_ms"))


def _latency_results(state: TDigest, _: ResultContext) -> dict[str, Any]:
    out: dict[str, Any] = {
        "latency_count": state.count,
        "latency_mean": state.mean if state.count else None,
    }
    out.update(digest_quantiles(state, PERCENTILES))
    return out


def _users_update(state: HyperLogLog, batch: Batch) -> HyperLogLog:
    hashes = batch.get("user_hash")
    if hashes is not None and len(hashes):
        state.update_hashes(hashes)
    return state


COUNT = register_metric(
    _int_metric(
        "count",
        _count_update,
        _count_results,
        ("count", "events_per_s"),
        {"count": "events", "events_per_s": "events/s"},
    )
)
ERRORS = register_metric(
    _int_metric(
        "errors",
        _errors_update,
        _errors_results,
        ("errors", "error_rate"),
        {"errors": "errors", "error_rate": "error rate"},
    )
)
LATENCY = register_metric(
    Metric(
        name="latency",
        empty=TDigest,
        update=_latency_update,
        merge=TDigest.merged,
        results=_latency_results,
        fields=("latency_count", "latency_mean", *PERCENTILES),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        labels={"latency_mean": "mean ms", **{p: f"{p} ms" for p in PERCENTILES}},
    )
)
USERS = register_metric(
    Metric(
        name="users",
        empty=HyperLogLog,
        update=_users_update,
        merge=HyperLogLog.merged,
        results=_users_results,
        fields=("distinct_users",),
        encode=HyperLogLog.to_bytes,
        decode=HyperLogLog.from_bytes,
        labels={"distinct_users": "users"},
    )
)
LATENESS = register_metric(
    Metric(
        name="lateness",
        empty=TDigest,
        update=_lateness_update,
        merge=TDigest.merged,
        results=_lateness_results,
        fields=(*LATENESS_PERCENTILES, "lateness_max"),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        lateness=True,
    )
)
OVERDUE = register_metric(
    Metric(
        name="overdue",
        empty=TDigest,
        update=_overdue_update,
        merge=TDigest.merged,
        results=_no_results,
        fields=(),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        lateness=True,
        shift=_shift,
    )
)


def _timeline_update(state: Timeline, batch: Batch) -> Timeline:
    # Only a job with sliding windows gives the column (jobs/panes/windows.py): each event's bucket.
    buckets = batch.get("timeline_ms")
    if buckets is None:
        return state
    status = batch.get("status")
    errors = np.zeros(len(buckets), bool) if status is None else np.asarray(status) >= 500
    return state.add(buckets, errors)


def _timeline_results(state: Timeline, _: ResultContext) -> dict[str, Any]:
    peaks = state.peaks()
    if peaks is None:
        return dict.fromkeys(TIMELINE_FIELDS)
    return {
        "peak_events": peaks.events,
        "peak_start": peaks.start_ms,
        "peak_errors": peaks.errors,
        "peak_errors_start": peaks.errors_start_ms,
    }


#: A sliding window's busiest interval (tidegauge/core/sliding.py): None for other windows.
TIMELINE_FIELDS = ("peak_events", "peak_start", "peak_errors", "peak_errors_start")
TIMELINE = register_metric(
    Metric(
        name="timeline",
        empty=Timeline,
        update=_timeline_update,
        merge=Timeline.merged,
        results=_timeline_results,
        fields=TIMELINE_FIELDS,
        encode=Timeline.to_bytes,
        decode=Timeline.from_bytes,
        labels={"peak_events": "peak events", "peak_errors": "peak errors"},
    )
)

#: The metrics every Tidegauge has; others come from plugins (docs/extending.md).
BUILT_IN_METRICS: tuple[Metric, ...] = (
    COUNT,
    ERRORS,
    LATENCY,
    USERS,
    LATENESS,
    OVERDUE,
    TIMELINE,
)


def added_result_fields() -> tuple[str, ...]:
    """Result fields of the registered metrics that are not built in (plugins), in order."""
    built_in = {m.name for m in BUILT_IN_METRICS}
    return tuple(f for m in metrics() if m.name not in built_in for f in m.fields)


def field_label(name: str) -> str:
    """A short label for a result field, as its metric declares it (else the field name)."""
    for m in metrics():
        if name in m.labels:
            return m.labels[name]
    return name
