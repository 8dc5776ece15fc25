"""The session's Python workers: pyspark from the installed package, imports frozen out of gc.

That is what `jobs/runtime/worker_daemon.py` is for: on CPython 3.11 a worker re-reads every zip or
jar on its path before each task (~140 ms of CPU), and a reused worker collects garbage after every
task (50-300 ms over the imported modules): the largest fixed costs of a small micro-batch.
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


def _collect_cost(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import gc

    import jobs.state.aggregate  # noqa: F401  (what the job's tasks import)

    for b in batches:
        yield pa.RecordBatch.from_pydict({"frozen": [gc.get_freeze_count()] * b.num_rows})


def test_workers_start_with_the_imports_set_aside_from_garbage_collection(spark: Any) -> None:
    """A reused worker collects garbage after every task: only what tasks allocate is scanned."""
    rows = spark.range(0, 8, numPartitions=4).mapInArrow(_collect_cost, "frozen long")
    for r in rows.collect():
        assert r.frozen > 50_000  # pandas, pyarrow, pyspark, the job's modules


def _origin(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import os

    daemon = os.getppid()
    with open(f"/proc/{daemon}/stat") as f:
        stat = f.read()
    for b in batches:
        yield pa.RecordBatch.from_pydict(
            {
                "forked_by": [int(stat[stat.rfind(")") + 2 :].split()[1])] * b.num_rows,
                "reuse": [os.environ.get("SPARK_REUSE_WORKER")] * b.num_rows,
                "hash": [hash("tidegauge")] * b.num_rows,
                "cwd": [os.getcwd()] * b.num_rows,
            }
        )


def test_workers_fork_from_the_drivers_zygote_and_run_as_sparks_would(spark: Any) -> None:
    """Their daemon is the zygote's child (its imports done while the JVM started), and they
    see what Spark's own daemon would have: Spark's environment, its string hashes, its cwd."""
    import os
    import subprocess

    from jobs.runtime import zygote

    if not zygote.available():
        pytest.skip("needs os.pidfd_open and SCM_RIGHTS")
    pid = zygote.running()
    assert pid is not None
    seed0 = subprocess.run(
        [sys.executable, "-c", "print(hash('tidegauge'))"],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    schema = "forked_by long, reuse string, hash long, cwd string"
    rows = spark.range(0, 8, numPartitions=4).mapInArrow(_origin, schema).collect()
    assert {(r.forked_by, r.reuse, r.hash, r.cwd) for r in rows} == {
        (pid, "1", int(seed0), os.getcwd())
    }
