"""The worker daemon (jobs/runtime/worker_daemon.py) takes only pyspark's own zips off the path."""

from __future__ import annotations

import os

import pytest

from jobs.runtime.worker_daemon import redundant_zips

pytestmark = pytest.mark.unit


def test_only_zips_inside_the_installed_package_are_redundant(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pkg = tmp_path / "site-packages" / "pyspark"
    lib = pkg / "python" / "lib"
    lib.mkdir(parents=True)
    other = tmp_path / "spark-4.0.0" / "python" / "lib"
    other.mkdir(parents=True)
    path = [
        str(lib / "pyspark.zip"),
        str(lib / "py4j-0.10.9.9-src.zip"),
        str(pkg / "jars" / "spark-core_2.13-4.1.4.jar"),
        str(other / "pyspark.zip"),
        str(tmp_path / "site-packages"),
        "/usr/lib/python311.zip",
    ]
    assert redundant_zips(path, str(pkg)) == path[:3]
    assert redundant_zips(path, None) == []


def test_a_symlinked_spark_home_is_recognised(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pkg = tmp_path / "pyspark"
    (pkg / "python" / "lib").mkdir(parents=True)
    link = tmp_path / "spark-home"
    os.symlink(pkg, link)
    zip_path = str(link / "python" / "lib" / "pyspark.zip")
    assert redundant_zips([zip_path], str(pkg)) == [zip_path]
