"""What makes Spark's JVM and its Python processes start faster, without Spark.

The class archive (jobs/runtime/jvm_archive.py) is named for the Java and pyspark it was written
with and only ever offered to a JVM when its file exists; the linked SPARK_HOME
(jobs/runtime/spark_home.py)
links the package's launch scripts and jars but has no zips of pyspark's Python code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.runtime.jvm_archive import ARCHIVE_OFF, archive_key, archive_options, archive_path
from jobs.runtime.spark_home import LINKED, spark_home, use_linked_home

pytestmark = pytest.mark.unit


def test_the_archive_key_changes_with_the_java_the_pyspark_and_the_jars() -> None:
    base = archive_key("/usr/bin/java", 'version "17.0.15"', "4.1.4", ["a.jar", "b.jar"])
    assert base == archive_key("/usr/bin/java", 'version "17.0.15"', "4.1.4", ["b.jar", "a.jar"])
    others = {
        archive_key("/opt/jdk21/bin/java", 'version "17.0.15"', "4.1.4", ["a.jar", "b.jar"]),
        archive_key("/usr/bin/java", 'version "17.0.16"', "4.1.4", ["a.jar", "b.jar"]),
        archive_key("/usr/bin/java", 'version "17.0.15"', "4.2.0", ["a.jar", "b.jar"]),
        archive_key("/usr/bin/java", 'version "17.0.15"', "4.1.4", ["a.jar", "c.jar"]),
    }
    assert base not in others and len(others) == 4


def test_an_archive_is_offered_only_when_its_file_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIDEGAUGE_JVM_ARCHIVE", raising=False)
    # a missing file would make the JVM drop even its own base archive: offer nothing
    assert archive_options(tmp_path) == ""
    path = archive_path(tmp_path)
    assert path.parent == tmp_path / "jvm" and path.name.startswith("spark-")
    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert archive_options(tmp_path) == f"-XX:SharedArchiveFile={path} {ARCHIVE_OFF}"
    monkeypatch.setenv("TIDEGAUGE_JVM_ARCHIVE", "off")
    assert archive_options(tmp_path) == ""


def _package(root: Path) -> Path:
    """A pip-installed pyspark's layout: launch scripts, jars, and the zips of its Python."""
    pkg = root / "site-packages" / "pyspark"
    for d in ("bin", "sbin", "jars", "python/lib"):
        (pkg / d).mkdir(parents=True)
    (pkg / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (pkg / "jars" / "spark-core.jar").write_bytes(b"jar")
    (pkg / "python" / "lib" / "pyspark.zip").write_bytes(b"zip")
    return pkg


def test_the_linked_home_has_the_jars_and_scripts_but_no_zips(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    home = spark_home(pkg, tmp_path / "cache")
    assert (home / "bin" / "spark-submit").is_file()
    assert (home / "jars" / "spark-core.jar").read_bytes() == b"jar"
    assert (home / "sbin").resolve() == (pkg / "sbin").resolve()
    assert (home / "python").is_dir() and not (home / "python" / "lib").exists()
    assert home.stat().st_mode & 0o777 == 0o755  # readable by every user (an image's home)
    assert not (home / "data").exists()  # only what the package has is linked
    assert set(LINKED) >= {p.name for p in home.iterdir() if p.is_symlink()}
    # the same home again, and no half-made ones left beside it
    assert spark_home(pkg, tmp_path / "cache") == home
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [home.name]
    # another environment's pyspark gets a home of its own
    other = _package(tmp_path / "other")
    assert spark_home(other, tmp_path / "cache") != home


def test_a_spark_home_the_user_set_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert use_linked_home(tmp_path) == "/opt/spark"
    assert os.environ["SPARK_HOME"] == "/opt/spark"
    assert not tmp_path.joinpath("cache").exists()


def test_without_a_writable_cache_the_package_stays_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a copy of the environment, so that the home set here does not outlive the test
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "SPARK_HOME"})
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert use_linked_home(blocked / "cache") is None
    assert "SPARK_HOME" not in os.environ
    home = use_linked_home(tmp_path / "cache")
    assert home is not None and os.environ["SPARK_HOME"] == home
    assert (Path(home) / "jars").is_dir() and not (Path(home) / "python" / "lib").exists()


def test_writing_an_archive_prunes_the_ones_it_replaces_and_those_of_removed_installations(
    tmp_path: Path,
) -> None:
    from jobs.runtime.jvm_archive_writer import _prune

    jvm = tmp_path / "jvm"
    jvm.mkdir()
    mine, other_venv = tmp_path / "venv" / "jars", tmp_path / "other" / "jars"
    mine.mkdir(parents=True)
    other_venv.mkdir(parents=True)
    removed = tmp_path / "removed" / "jars"
    names = ("kept", "replaced", "other", "gone", "old")
    kept, replaced, other, gone, unnamed = (jvm / f"spark-{k}.jsa" for k in names)
    for archive in (kept, replaced, other, gone, unnamed):
        archive.write_bytes(b"archive")
    kept.with_suffix(".jars").write_text(str(mine))
    replaced.with_suffix(".jars").write_text(str(mine))  # the same jars before a reinstall
    other.with_suffix(".jars").write_text(str(other_venv))  # another virtualenv, still there
    gone.with_suffix(".jars").write_text(str(removed))
    _prune(kept)
    assert sorted(p.name for p in jvm.iterdir()) == [
        "spark-kept.jars",
        "spark-kept.jsa",
        "spark-other.jars",
        "spark-other.jsa",
    ]
