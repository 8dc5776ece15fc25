"""Writing the JVM's class archive (jobs/runtime/jvm_archive_writer.py): what it prunes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


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
