"""The job's Spark settings (jobs/runtime/session.py): defaults, `--conf` over them, checksums."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.runtime.session import local_checkpoint, session_settings, with_task_retries

CHECKSUM = "spark.sql.streaming.checkpoint.fileChecksum.enabled"
JAVA = "spark.driver.extraJavaOptions"


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("/var/tidegauge/checkpoint", True),
        ("checkpoint", True),
        ("file:///var/tidegauge/checkpoint", True),
        ("hdfs://namenode:8020/tidegauge", False),
        ("s3a://bucket/tidegauge", False),
    ],
)
def test_local_checkpoint(path: str, local: bool) -> None:
    assert local_checkpoint(path) is local


def test_checksum_files_are_off_only_for_a_local_checkpoint() -> None:
    assert session_settings("local[2]", checkpoint="/tmp/cp")[CHECKSUM] == "false"
    assert CHECKSUM not in session_settings("local[2]", checkpoint="hdfs://nn/cp")
    assert CHECKSUM not in session_settings("local[2]")
    # and the user can turn them back on
    on = session_settings("local[2]", conf=[(CHECKSUM, "true")], checkpoint="/tmp/cp")
    assert on[CHECKSUM] == "true"


def test_conf_replaces_settings_but_adds_java_options() -> None:
    s = session_settings(
        "local[2]",
        shuffle_partitions=2,
        conf=[
            ("spark.sql.shuffle.partitions", "3"),
            (JAVA, "-XX:TieredStopAtLevel=4"),
            ("spark.executor.memory", "2g"),
        ],
    )
    assert s["spark.sql.shuffle.partitions"] == "3"
    assert s["spark.executor.memory"] == "2g"
    # the user's after ours, so the JVM takes theirs: C2 back on
    jit, ours, added = s[JAVA].split()
    assert (jit, added) == ("-XX:TieredStopAtLevel=1", "-XX:TieredStopAtLevel=4")
    assert ours.startswith("-Dlog4j2.configurationFile=file:")
    assert Path(ours.split("file:", 1)[1]).is_file()  # the job's log settings ship with it
    assert s["spark.sql.session.timeZone"] == "UTC"


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("local", "local[1,4]"),
        ("local[2]", "local[2,4]"),
        ("local[*]", "local[*,4]"),
        ("local[2,1]", "local[2,1]"),  # a master that names its attempts keeps them
        ("spark://host:7077", "spark://host:7077"),
    ],
)
def test_local_masters_retry_failed_tasks(given: str, used: str) -> None:
    assert with_task_retries(given) == used
