"""The late events kept for people to look at: which ones, and how they travel to the store.

Counts of late events are exact and never capped; the events themselves are a sample that
people read (`tidegauge query late-events`, the dashboard's table): the **newest
`--late-events-max` by broker time** (ties: the later partition, then the later offset). Redis
keeps that many of them, newest by broker time, across batches (`tg:late:events`).

Newest-by-a-total-order composes: the newest n of a union are the newest n of each part's
newest n. So every step cuts to n on its own and the store ends with what it would hold had
every late event reached it: a read task per service and chunk (jobs/summary/summarise.py), the
stateful step per state group (jobs/state/aggregate.py), the batch writer per batch
(jobs/pipeline.py).
Nothing
depends on how records were cut into chunks or services into groups.

They travel as columns (`Columns`, Arrow IPC, jobs/parse/columns.py), not as an object or JSON text
per event: a benchmark stream 15-25 % late made ~50,000 of them per 500,000-record batch, and per
event work on the way was ~1 s of CPU per batch (BENCHMARKS.md). Only the batch writer's final n
become Python values, formatted once into the members Redis stores (`members`). Pure: no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from jobs.parse.columns import Columns, take_rows
from tidegauge.core.windows import tumbling_starts

__all__ = [
    "EVENT_COLUMNS",
    "STORED_COLUMNS",
    "batch_members",
    "concat",
    "late_columns",
    "members",
    "newest",
    "stored",
]

#: Columns of a chunk's late events (jobs/summary/summarise.py): where they were in Kafka and
#: their times (`kafka_ms` and `clock_offset_ms` float, NaN = unknown; `event_id` Arrow strings).
EVENT_COLUMNS = ("partition", "offset", "kafka_ms", "event_ms", "event_id", "clock_offset_ms")
#: What the stateful step adds for the store: the service, the primary window, the watermark.
STORED_COLUMNS = (*EVENT_COLUMNS, "service", "window_start", "window_end", "watermark")


def late_columns(
    cols: Columns, rows: npt.NDArray[np.int64], owners: npt.NDArray[np.int64], n: int
) -> tuple[Columns, npt.NDArray[np.int64]]:
    """The newest `n` of each owner's rows among `cols`' rows at positions `rows`.

    A chunk's late events, cut per service (`owners[i]` is the service of row `rows[i]`) in one
    pass rather than a sort and a take per service (a chunk of 1,000 services has that many):
    the services' picks in ascending service order, each newest first (`newest`), and the
    service of every row picked.
    """
    picked: Columns = {}
    for name in EVENT_COLUMNS:
        col = cols.get(name)
        if col is None:  # no clock correction: no offsets
            col = np.full(len(cols["offset"]), np.nan)
        picked[name] = col
    kafka = np.nan_to_num(np.asarray(picked["kafka_ms"], dtype=np.float64)[rows], nan=0.0)
    offset, partition = np.asarray(picked["offset"])[rows], np.asarray(picked["partition"])[rows]
    order = np.lexsort((offset, partition, kafka, owners))  # oldest first within an owner
    own = owners[order]
    from_end = np.searchsorted(own, own, side="right") - 1 - np.arange(len(own))
    keep = np.flatnonzero(from_end < n)
    newest_first = keep[np.lexsort((from_end[keep], own[keep]))]
    return take_rows(picked, rows[order[newest_first]]), own[newest_first].astype(np.int64)


def newest(cols: Columns, n: int) -> Columns:
    """The `n` newest late events of `cols`, newest first (the order of the module docstring)."""
    kafka = np.nan_to_num(np.asarray(cols["kafka_ms"], dtype=np.float64), nan=0.0)
    order = np.lexsort((cols["offset"], cols["partition"], kafka))[::-1][: max(n, 0)]
    return take_rows(cols, order)


def concat(parts: Sequence[Columns]) -> Columns:
    """Several sets of the same late-event columns as one."""
    if len(parts) == 1:
        return parts[0]
    out: Columns = {}
    for name in parts[0]:
        cols = [p[name] for p in parts]
        if isinstance(cols[0], pa.Array):
            out[name] = pa.concat_arrays(cols)
        else:
            out[name] = np.concatenate(cols)
    return out


def stored(cols: Columns, watermark_ms: int, size_ms: int) -> Columns:
    """Late events (with their "service") and what the store shows of them: window, watermark."""
    n = len(cols["offset"])
    starts = tumbling_starts(np.asarray(cols["event_ms"], dtype=np.int64), size_ms)
    return {
        **cols,
        "window_start": starts,
        "window_end": starts + size_ms,
        "watermark": np.full(n, watermark_ms, dtype=np.int64),
    }


def _int_or_null(values: npt.NDArray[np.float64]) -> list[str]:
    known = ~np.isnan(values)
    out = np.full(len(values), "null", dtype=object)
    out[known] = values[known].astype(np.int64).astype(str)
    return list(out)


#: A member of `tg:late:events`: one flat JSON object, keys sorted, no spaces (`json.dumps`
#: with sort_keys and separators (",", ":") gives the same text; a unit test holds them equal).
_MEMBER = (
    '{{"batch_id":{},"behind_ms":{},"clock_offset_ms":{},"event_id":{},"event_time":{},'
    '"kafka_timestamp":{},"lateness_ms":{},"offset":{},"partition":{},"service":{},'
    '"watermark":{},"window_end":{},"window_start":{}}}'
)


def members(cols: Columns, batch_id: int) -> dict[str, int]:
    """Stored members (`STORED_COLUMNS`) -> their score, the broker time (0 when unknown).

    A replay of the batch writes the same members, so the sorted set does not grow.
    """
    event_ms = np.asarray(cols["event_ms"], dtype=np.int64)
    kafka = np.asarray(cols["kafka_ms"], dtype=np.float64)
    watermark = np.asarray(cols["watermark"], dtype=np.int64)
    window_end = np.asarray(cols["window_end"], dtype=np.int64)
    rows = zip(
        (watermark - window_end).tolist(),
        _int_or_null(np.asarray(cols["clock_offset_ms"], dtype=np.float64)),
        cols["event_id"].to_pylist(),
        event_ms.tolist(),
        _int_or_null(kafka),
        _int_or_null(kafka - event_ms),
        np.asarray(cols["offset"]).tolist(),
        np.asarray(cols["partition"]).tolist(),
        cols["service"].to_pylist(),
        watermark.tolist(),
        window_end.tolist(),
        np.asarray(cols["window_start"]).tolist(),
        np.nan_to_num(kafka, nan=0.0).astype(np.int64).tolist(),
        strict=True,
    )
    out: dict[str, int] = {}
    dumps = json.dumps
    for behind, clock, eid, event, k, lateness, off, part, svc, wm, end, start, score in rows:
        text = _MEMBER.format(
            batch_id,
            behind,
            clock,
            dumps(eid),
            event,
            k,
            lateness,
            off,
            part,
            dumps(svc),
            wm,
            end,
            start,
        )
        out[text] = score
    return out


def batch_members(groups: Sequence[Columns], n: int, batch_id: int) -> dict[str, int] | None:
    """The batch writer's members -> scores: the newest `n` of the groups' late events."""
    if not groups:
        return None
    return members(newest(concat(groups), n), batch_id)
