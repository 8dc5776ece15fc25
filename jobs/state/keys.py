"""Each shard's key in the stateful step: which task holds its state, fixed per checkpoint.

Spark places the group `("event", key)` in shuffle partition `pmod(hash("event", key), P)`, and
its state is stored under that key. The plain keys 0..n-1 fall unevenly (with 4 shards over 2
partitions, 3 in one: one task does three quarters of the state's work while the other core
waits), so a new checkpoint gets keys that spread the shards evenly
(`jobs/summary/shards.py` `shard_keys`). A checkpoint keeps its keys for life, since its
state is found by them: they are written to `<checkpoint>/state-keys.json` when the job first
starts it, and a checkpoint written before the keys were chosen this way (offsets, no file)
keeps the plain ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from jobs.summary.shards import shard_keys

__all__ = ["KEYS_FILE", "state_keys"]

#: The file in a checkpoint that fixes its shards' state keys.
KEYS_FILE = "state-keys.json"


def _started(checkpoint: Path) -> bool:
    """Whether a query has run on this checkpoint (Spark wrote an offset log entry)."""
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(f.name.isdigit() for f in offsets.iterdir())


def state_keys(checkpoint: str | None, shards: int, partitions: int) -> tuple[int, ...]:
    """Each shard's state key for the job on `checkpoint` (written there the first time).

    `partitions`: the stateful step's shuffle partitions of a new checkpoint. Raises
    ValueError for a record of another shard count, or one that cannot be read.
    """
    if not checkpoint:
        return shard_keys(shards, partitions)
    path = Path(checkpoint) / KEYS_FILE
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc["keys"], list):
                raise ValueError("its keys are not a list")
            keys = tuple(int(k) for k in doc["keys"])
            if len(set(keys)) != len(keys):
                raise ValueError("a key given to two shards")
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: not a readable record of state keys ({e})") from e
        if len(keys) != shards:
            raise ValueError(
                f"{path}: the checkpoint's state has {len(keys)} shards, the job asks for "
                f"{shards} (--state-shards): keep {len(keys)} or start a new --checkpoint"
            )
        return keys
    keys = tuple(range(shards)) if _started(Path(checkpoint)) else shard_keys(shards, partitions)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"shards": shards, "partitions": partitions, "keys": list(keys)}))
    os.replace(tmp, path)
    return keys
