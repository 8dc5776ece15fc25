"""Spark's offset log, read by the Kafka planner: where the last batch ended, and a batch's clock.

Before a micro-batch runs, Spark writes `<checkpoint>/offsets/<batch id>`: a version line
(`v1`), the batch's metadata as JSON (`batchWatermarkMs`, `batchTimestampMs`, conf) and one
line per source with the end offsets it returned from `latestOffset`. The planner reads it for
two things:

* the end of the last batch (`checkpointed_end`), the base of `maxRecordsPerTrigger` on a
  restart, before Spark tells the reader where it stands;
* the clock of the batch it is planning (`batch_clock`): the watermark every stateful operator
  applies in that batch and the batch's timestamp (`current_timestamp()`). Spark writes the
  entry before it asks the source for the batch's partitions (and on a restart re-runs the last
  logged batch from the same entry), so the read tasks can apply the watermark rules to the
  records they read (jobs/summary/summarise.py). The stateful step checks that the watermark it gets
  from Spark is the one the read tasks used, so a change in this order cannot go unnoticed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BatchClock",
    "Offsets",
    "batch_clock",
    "checkpointed_end",
    "clock_of",
    "next_watermark",
]

#: Kafka end offsets as the source reports them: {"<partition>": next offset}.
Offsets = dict[str, int]


@dataclass(frozen=True)
class BatchClock:
    """What Spark fixed for one micro-batch before running it (epoch ms)."""

    batch_id: int
    #: The watermark in force for the batch (0 before any data: see `frontier`).
    watermark_ms: int
    #: The batch's timestamp, which `current_timestamp()` returns for every row of it.
    timestamp_ms: int


def _entries(checkpoint: str | None) -> list[int]:
    """Batch ids in the offset log, newest first."""
    if not checkpoint:
        return []
    log_dir = Path(checkpoint) / "offsets"
    if not log_dir.is_dir():
        return []
    return sorted((int(f.name) for f in log_dir.iterdir() if f.name.isdigit()), reverse=True)


def _read(checkpoint: str, batch_id: int) -> tuple[dict, Offsets]:
    """(metadata, our source's end offsets) of one entry; ValueError if it is not readable."""
    path = Path(checkpoint) / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
        if lines[0] != "v1":
            raise ValueError(f"offset log version {lines[0]!r} is not v1")
        meta = json.loads(lines[1])
        ends = {str(k): int(v) for k, v in json.loads(lines[2]).items()}
    except (OSError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"{path}: not a readable offset log entry ({e})") from e
    return meta, ends


def checkpointed_end(checkpoint: str | None) -> Offsets | None:
    """Our source's end offsets in the newest entry of the query's offset log, if any."""
    ids = _entries(checkpoint)
    if not ids:
        return None
    assert checkpoint is not None
    try:
        return _read(checkpoint, ids[0])[1]
    except ValueError:
        return None  # unreadable: fall back to initialOffset (Spark itself validates the log)


def next_watermark(checkpoint: str | None) -> int | None:
    """The watermark (epoch ms) a run restarted from this checkpoint begins with, if known.

    Spark's commit log (`<checkpoint>/commits/<batch id>`: `v1`, then `{"nextBatchWatermarkMs":
    ...}`) records, with each finished batch, the watermark its successor applies; a restart
    takes it from the newest entry. None without a local, readable commit log.
    """
    if not checkpoint:
        return None
    log_dir = Path(checkpoint) / "commits"
    try:
        ids = sorted((int(f.name) for f in log_dir.iterdir() if f.name.isdigit()), reverse=True)
        if not ids:
            return None
        lines = (log_dir / str(ids[0])).read_text().splitlines()
        return int(json.loads(lines[1])["nextBatchWatermarkMs"])
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return None


def batch_clock(checkpoint: str | None, end: Offsets) -> BatchClock:
    """The clock of the batch that ends at `end`: the newest offset log entry with those offsets.

    Raises a RuntimeError that says what is missing when no entry matches (the source was used
    without the query's `checkpoint` option, or by a query whose log this is not).
    """
    want = {str(k): int(v) for k, v in end.items()}
    ids = _entries(checkpoint)
    for batch_id in ids[:3]:  # the batch being planned is the newest; look a little further
        assert checkpoint is not None
        meta, ends = _read(checkpoint, batch_id)
        if ends == want:
            return BatchClock(
                batch_id, int(meta.get("batchWatermarkMs", 0)), int(meta["batchTimestampMs"])
            )
    where = f"{checkpoint}/offsets" if checkpoint else "no checkpoint option"
    raise RuntimeError(
        f"no entry of the query's offset log ({where}) ends at {want}: the summarising source "
        "reads each batch's watermark there, so it needs the query's checkpointLocation as "
        "its `checkpoint` option"
    )


def clock_of(checkpoint: str, batch_id: int) -> BatchClock:
    """The clock of a batch by id (the sink's retention work runs on it); ValueError if unread."""
    meta, _ = _read(checkpoint, batch_id)
    return BatchClock(batch_id, int(meta.get("batchWatermarkMs", 0)), int(meta["batchTimestampMs"]))
