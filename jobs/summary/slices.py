"""A chunk's events copied into the dimension slices they belong to (tidegauge/core/dimensions.py).

Before a chunk is summarised, each event with a value for a dimension is copied twice more: once
under its service's slice (`service SEP dimension SEP value`) and once under the slice across
all services (`* SEP dimension SEP value`). The copies are groups like any service from then on,
so every rule (watermark, late rows, stragglers, sketches) applies to a slice as it applies to
a service, by the same code. De-duplication too, with two differences: a service's slices drop
exactly the events their service drops and hold no ids of their own (jobs/state/batch.py), and
the copies under `*` carry `service SEP id` as their id, since ids are per service. Which values
keep a slice of their own is decided by the stateful step (jobs/state/aggregate.py), which sees
every batch of a (service, dimension).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.parse.columns import Columns
from tidegauge.catalog.join import CATALOG_FIELDS, SLO_FIELDS, CatalogJoin
from tidegauge.core.dimensions import SEP, Dimension, dimension_values, slice_group
from tidegauge.core.events import ALL_SERVICES, EventField

__all__ = ["EXTRA", "with_catalog", "with_slices"]

#: Prefix of registered event fields' columns in `Columns` (jobs/summary/summarise.py).
EXTRA = "extra:"


def with_catalog(events: Columns, join: CatalogJoin, fields: tuple[EventField, ...]) -> Columns:
    """`events` with the catalog's `team`, `tier` and objectives of each, as of its time.

    In the fields of those names the job has (its dimensions', the SLO counts'): the catalog
    wins over what an event says.
    """
    column_of = {f.name: f.column for f in fields}
    wanted = [name for name in (*CATALOG_FIELDS, *SLO_FIELDS) if name in column_of]
    n = len(events["event_ms"])
    if not wanted or not n:
        return events
    found = join.lookup(_objects(events["service"], n), np.asarray(events["event_ms"], np.int64))
    out = dict(events)
    for name in wanted:
        out[EXTRA + column_of[name]] = found[name]
    return out


def with_slices(
    events: Columns, dims: tuple[Dimension, ...], fields: tuple[EventField, ...]
) -> Columns:
    """`events` followed by their copies under each dimension's slices (Kafka order kept)."""
    n = len(events["event_ms"])
    if not n or not dims:
        return events
    column_of = {f.name: f.column for f in fields}
    strings = {
        name: _objects(events.get(EXTRA + column_of[name]), n) for d in dims for name in d.fields()
    }
    status = np.asarray(events["status"], dtype=np.int64)
    services = events["service"]
    service_codes, service_names = _factorize(_objects(services, n))
    picks: list[npt.NDArray[np.int64]] = []
    names: list[pa.Array] = []
    for d in dims:
        values = dimension_values(d, strings, status)
        has = np.flatnonzero(np.array([v is not None for v in values], dtype=bool))
        if not len(has):
            continue
        value_codes, value_names = _factorize(values[has])
        svc = service_codes[has]
        pair = svc * len(value_names) + value_codes
        uniq, inverse = np.unique(pair, return_inverse=True)
        width = len(value_names)
        own = [
            slice_group(service_names[p // width], d.name, value_names[p % width])
            for p in uniq.tolist()
        ]
        total = [slice_group(ALL_SERVICES, d.name, v) for v in value_names]
        picks += [has, has]
        names.append(pa.array(np.array(own, dtype=object)[inverse], pa.string()))
        names.append(pa.array(np.array(total, dtype=object)[value_codes], pa.string()))
    if not picks:
        return events
    rows = np.concatenate([np.arange(n), *picks])
    out: Columns = {}
    for k, v in events.items():
        if k == "service":
            out[k] = pa.concat_arrays([_as_strings(services), *names])
        elif k == "event_id":
            out[k] = _slice_ids(v, services, picks)
        elif isinstance(v, pa.Array):
            out[k] = v.take(pa.array(rows))
        else:
            out[k] = np.asarray(v)[rows]
    return out


def _slice_ids(ids: Any, services: Any, picks: list[npt.NDArray[np.int64]]) -> pa.Array:
    """The events' ids, then their copies': those under `*`'s slices made `service SEP id`.

    Ids are per service (jobs/panes/dedup.py): two services may log one id (a request id passed
    along), and the slice across all services must count both. `picks` alternate: a
    dimension's service slices, then its `*` slices.
    """
    ids = _as_strings(ids)
    svc = _as_strings(services)
    parts = [ids]
    for j, pick in enumerate(picks):
        taken = pa.array(pick)
        part = ids.take(taken)
        if j % 2:
            part = pc.binary_join_element_wise(svc.take(taken), part, SEP)
        parts.append(part)
    return pa.concat_arrays(parts)


def _objects(col: Any, n: int) -> npt.NDArray[Any]:
    """A column as an object array (None where absent); all None when the column is missing."""
    if col is None:
        return np.full(n, None, dtype=object)
    if isinstance(col, pa.Array | pa.ChunkedArray):
        return np.array(col.to_pylist(), dtype=object)
    arr = np.array(col, dtype=object)
    arr[np.asarray(pd.isna(arr), dtype=bool)] = None
    return arr


def _factorize(values: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], list[str]]:
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), [str(u) for u in uniques]


def _as_strings(col: Any) -> pa.Array:
    arr = col if isinstance(col, pa.Array) else pa.array(col, pa.string())
    return arr.cast(pa.string()) if arr.type != pa.string() else arr
