"""The columns of the summary rows the job's source yields (jobs/summary/summarise.py makes them).

A module of its own, importing only pyarrow: Spark's short-lived planner processes ask the
source for this schema and should not import the summarising code (pandas and all) for it.
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

__all__ = ["SUMMARY_ARROW", "SUMMARY_SCHEMA", "SummaryKind"]


class SummaryKind(StrEnum):
    """What a summary row is: the `kind` column of `SUMMARY_SCHEMA`."""

    #: A chunk's summaries of the services of one state shard (`ChunkSummary`, in `blob`).
    SHARD = "shard"
    #: A heartbeat (copied into every state shard, so quiet streams still close windows).
    HEARTBEAT = "heartbeat"
    #: A dead letter, with its reason, detail and raw bytes.
    DEAD = "dead"
    #: The broker timestamps of a chunk's records (freshness), in `blob`.
    TIMES = "times"


_COLUMNS = [
    ("kind", pa.string()),
    ("shard", pa.int32()),
    ("event_time", pa.timestamp("us", tz="UTC")),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("kafka_ms", pa.int64()),
    ("count", pa.int64()),
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("raw", pa.binary()),
    ("raw_size", pa.int32()),
    ("blob", pa.binary()),
]
#: Arrow schema and Spark DDL of the summary rows the job's source yields.
SUMMARY_ARROW = pa.schema(_COLUMNS)
SUMMARY_SCHEMA = (
    "kind string, shard int, event_time timestamp, partition int, offset long, "
    "kafka_ms long, count long, reason string, detail string, raw binary, raw_size int, "
    "blob binary"
)
