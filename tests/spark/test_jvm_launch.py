"""Spark's JVM started again once when it exits before answering (`jobs.runtime.session._launch`).

Its launcher exited without a word once in a loaded CI run, which failed a whole demo. Here a
real `java` behind a wrapper that fails its first launch (not the `-version` check): the
session must still come up, say that it started the JVM again, and compute; a `java` that
always fails must still fail, with PySpark's error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.runtime.session import LAUNCH_ATTEMPTS, ensure_java

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """
from jobs.runtime.session import build_session
spark = build_session("local[1]", ui=False, shuffle_partitions=1)
print("rows", spark.range(5).count(), flush=True)
spark.stop()
"""


def _wrapped_java(tmp_path: Path, failures: int) -> Path:
    """A JAVA_HOME whose `java` fails its first `failures` launches, then runs the real one."""
    found = ensure_java()
    real = Path(found) / "bin" / "java" if Path(found).is_dir() else Path(found)
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    count = tmp_path / "launches"
    java = home / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" != "-version" ]; then\n'
        f'  n=$(cat "{count}" 2>/dev/null || echo 0); echo $((n + 1)) > "{count}"\n'
        f'  if [ "$n" -lt {failures} ]; then exit 1; fi\n'
        "fi\n"
        f'exec "{real}" "$@"\n'
    )
    java.chmod(0o755)
    return home


def _run(home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, JAVA_HOME=str(home), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_jvm_that_exits_while_starting_is_started_again(tmp_path: Path) -> None:
    done = _run(_wrapped_java(tmp_path, failures=1))
    assert done.returncode == 0, done.stderr
    assert "rows 5" in done.stdout
    assert "Spark's JVM exited while starting" in done.stderr
    assert "starting it again" in done.stderr


def test_a_jvm_that_cannot_start_still_fails(tmp_path: Path) -> None:
    done = _run(_wrapped_java(tmp_path, failures=LAUNCH_ATTEMPTS))
    assert done.returncode != 0
    assert "JAVA_GATEWAY_EXITED" in done.stderr
    assert done.stderr.count("starting it again") == LAUNCH_ATTEMPTS - 1
