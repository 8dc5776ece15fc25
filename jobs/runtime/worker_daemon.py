"""The Python worker daemon of Tidegauge's executors: pyspark's own, minus a per-task zip re-read.

Spark starts its Python workers through a daemon module (`spark.python.daemon.module`, default
`pyspark.daemon`) with three archives first on `PYTHONPATH`: `pyspark.zip` and py4j's zip of
`$SPARK_HOME/python/lib`, and the jar holding Spark's core classes (for distributions that ship
the Python files inside it). Before every task a worker calls `importlib.invalidate_caches()`; on
CPython 3.11 that makes each cached zip importer re-read its archive's whole directory (the core
jar alone has thousands of entries): ~140 ms of CPU per task (py-spy), the largest fixed cost of a
small micro-batch (BENCHMARKS.md).

When those archives lie inside the pyspark package this interpreter has installed (a pip
installed pyspark is its own SPARK_HOME), the installed package is the same code, so they are
taken off `sys.path` before pyspark is imported and workers import from the package directory,
whose importer invalidates in microseconds (and finds compiled bytecode, which a zip does not
have). Archives of any other Spark distribution stay (their version must match the JVM's). Then
pyspark's daemon runs unchanged. Set by `jobs.runtime.session`.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import sys

__all__ = ["redundant_zips"]


_ARCHIVES = (".zip", ".jar")


def redundant_zips(path: list[str], installed_pyspark: str | None) -> list[str]:
    """Entries of `path` that are archives (zip, jar) inside the installed pyspark package."""
    if installed_pyspark is None:
        return []
    home = os.path.realpath(installed_pyspark) + os.sep
    return [p for p in path if p.endswith(_ARCHIVES) and os.path.realpath(p).startswith(home)]


def _installed_pyspark() -> str | None:
    """Directory of the pyspark package found without the archives, or None."""
    zips = [p for p in sys.path if p.endswith(_ARCHIVES)]
    rest = [p for p in sys.path if not p.endswith(_ARCHIVES)]
    saved = sys.path[:]
    sys.path[:] = rest
    try:
        spec = importlib.util.find_spec("pyspark")
    finally:
        sys.path[:] = saved
        for z in zips:
            sys.path_importer_cache.pop(z, None)
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


#: What the job's tasks import: imported once by the daemon, so that forked workers start with
#: them (instead of importing them again in every worker) and `gc.freeze()` can set them aside.
#: The read tasks only: the state function runs in the driver (jobs/state/step.py), and the
#: daemon starts in a fresh job's first read stage.
PRELOAD = (
    "numpy",
    "pandas",
    "pyarrow",
    "pyspark.sql.pandas.serializers",
    "jobs.summary.read_task",
    "jobs.source.kafka_source",
    "jobs.source.kafka_log",
    "jobs.parse.parser",
)


def _preload(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:  # a worker that lacks one imports what it needs itself, as usual
            pass


def main() -> None:
    """Drop the redundant archives, preload and freeze, then run `pyspark.daemon.manager`.

    A reused worker runs `gc.collect()` after every task; with pandas, pyarrow and pyspark
    loaded that is a full pass over ~10^5-10^6 objects, 50-300 ms of CPU per task (py-spy, the
    largest remaining cost of a small micro-batch). Objects the daemon creates before `gc.freeze()`
    are left out of every later collection in it and in its forked workers (what the freeze is
    for: pre-forking servers), so a collection only scans what the task itself allocated.
    """
    for z in redundant_zips(sys.path, _installed_pyspark()):
        sys.path.remove(z)
        sys.path_importer_cache.pop(z, None)
    from pyspark import daemon  # reads sys.argv itself

    _preload(PRELOAD)
    gc.collect()
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
