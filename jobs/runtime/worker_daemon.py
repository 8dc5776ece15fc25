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
pyspark's daemon runs unchanged: forked from the driver's pre-imported zygote where there is one
(jobs/runtime/zygote.py), or here. Set by `jobs.runtime.session`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from jobs.runtime import zygote
from jobs.runtime.preload import PRELOAD, preload

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


def main() -> None:
    """Drop the redundant archives, then run `pyspark.daemon.manager` in a zygote's child.

    Without a zygote it preloads here first (`jobs.runtime.preload`), as the zygote does.
    """
    for z in redundant_zips(sys.path, _installed_pyspark()):
        sys.path.remove(z)
        sys.path_importer_cache.pop(z, None)
    zygote_path = os.environ.get(zygote.ENV)
    if zygote_path and zygote.available():
        pid = zygote.hand_over(zygote_path, sys.path)
        if pid is not None:
            sys.exit(zygote.wait_for(pid))
    from pyspark import daemon  # reads sys.argv itself

    preload(PRELOAD)
    daemon.manager()


if __name__ == "__main__":
    main()
