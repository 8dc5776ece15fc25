"""A SPARK_HOME for a pip-installed pyspark whose Python processes import from site-packages.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on the `PYTHONPATH` of
every Python process it starts. A pip-installed pyspark is its own SPARK_HOME and ships those
zips beside the installed package: the same code, but a zip holds no compiled bytecode, so every
process compiles the pyspark modules it imports from source. The job's task workers avoid it
(jobs/runtime/worker_daemon.py), but Spark also starts short-lived planner processes of the Python
data source (look it up, create it, plan its reads, run its stream planner) with pyspark's own
daemon: ~1.4 s of CPU each instead of ~0.3 s, on the path to the first batch (BENCHMARKS.md,
"Job start").

`spark_home()` gives a directory that links the package's `bin`, `jars`, `sbin`, ... but has
no `python/lib` zips, so those processes import the installed package. A SPARK_HOME set by the
user, or any other Spark distribution, is left alone.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["LINKED", "spark_home", "use_linked_home"]

#: What of the package a Spark home needs: the launch scripts, the jars, and the rest as is.
LINKED = ("bin", "sbin", "jars", "data", "examples", "licenses", "conf")


def spark_home(package: Path, cache: Path) -> Path:
    """The linked home for the pyspark package at `package`, made under `cache` if missing.

    Keyed by the package's path, so each environment gets its own; made in a temporary
    directory and renamed into place, so concurrent starts never see half of one.
    """
    key = hashlib.sha256(str(package.resolve()).encode()).hexdigest()[:12]
    home = cache / f"spark-home-{key}"
    if (home / "jars").is_dir():
        return home
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".spark-home-", dir=cache))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide a home made at image build from other users
    for name in LINKED:
        if (package / name).exists():
            (tmp / name).symlink_to(package.resolve() / name)
    (tmp / "python").mkdir()  # no lib/pyspark.zip: Python finds the installed package
    try:
        tmp.rename(home)
    except OSError:  # made by a concurrent start meanwhile
        for child in tmp.iterdir():
            if child.is_symlink():
                child.unlink()
            else:
                child.rmdir()
        tmp.rmdir()
    return home


def use_linked_home(cache: Path) -> str | None:
    """Set SPARK_HOME to the linked home of the installed pyspark, unless one is set already.

    Returns the SPARK_HOME in force (None if pyspark is not a pip-installed Spark, or the
    cache is not writable).
    """
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    import pyspark

    package = Path(pyspark.__file__).parent
    if not (package / "jars").is_dir() or not (package / "bin" / "spark-submit").exists():
        return None
    try:
        home = spark_home(package, cache)
    except OSError:  # no writable cache: the package itself stays the home (slower to plan)
        return None
    os.environ["SPARK_HOME"] = str(home)
    return str(home)
