"""The columns of the summary rows the job's source yields (jobs/deltas.py makes them).

A module of its own, importing only pyarrow: Spark's short-lived planner processes ask the
source for this schema and should not import the summarising code (pandas and all) for it.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["KIND_DELTA", "KIND_TIMES", "SUMMARY_ARROW", "SUMMARY_SCHEMA"]

KIND_DELTA = "delta"
KIND_TIMES = "times"

_COLUMNS = [
    ("kind", pa.string()),
    ("service", pa.string()),
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
    "kind string, service string, event_time timestamp, partition int, offset long, "
    "kafka_ms long, count long, reason string, detail string, raw binary, raw_size int, "
    "blob binary"
)
