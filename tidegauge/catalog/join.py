"""The catalog joined to a chunk of events, as of each event's time, in a few array operations.

The job's planner builds a `CatalogJoin` once per batch from the catalog records that batch
reads (tidegauge/catalog/history.py has the rule) and ships it to the read tasks, which give
every event the `team` and `tier` of the entry in force for its service at its event time.
Times before the `horizon` are joined as of the horizon: only late events are that old, and
the versions before it are no longer kept (`CatalogHistory.prune`), so the answer is the same
whether or not they were. Pure: numpy only, picklable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tidegauge.catalog.history import CatalogHistory

__all__ = ["CATALOG_FIELDS", "SLO_FIELDS", "CatalogJoin"]

#: What the join gives each event, as fields of the event contract (dimensions use them).
CATALOG_FIELDS = ("team", "tier")
#: And the objectives in force, for the exact SLO counts (tidegauge/catalog/slo_counts.py).
SLO_FIELDS = ("slo_latency_ms", "slo_availability")

#: Event times are placed after their service's index in one int64 key: 2^42 ms is 139 years.
_TIME_BITS = 42


@dataclass(frozen=True)
class CatalogJoin:
    """Every kept version of every service, as sorted arrays (see the module docstring)."""

    services: tuple[str, ...]
    #: Per version, sorted by (service, effective time, offset): its key and what it says.
    keys: npt.NDArray[np.int64]
    values: Mapping[str, npt.NDArray[Any]]
    horizon_ms: int
    base_ms: int

    @classmethod
    def of(cls, history: CatalogHistory, horizon_ms: int) -> CatalogJoin:
        """The join of `history` (pruned to `horizon_ms` here) for events from the horizon on."""
        history.prune(horizon_ms)
        services = tuple(sorted(history.versions))
        versions = [(i, v) for i, s in enumerate(services) for v in history.versions[s]]
        times = [v.effective_ms for _, v in versions]
        base = min([horizon_ms, *times])
        keys = np.array(
            [(i << _TIME_BITS) + (t - base) for (i, _), t in zip(versions, times, strict=True)],
            np.int64,
        )
        values: dict[str, npt.NDArray[Any]] = {
            name: np.array(
                [getattr(v.entry, name) if v.entry is not None else None for _, v in versions],
                dtype=object,
            )
            for name in CATALOG_FIELDS
        }
        slos = [v.entry.slo if v.entry is not None else None for _, v in versions]
        values["slo_latency_ms"] = np.array(
            [s.latency_ms if s and s.latency_ms is not None else np.nan for s in slos], np.float64
        )
        values["slo_availability"] = np.array(
            [s.availability if s and s.availability is not None else np.nan for s in slos],
            np.float64,
        )
        return cls(services, keys, values, horizon_ms, base)

    def lookup(
        self, services: npt.NDArray[Any], event_ms: npt.NDArray[np.int64]
    ) -> dict[str, npt.NDArray[Any]]:
        """Each event's `team`, `tier` and objectives as of its time.

        None (NaN for the objectives): none in force, or the service removed.
        """
        n = len(event_ms)
        out = {name: np.full(n, None, dtype=object) for name in CATALOG_FIELDS}
        out.update({name: np.full(n, np.nan) for name in SLO_FIELDS})
        if not n or not len(self.keys):
            return out
        index = {s: i for i, s in enumerate(self.services)}
        svc = np.fromiter((index.get(s, -1) for s in services), np.int64, count=n)
        at = np.maximum(np.asarray(event_ms, np.int64), self.horizon_ms) - self.base_ms
        at = np.minimum(at, (1 << _TIME_BITS) - 1)
        pos = np.searchsorted(self.keys, (np.maximum(svc, 0) << _TIME_BITS) + at, side="right")
        pos -= 1
        ok = (svc >= 0) & (pos >= 0)
        ok[ok] = (self.keys[pos[ok]] >> _TIME_BITS) == svc[ok]
        for name in (*CATALOG_FIELDS, *SLO_FIELDS):
            out[name][ok] = self.values[name][pos[ok]]
        return out

    def __len__(self) -> int:
        return len(self.keys)
