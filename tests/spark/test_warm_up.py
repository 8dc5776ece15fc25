"""Spark's Python planner daemons started at the job's start (jobs/runtime/warmup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

# A fresh driver (its own JVM: the shared session's queries started these daemons already):
# the warm-up alone, no query, then the Python daemons this driver's JVM runs.
_DRIVER = """
import os
from jobs.runtime.session import build_session
from jobs.runtime.warmup import warm_up
from tests import procs

spark = build_session("local[2]", ui=False)
thread = warm_up(spark)
thread.join(120)
print("again:", warm_up(spark))
for p in sorted(procs.descendants(os.getpid())):
    line = procs.cmdline(p)
    if "pyspark.daemon" in line:
        print("daemon:", line.split()[-1])
spark.stop()
"""


def test_the_warm_up_alone_starts_the_read_planner_once_per_application() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "again: None" in out  # once per application
    daemons = {line.split(": ")[1] for line in out.splitlines() if line.startswith("daemon:")}
    assert "pyspark.sql.worker.plan_data_source_read" in daemons, out
    assert "pyspark.sql.worker.create_data_source" in daemons, out
