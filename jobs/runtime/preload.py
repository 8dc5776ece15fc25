"""What the Python worker daemon imports before it forks workers, wherever it runs.

Imported once, by the daemon (jobs/runtime/worker_daemon.py) or by the zygote it forks from
(jobs/runtime/zygote.py), so that forked workers start with these modules instead of importing
them again each, and `gc.freeze()` can set their objects aside.
"""

from __future__ import annotations

import gc
import importlib

__all__ = ["PRELOAD", "preload"]

#: The read tasks' modules only: the state function runs in the driver (jobs/state/step.py), and
#: the daemon starts in a fresh job's first read stage.
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


def preload(modules: tuple[str, ...]) -> None:
    """Import `modules` (leaving out any this interpreter lacks), then freeze what is loaded.

    A reused worker runs `gc.collect()` after every task; with pandas, pyarrow and pyspark
    loaded that is a full pass over ~10^5-10^6 objects, 50-300 ms of CPU per task (py-spy, the
    largest remaining cost of a small micro-batch). Objects created before `gc.freeze()` are left
    out of every later collection in this process and the workers it forks (what the freeze is
    for: pre-forking servers), so a collection only scans what the task itself allocated.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:  # a worker that lacks one imports what it needs itself, as usual
            pass
    gc.collect()
    gc.freeze()
