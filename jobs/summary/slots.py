"""The `--max-services` slots of each state shard, batch by batch, so the limit is the job's.

Each state shard tracks its own service names (jobs/state/aggregate.py, `Overflow`), because
it cannot see the others while a batch runs. So that the limit holds for the whole job and
not shard by shard (names do not hash evenly), the planner gives every shard, for each batch,
its quota of slots: what it tracks already plus a share of the slots no shard holds, and the
quotas add up to `--max-services`. The free slots go to the shards that had names over their
quota in the batch before (in proportion), else evenly: a name that meets a full shard counts
under "(other)" in that batch, and from the next one its shard has the room the others left.

What each shard tracks reaches the planner through a small log in the checkpoint,
`<checkpoint>/service-slots/<batch id>`, one JSON entry per batch that ran a state shard,
written by the sink (driver) with the batch: the tracked and overflowed names of every shard as
of that batch. The planner of batch N reads the newest entry before N; a batch run again after
a failure reads the same entry, so its quotas, and with them its results, are the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOG_DIR", "ShardSlots", "even", "quotas", "read_before", "record", "slots_for"]

#: The log's folder in the query's checkpoint.
LOG_DIR = "service-slots"
#: Entries kept behind the newest (the planner only ever reads the newest before a batch).
_KEPT = 20


@dataclass(frozen=True)
class ShardSlots:
    """Names each shard tracks, and the names over its quota in the shard's newest batch."""

    tracked: tuple[int, ...]
    over: tuple[int, ...]


def quotas(limit: int, slots: ShardSlots) -> tuple[int, ...]:
    """Each shard's slots for the next batch: what it tracks plus its share of the free ones.

    The free slots (`limit` minus all tracked) go to the shards that overflowed, in proportion
    to their overflowed names (largest remainders, lower shards first on ties), or evenly when
    none did; the quotas add up to `limit` (or to what is tracked, when that is more: a lowered
    limit admits no new names until idle ones leave).
    """
    tracked, over = slots.tracked, slots.over
    free = limit - sum(tracked)
    if free <= 0:
        return tuple(tracked)
    weights = list(over) if any(over) else [1] * len(tracked)
    total = sum(weights)
    shares = [free * w // total for w in weights]
    left = free - sum(shares)
    rest = sorted(range(len(weights)), key=lambda i: (-(free * weights[i] % total), i))
    for i in rest[:left]:
        shares[i] += 1
    return tuple(t + s for t, s in zip(tracked, shares, strict=True))


def _dir(checkpoint: str) -> Path:
    return Path(checkpoint) / LOG_DIR


def _ids(checkpoint: str) -> list[int]:
    try:
        return sorted(int(f.name) for f in _dir(checkpoint).iterdir() if f.name.isdigit())
    except FileNotFoundError:
        return []


def read_before(checkpoint: str | None, batch_id: int, shards: int) -> ShardSlots | None:
    """The newest entry of a batch before `batch_id` (None: none, or of another shard count)."""
    if not checkpoint:
        return None
    before = [i for i in _ids(checkpoint) if i < batch_id]
    if not before:
        return None
    path = _dir(checkpoint) / str(before[-1])
    try:
        doc = json.loads(path.read_text())
        out = ShardSlots(tuple(map(int, doc["tracked"])), tuple(map(int, doc["over"])))
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a readable service-slots entry ({e})") from e
    if len(out.tracked) != shards or len(out.over) != shards:
        return None
    return out


def even(limit: int, shards: int) -> tuple[int, ...]:
    """`limit` split evenly over `shards` (the quotas of a new checkpoint's first batch)."""
    return quotas(limit, ShardSlots((0,) * shards, (0,) * shards))


def slots_for(checkpoint: str | None, batch_id: int, limit: int, shards: int) -> tuple[int, ...]:
    """The quotas of batch `batch_id`'s shards (a new checkpoint: `limit` split evenly)."""
    held = read_before(checkpoint, batch_id, shards)
    return quotas(limit, held) if held else even(limit, shards)


def record(
    checkpoint: str, batch_id: int, shards: int, reports: Mapping[int, tuple[int, int]]
) -> None:
    """Write batch `batch_id`'s entry: the newest before it, updated with the shards it ran.

    `reports`: shard -> (names it tracks, names over its quota in this batch). Written to a
    temporary file and renamed into place, so the planner never reads half an entry.
    """
    held = read_before(checkpoint, batch_id, shards)
    tracked = list(held.tracked) if held else [0] * shards
    over = [0] * shards
    for shard, (n, o) in reports.items():
        tracked[shard], over[shard] = n, o
    folder = _dir(checkpoint)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{batch_id}.tmp"
    tmp.write_text(json.dumps({"tracked": tracked, "over": over}))
    os.replace(tmp, folder / str(batch_id))
    for old in _ids(checkpoint):
        if old < batch_id - _KEPT:
            (folder / str(old)).unlink(missing_ok=True)
