"""The metric registry: one declaration per metric, read by every part that handles windows.

A `Metric` says how its state starts, how it updates from a batch's columns, how two states
merge, which result fields it reports and how its state is stored. The job's stateful step,
the Redis sink, the read API, `tidegauge query` and the dashboard's frames iterate the registry
instead of naming fields, so a new metric is one `register_metric` call (docs/extending.md).

Order is the order of registration: the built-in metrics (tidegauge/core/metrics.py) first,
then plugins (`TIDEGAUGE_PLUGINS`, tidegauge/core/plugins.py). A metric's `name` is its tag
in stored aggregates (`WindowAgg.to_bytes`): never rename or reuse one; an aggregate stored
before a metric existed reads back with that metric empty.

Executors get the same registry by loading the same plugin modules: the job ships their names
(and the metric names, to check) to its executors (tidegauge/core/plugins.py). So register
metrics in a plugin module, not from code that only the driver runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Batch",
    "Metric",
    "ResultContext",
    "finite_or_none",
    "metrics",
    "register_metric",
    "unregister_metric",
]


@dataclass(frozen=True)
class Batch:
    """The events of one batch that fall into one pane, as columns.

    `n` is the number of events. Columns are numpy arrays named after event fields and derived
    values; a column a metric needs may be absent (a session aggregate has no status), in which
    case the metric leaves its state alone. Built-in columns:

    * `latency_ms` (float, NaN = absent), `status` (int, < 0 = absent): one per event;
    * `user_hash` (uint32): one per event that has a user (`sketches.tg64.hash32`);
    * `lateness_ms` (float, NaN = unknown): one per event, arrival - event time;
    * `overdue_ms` (float): one per event that arrived after its pane was emitted;
    * any registered optional event field, by its name: one per event (NaN / None = absent).
    """

    n: int
    columns: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)

    def get(self, name: str) -> npt.NDArray[Any] | None:
        """The column `name`, or None when this batch does not carry it."""
        return self.columns.get(name)


@dataclass(frozen=True)
class ResultContext:
    """What results may depend on besides their own state: the window's count and duration."""

    count: int
    duration_ms: int


@dataclass(frozen=True)
class Metric:
    """One metric of a window: state, update, merge, results and storage.

    `update(state, batch)` and `merge(states)` return the new state (they may reuse a mutable
    one); `merge` must refuse states of incompatible parameters with ValueError.
    `results(state, context)` returns exactly `fields`, in that order (None where undefined).
    `lateness` metrics are skipped by readers that do not ask for lateness (they are large and
    only the lateness views read them). `shift(state, delta_ms)` re-bases a metric measured
    against a pane's end onto its window's end (overdue).
    """

    name: str
    empty: Callable[[], Any]
    update: Callable[[Any, Batch], Any]
    merge: Callable[[Sequence[Any]], Any]
    results: Callable[[Any, ResultContext], Mapping[str, Any]]
    fields: tuple[str, ...]
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    lateness: bool = False
    shift: Callable[[Any, float], Any] | None = None
    #: Short labels of the result fields for tables and charts (field name when missing).
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or len(self.name.encode()) > 255:
            raise ValueError(f"metric name must be 1..255 bytes, got {self.name!r}")


_REGISTRY: dict[str, Metric] = {}


def register_metric(m: Metric) -> Metric:
    """Add `m` to the registry; a name or result field already taken is a ValueError."""
    if m.name in _REGISTRY:
        raise ValueError(f"metric {m.name!r} is already registered")
    taken = {f for other in _REGISTRY.values() for f in other.fields}
    clash = sorted(taken & set(m.fields))
    if clash:
        raise ValueError(f"metric {m.name!r}: result fields {clash} are already reported")
    _REGISTRY[m.name] = m
    return m


def unregister_metric(name: str) -> None:
    """Remove a metric (tests that register one clean up with this)."""
    _REGISTRY.pop(name, None)


def metrics() -> tuple[Metric, ...]:
    """A snapshot of the registered metrics, in registration order."""
    return tuple(_REGISTRY.values())


def finite_or_none(x: float) -> float | None:
    """`x`, or None for NaN and infinities (JSON has neither)."""
    return x if np.isfinite(x) else None
