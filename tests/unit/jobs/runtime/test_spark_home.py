"""The linked SPARK_HOME (jobs/runtime/spark_home.py), which makes Spark's processes start faster.

It links the package's launch scripts and jars but has no zips of pyspark's Python code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.runtime.spark_home import LINKED, spark_home, use_linked_home

pytestmark = pytest.mark.unit


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
