"""A class-data-sharing archive of Spark's classes: the driver JVM starts ~7 s sooner.

Every `tidegauge job` (and demo, and Spark test) starts a JVM that loads and verifies thousands
of classes of Spark's jars before the first batch: 16-17 s to a first trivial query on two
cores, 9-10 s with the archive (BENCHMARKS.md, "Job start"). Java's application class-data
sharing (AppCDS, JDK 13+) keeps those classes parsed and verified in a memory-mapped archive
written once by a training run (`-XX:ArchiveClassesAtExit`); later JVMs map it
(`-XX:SharedArchiveFile`).

An archive is only valid for the JVM and the class path it was written with, so its file name
carries a key of both (the java binary, its version, pyspark's version, its jars' paths, sizes
and times): another Java, pyspark or virtualenv simply finds no archive and starts as before.
A JVM that cannot use an archive also starts as before (its warning is turned off). `make
setup` writes it (`python -m jobs.runtime.jvm_archive_writer`); the archive lives in
`$TIDEGAUGE_CACHE_DIR` (default `~/.cache/tidegauge`), ~160 MB.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path

__all__ = [
    "ARCHIVE_OFF",
    "archive_key",
    "archive_options",
    "archive_path",
    "cache_dir",
    "java_version",
]

#: Where archives live unless `$TIDEGAUGE_CACHE_DIR` says otherwise.
DEFAULT_CACHE = Path.home() / ".cache" / "tidegauge"

#: Keeps the JVM quiet about an archive it cannot map (it then starts without one).
ARCHIVE_OFF = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> Path:
    """The directory of Tidegauge's caches (`$TIDEGAUGE_CACHE_DIR`, default ~/.cache/tidegauge)."""
    return Path(os.environ.get("TIDEGAUGE_CACHE_DIR") or DEFAULT_CACHE)


def _java() -> str:
    """The java binary spark-submit runs: $JAVA_HOME/bin/java, else `java` on PATH."""
    from shutil import which

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else which("java") or "java"
    return os.path.realpath(java)


#: What the training run runs (jobs/runtime/jvm_archive_writer.py): a new one, a new archive.
TRAINING = "python-source-foreachBatch"


def archive_key(java: str, java_version: str, pyspark_version: str, jars: list[str]) -> str:
    """What an archive is valid for, as 16 hex digits (pure): the JVM, Spark, its class path."""
    h = hashlib.sha256()
    for part in (java, java_version, pyspark_version, *sorted(jars)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def java_version(java: str) -> str | None:
    """What `java -version` prints (None if it cannot run); asked once per binary and process."""
    return _java_version(os.path.realpath(java))


@functools.cache
def _java_version(java: str) -> str | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stderr + out.stdout).strip()


@functools.cache
def _key(java: str) -> str:
    import pyspark

    version = java_version(java) or "?"
    # the jars as the JVM checks them against the archive's record: path, size, modified time
    # (a pyspark reinstalled in the same place gets new jars, so a new archive)
    jars = sorted(
        f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars_dir().glob("*.jar")
    )
    return archive_key(java, version, f"{pyspark.__version__}+{TRAINING}", jars)


def jars_dir() -> Path:
    """The installed pyspark's jars: Spark's class path."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def archive_path(cache: Path | None = None) -> Path:
    """The archive file for this machine's Java and pyspark (it may not exist)."""
    return (cache or cache_dir()) / "jvm" / f"spark-{_key(_java())}.jsa"


def archive_options(cache: Path | None = None) -> str:
    """Java options that map this machine's archive, or "" when there is none.

    Never a `-XX:SharedArchiveFile` naming a missing file: the JVM would then start without
    even its own base archive.
    """
    if os.environ.get("TIDEGAUGE_JVM_ARCHIVE", "on") == "off":
        return ""
    path = archive_path(cache)
    return f"-XX:SharedArchiveFile={path} {ARCHIVE_OFF}" if path.is_file() else ""
