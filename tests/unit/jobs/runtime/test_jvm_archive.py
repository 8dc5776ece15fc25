"""The JVM's class archive (jobs/runtime/jvm_archive.py): its name, and when a JVM is offered it.

The archive is named for the Java and pyspark it was written with and only ever offered to a JVM
when its file exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.runtime.jvm_archive import ARCHIVE_OFF, archive_key, archive_options, archive_path

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
