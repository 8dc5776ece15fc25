"""The job's state between batches: each state group's bytes, held by the driver, logged per batch.

The stateful step runs in the driver, right before the sink (jobs/state/step.py), so the state
of every group lives in the driver's memory from one batch to the next, and is written to the
checkpoint with each batch: `<checkpoint>/shard-state/<batch id>`, one file holding every
group's bytes as of the end of that batch (written whole, then renamed into place). A batch
reads the state of the batch before it: from memory when this process ran it, else from its
file. A batch run again after a failure (Spark redoes a batch it had not committed) reads the
same file as its first run, so its results, and what the sink writes for them, are the same.

A checkpoint written by a job that kept its state in Spark's state store (`<checkpoint>/state`)
is carried over once: its groups' state as of the last committed batch, read with Spark's state
data source, becomes that batch's file (`migrate_spark_state`).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sketches.preamble import STATE_LOG

__all__ = ["LOG_DIR", "GroupKey", "HeldState", "StateLog", "StateMissing"]

#: The log's folder in the query's checkpoint.
LOG_DIR = "shard-state"
#: Files kept behind the newest (a batch only ever reads the one before it).
_KEPT = 2
#: After a file's preamble (`STATE_LOG`): the length of its JSON index.
_INDEX = struct.Struct("<I")

#: A state group: (group, shard), as `jobs.state.aggregate.StateGroup` names it.
GroupKey = tuple[str, int]


class StateMissing(RuntimeError):
    """The checkpoint has committed batches but not the state they left (a lost or foreign log)."""


@dataclass
class HeldState:
    """One group's state for one batch, in the shape of Spark's `GroupState` the function uses.

    `watermark_ms`: the watermark in force for the batch (Spark's, from the offset log).
    """

    watermark_ms: int
    value: bytes | None = None
    changed: bool = field(default=False, compare=False)
    #: What `value` decodes to, when the process kept it from the group's run before
    #: (jobs/state/step.py `DecodedStates`): the function starts from it instead of decoding
    #: the bytes, and leaves in it the state it encoded into `value`.
    decoded: Any = field(default=None, compare=False, repr=False)

    @property
    def exists(self) -> bool:
        """Whether the group has state."""
        return self.value is not None

    @property
    def get(self) -> tuple[bytes]:
        """The state, as a row of one value (ValueError: there is none)."""
        if self.value is None:
            raise ValueError("state does not exist")
        return (self.value,)

    def update(self, new_value: tuple[Any, ...]) -> None:
        """Replace the state by the row `new_value` (its first value, the bytes)."""
        self.value = bytes(new_value[0])
        self.changed = True

    def remove(self) -> None:
        """Drop the group's state."""
        self.value = None
        self.changed = True

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 (Spark's name)
        """The watermark in force for the batch (epoch ms)."""
        return self.watermark_ms


class StateLog:
    """Every state group's bytes as of a batch: kept in memory, written to the checkpoint.

    Without a checkpoint (a query on a temporary one) the state lives in memory only.
    """

    def __init__(self, checkpoint: str | None) -> None:
        self.dir = Path(checkpoint) / LOG_DIR if checkpoint else None
        #: (batch id, its groups' state) of the newest batch this process ran or read.
        self._held: tuple[int, dict[GroupKey, bytes]] | None = None

    def before(self, batch_id: int) -> dict[GroupKey, bytes]:
        """The state every group had when batch `batch_id` began (a copy the caller may change).

        Raises StateMissing when the checkpoint committed batches whose state is not here.
        """
        if self._held is not None and self._held[0] == batch_id - 1:
            return dict(self._held[1])
        if self.dir is None:
            if self._held is not None:
                raise StateMissing(f"batch {batch_id} follows {self._held[0]} without its state")
            return {}
        ids = [i for i in self._ids() if i < batch_id]
        committed = last_committed(self.dir.parent, batch_id)
        if not ids:
            if committed is not None:
                raise StateMissing(
                    f"{self.dir}: no state for the committed batches up to {committed}; the "
                    "checkpoint lost its state log (start a new --checkpoint, or restore it)"
                )
            return {}
        newest = ids[-1]
        if committed is not None and newest < committed:
            raise StateMissing(
                f"{self.dir}: the newest state is of batch {newest}, but batch {committed} was "
                "committed; the checkpoint lost part of its state log"
            )
        state = read_file(self.dir / str(newest))
        self._held = (newest, state)
        return dict(state)

    def commit(self, batch_id: int, state: Mapping[GroupKey, bytes]) -> None:
        """Keep `state` as batch `batch_id`'s, in memory and in the checkpoint."""
        held = dict(state)
        if self.dir is not None:
            write_file(self.dir, batch_id, held)
            for old in [i for i in self._ids() if i < batch_id - _KEPT]:
                (self.dir / str(old)).unlink(missing_ok=True)
        self._held = (batch_id, held)

    def _ids(self) -> list[int]:
        if self.dir is None or not self.dir.is_dir():
            return []
        return sorted(int(f.name) for f in self.dir.iterdir() if f.name.isdigit())


def last_committed(checkpoint: Path, before: int | None = None) -> int | None:
    """Spark's newest committed batch (before `before`, if given) in its commit log, if any."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return None
    ids = [
        int(f.name)
        for f in commits.iterdir()
        if f.name.isdigit() and (before is None or int(f.name) < before)
    ]
    return max(ids) if ids else None


def write_file(folder: Path, batch_id: int, state: Mapping[GroupKey, bytes]) -> None:
    """Write one batch's state file whole, then rename it into place."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{batch_id}.tmp"
    tmp.write_bytes(to_bytes(state))
    os.replace(tmp, folder / str(batch_id))


def read_file(path: Path) -> dict[GroupKey, bytes]:
    """Inverse of `write_file`; ValueError naming the file for one that is not one, or cut short."""
    try:
        return from_bytes(path.read_bytes())
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def to_bytes(state: Mapping[GroupKey, bytes]) -> bytes:
    """Every group's bytes as one blob: the preamble, a JSON index, then the blobs in its order."""
    groups = sorted(state)
    index = json.dumps([[g, s, len(state[(g, s)])] for g, s in groups]).encode()
    parts = [STATE_LOG.preamble, _INDEX.pack(len(index)), index]
    parts.extend(state[key] for key in groups)
    return b"".join(parts)


def from_bytes(data: bytes) -> dict[GroupKey, bytes]:
    """Inverse of `to_bytes`; ValueError for bytes that are not one, or are cut short."""
    STATE_LOG.check(data)
    head = STATE_LOG.size + _INDEX.size
    if len(data) < head:
        raise ValueError(f"{STATE_LOG} cut short ({len(data)} bytes)")
    (n,) = _INDEX.unpack_from(data, STATE_LOG.size)
    index = json.loads(data[head : head + n])
    at = head + n
    out: dict[GroupKey, bytes] = {}
    for group, shard, size in index:
        out[(str(group), int(shard))] = data[at : at + size]
        at += size
    if at != len(data):
        raise ValueError(f"{STATE_LOG} of {len(data)} bytes, its index says {at}")
    return out
