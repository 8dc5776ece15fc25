"""The session's JVM maps Spark's class archive; the data source's planners import pyspark's
installed package, not its zip (jobs/runtime/jvm_archive.py, jobs/runtime/spark_home.py).

Both are start-up costs of every job: ~7 s of class loading and ~1 s of CPU per planner process
(BENCHMARKS.md, "Job start"). `make setup` writes the archive.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from jobs.runtime.jvm_archive import archive_path

pytestmark = pytest.mark.spark


def test_the_jvm_maps_the_class_archive(spark: Any) -> None:
    path = archive_path()
    assert path.is_file(), f"no class archive at {path}: `make setup` writes it"
    pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(path) in maps  # mapped, not merely named on the command line


def _origin() -> str:
    """Where this process imported pyspark from, and the zips of Python code on its path.

    (Spark's core jar stays on the path; it holds no Python code.)
    """
    import pyspark

    zips = [p for p in sys.path if p.endswith(".zip") and os.path.exists(p)]
    return f"{pyspark.__file__}|{';'.join(zips)}"


class _Where(DataSource):
    """A source whose planner (a process of its own) reports where it imported pyspark from."""

    @classmethod
    def name(cls) -> str:
        return "tidegauge-test-where"

    def schema(self) -> str:
        return "planner string, task string"

    def reader(self, schema: Any) -> DataSourceReader:
        return _WhereReader()


class _WhereReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(_origin())]  # runs in the planner process

    def read(self, partition: InputPartition) -> Iterator[tuple[str, str]]:
        yield (partition.value, _origin())


def test_the_data_source_planners_import_the_installed_pyspark(spark: Any) -> None:
    import pyspark

    spark.dataSource.register(_Where)
    rows = spark.read.format(_Where.name()).load().collect()
    assert [(r.planner, r.task) for r in rows] == [(f"{pyspark.__file__}|",) * 2]
