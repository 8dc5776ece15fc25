"""The session's Python workers import pyspark from the installed package, not from archives.

That is what `jobs/worker_daemon.py` is for: on CPython 3.11 a worker re-reads every zip or jar
on its path before each task (~140 ms of CPU), the largest fixed cost of a small micro-batch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

pytestmark = pytest.mark.spark


def _where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import zipimport

    import pyspark

    zips = ";".join(
        p for p, imp in sys.path_importer_cache.items() if isinstance(imp, zipimport.zipimporter)
    )
    for b in batches:
        yield pa.RecordBatch.from_pydict(
            {"module": [pyspark.__file__] * b.num_rows, "zips": [zips] * b.num_rows}
        )


def test_workers_import_pyspark_from_the_installed_package(spark: Any) -> None:
    import pyspark

    rows = spark.range(0, 8, numPartitions=4).mapInArrow(_where, "module string, zips string")
    got = {(r.module, r.zips) for r in rows.collect()}
    assert got == {(pyspark.__file__, "")}
