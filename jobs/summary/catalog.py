"""Which catalog records a batch joins its events to, fixed once per batch (driver side).

The catalog topic (tidegauge/catalog/) moves on while the job runs; for a batch to give the
same joins when it runs again (a restart replays the batch the checkpoint had planned but not
committed), the planner writes the catalog's end offsets the first time it plans a batch, in
`<checkpoint>/catalog-offsets/<batch id>`, and a later planning of the same batch reads them
back. The batch then joins against exactly the records below those offsets, as of each event's
time (tidegauge/catalog/join.py), pruned to what its watermark still needs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tidegauge.catalog.history import CatalogHistory
from tidegauge.catalog.join import CatalogJoin
from tidegauge.catalog.topic import CatalogFollower
from tidegauge.core.windows import WindowSpec

__all__ = ["LATE_JOIN_MS", "LOG_DIR", "batch_offsets", "horizon", "join_for_batch"]

#: The log's folder in the query's checkpoint.
LOG_DIR = "catalog-offsets"
#: Entries kept behind the newest (Spark keeps 100 batches of its own logs by default).
_KEPT = 200


#: How far behind the oldest on-time event a late event is still joined as of its own time.
LATE_JOIN_MS = 3_600_000


def horizon(watermark_ms: int, specs: tuple[WindowSpec, ...]) -> int:
    """The oldest event time a batch joins as of itself (older ones: as of this time).

    On-time events reach back to the watermark less the largest window (or session gap); late
    events, counted per team and tier too, an hour more (`LATE_JOIN_MS`). The catalog's
    versions before the horizon are dropped.
    """
    reach = max([max(s.reach_ms, s.gap_ms) for s in specs] or [0])
    return watermark_ms - reach - LATE_JOIN_MS


def batch_offsets(
    checkpoint: str | None, batch_id: int, follower: CatalogFollower
) -> dict[int, int]:
    """The catalog offsets batch `batch_id` reads below: logged, or the topic's end now."""
    if not checkpoint:
        return follower.catch_up()
    folder = Path(checkpoint) / LOG_DIR
    path = folder / str(batch_id)
    if path.exists():
        offsets = {int(p): int(o) for p, o in json.loads(path.read_text()).items()}
        follower.catch_up(offsets)
        return offsets
    offsets = follower.catch_up()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{batch_id}.tmp"
    tmp.write_text(json.dumps({str(p): o for p, o in sorted(offsets.items())}))
    os.replace(tmp, path)
    for old in folder.iterdir():
        if old.name.isdigit() and int(old.name) < batch_id - _KEPT:
            old.unlink(missing_ok=True)
    return offsets


def join_for_batch(
    checkpoint: str | None,
    batch_id: int,
    watermark_ms: int,
    specs: tuple[WindowSpec, ...],
    follower: CatalogFollower,
) -> CatalogJoin:
    """The catalog join batch `batch_id`'s read tasks apply (see the module docstring)."""
    offsets = batch_offsets(checkpoint, batch_id, follower)
    history = CatalogHistory.of(follower.below(offsets))
    return CatalogJoin.of(history, horizon(watermark_ms, specs))
