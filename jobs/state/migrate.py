"""Carry a checkpoint's state out of Spark's state store into the job's state log, once.

Jobs before the state log (jobs/state/held.py) kept each state group's bytes in Spark's state
store (`<checkpoint>/state`, an `applyInPandasWithState` keyed by (group, shard key), the shard
keys recorded in `<checkpoint>/state-keys.json`, or the plain keys 0..n-1 without that file).
The first start of this job on such a checkpoint reads that state as of the last committed
batch with Spark's state data source (`format("statestore")`) and writes it as that batch's
state file, so the windows open at the upgrade go on where they were. The state store itself is
moved aside, not deleted (`state-carried-over-<batch id>`): Spark refuses a plan without the
stateful operator its metadata names.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.state.held import LOG_DIR, GroupKey, last_committed, write_file

__all__ = ["KEYS_FILE", "SPARK_STATE_KEPT", "migrate_spark_state"]

#: The file in which such a checkpoint recorded its shards' keys in the state store.
KEYS_FILE = "state-keys.json"
#: Where the carried-over store goes (with its last batch id appended).
SPARK_STATE_KEPT = "state-carried-over"

log = logging.getLogger("tidegauge.job")


def _keys(checkpoint: Path, shards: int) -> tuple[int, ...]:
    """The shard keys the checkpoint's state store used (ValueError: another shard count)."""
    path = checkpoint / KEYS_FILE
    if not path.exists():
        return tuple(range(shards))
    try:
        keys = tuple(int(k) for k in json.loads(path.read_text())["keys"])
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a readable record of state keys ({e})") from e
    if len(keys) != shards:
        raise ValueError(
            f"{path}: the checkpoint's state has {len(keys)} shards, the job asks for {shards} "
            f"(--state-shards): keep {len(keys)} or start a new --checkpoint"
        )
    return keys


def migrate_spark_state(spark: SparkSession, checkpoint: str | None, shards: int) -> int | None:
    """Write the state log's first file from the checkpoint's Spark state; its batch id, or None.

    Does nothing (None) without a checkpoint, without Spark state in it, when the state log has
    begun already, or when no batch was committed.
    """
    if not checkpoint:
        return None
    root = Path(checkpoint)
    if not (root / "state" / "0").is_dir():
        return None
    folder = root / LOG_DIR
    if folder.is_dir() and any(f.name.isdigit() for f in folder.iterdir()):
        return None
    batch = last_committed(root)
    if batch is None:
        return None
    keys = _keys(root, shards)
    rows = (
        spark.read.format("statestore")
        .option("batchId", batch)
        .load(str(root))
        .selectExpr("key.group AS g", "key.shard AS k", "value.groupState.blob AS blob")
        .collect()
    )
    state: dict[GroupKey, bytes] = {}
    for row in rows:
        if row.blob is None:
            continue
        shard = keys.index(int(row.k)) if row.g == "event" else int(row.k)
        state[(str(row.g), shard)] = bytes(row.blob)
    write_file(folder, batch, state)
    # Spark refuses a plan without the stateful operator its state metadata names: the old
    # store moves aside (kept, not deleted: the only copy an older Tidegauge could resume from).
    kept = root / f"{SPARK_STATE_KEPT}-{batch}"
    (root / "state").rename(kept)
    log.info(
        "carried the state of %d groups as of batch %d from Spark's state store into %s "
        "(the store itself is kept as %s)",
        len(state),
        batch,
        folder,
        kept,
    )
    return batch
