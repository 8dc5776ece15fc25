"""Spark's Python planner processes started while the job starts, not in its first batch.

Spark plans a Python data source's reads in Python processes of its own: `pyspark.daemon`s
for `create_data_source` and `plan_data_source_read`, which `spark.python.daemon.module` does
not reach, each importing pyspark, numpy and pyarrow when the JVM first needs it (~0.4 s of
CPU each, py-spy). The first micro-batch waited on `plan_data_source_read`'s. A read of an
empty Python data source, in a thread of its own as soon as the session is up, has the JVM
start those daemons and the worker daemon while the driver starts its query; the query's
batches then find them running (Spark keeps them for the session's life). Once per Spark
application; whatever goes wrong with it only costs the first batch what it cost before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

__all__ = ["warm_up"]

log = logging.getLogger(__name__)

_warmed: set[str] = set()
_lock = threading.Lock()


class _NoRows(DataSourceReader):
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return iter(())


class WarmUpSource(DataSource):
    """A Python data source of no rows: its read makes Spark start its Python processes."""

    @classmethod
    def name(cls) -> str:
        return "tidegauge-warm-up"

    def schema(self) -> str:
        return "x int"

    def reader(self, schema: Any) -> DataSourceReader:
        return _NoRows()


def warm_up(spark: SparkSession) -> threading.Thread | None:
    """Read the empty source in a daemon thread, once per application; the thread, or None."""
    app = spark.sparkContext.applicationId
    with _lock:
        if app in _warmed:
            return None
        _warmed.add(app)

    def run() -> None:
        try:
            spark.dataSource.register(WarmUpSource)
            spark.read.format(WarmUpSource.name()).load().collect()
        except Exception as e:  # noqa: BLE001 (a stopping session, say: the job goes on without)
            log.debug("warm-up read failed: %s", e)

    thread = threading.Thread(target=run, name="tidegauge-warm-up", daemon=True)
    thread.start()
    return thread
