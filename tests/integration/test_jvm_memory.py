"""A Spark JVM whose heap runs out is named as such, not as a lost connection.

`tidegauge job` says "Spark's JVM ran out of heap ... --conf spark.driver.memory=..." when its
query fails of it (jobs/cli.py). Both ways a real JVM reports it are tried, each in a Python
process of its own with a 512 MB JVM: a task's OutOfMemoryError passed back to the driver, and
the JVM ending with Spark's out-of-memory exit status while py4j talks to it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jobs.runtime.session import JVM_OUT_OF_MEMORY

SCRIPT = """
import sys
from jobs.runtime.session import build_session, jvm_exit_code, ran_out_of_memory
spark = build_session("local[1]", ui=False, conf=[("spark.driver.memory", "512m")])
print("running", jvm_exit_code(0.1), flush=True)
try:
    if sys.argv[1] == "task":  # two strings of 250 MB joined in one task
        spark.sql(
            "select length(concat(repeat('x', 250000000), repeat('y', 250000000)))"
        ).collect()
    else:  # the JVM ends as Spark's handler ends it after an OutOfMemoryError
        spark._jvm.java.lang.Runtime.getRuntime().halt(52)
    print("no error", flush=True)
except Exception as e:
    print("error", type(e).__name__, ran_out_of_memory(e), flush=True)
print("exit", jvm_exit_code(10), flush=True)
"""


def _run(how: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, how],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[2],  # the repository, for `jobs`
    )
    lines = [
        ln
        for ln in proc.stdout.splitlines()
        if ln.split(" ")[0] in ("running", "error", "exit", "no")
    ]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return lines


def test_an_out_of_memory_error_passed_on_by_spark_is_named() -> None:
    assert _run("task") == ["running None", "error Py4JJavaError True", "exit None"]


def test_a_jvm_that_exited_out_of_memory_is_named() -> None:
    running, error, exit_line = _run("exit")
    assert running == "running None"
    assert error.startswith("error ") and error.endswith(" True"), error
    assert exit_line == f"exit {JVM_OUT_OF_MEMORY}"
