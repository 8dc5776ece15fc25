"""Writes Spark's class archive (jobs/runtime/jvm_archive.py), run once by `make setup`.

A training run starts a session as a job does, runs what a job's JVM runs (SQL, Arrow, a
streaming Python data source and `foreachBatch`) and lets the JVM exit, which writes the
classes it loaded (`-XX:ArchiveClassesAtExit`); the file is then renamed into place. ~1 min,
once per Java and pyspark; `make setup` runs it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from jobs.runtime.jvm_archive import ARCHIVE_OFF, archive_path, jars_dir

__all__ = ["build_archive", "main"]


class _TrainingReader(DataSourceStreamReader):
    """A stream of a few Arrow rows a batch in two partitions: the job's plan, without Kafka."""

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        return {"n": 0}

    def latestOffset(self) -> dict:  # noqa: N802
        return {"n": int(time.time())}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(i) for i in range(2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        now_us = time.time_ns() // 1000
        yield pa.record_batch(
            {
                "event_time": pa.array([now_us - 10_000, now_us], pa.timestamp("us", tz="UTC")),
                "blob": pa.array([b"x", b"y"], pa.binary()),
            }
        )

    def commit(self, end: dict) -> None:
        pass


class _TrainingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidegauge-jvm-training"

    def schema(self) -> str:
        return "event_time timestamp, blob binary"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        return _TrainingReader()


def _train(out: str) -> None:
    """Run what a job's JVM runs, then let the JVM exit, writing the classes it loaded.

    What it runs: SQL and Arrow, then the job's plan: a streaming Python data source yielding
    Arrow batches in Python workers, a watermark, and `foreachBatch` collecting each batch as
    Arrow (jobs/pipeline.py).
    """
    from pyspark.sql import functions as F

    from jobs.runtime.session import build_session

    opts = f"-XX:ArchiveClassesAtExit={out} {ARCHIVE_OFF}"
    spark = build_session(
        "local[2]", ui=False, conf=[("spark.driver.extraJavaOptions", opts)], shuffle_partitions=2
    )
    spark.range(1000).withColumn("k", F.col("id") % 7).groupBy("k").count().toArrow()
    spark.dataSource.register(_TrainingSource)

    with tempfile.TemporaryDirectory(prefix="tg-jvm-train-") as tmp:
        query = (
            spark.readStream.format(_TrainingSource.name())
            .load()
            .withWatermark("event_time", "1 second")
            .writeStream.foreachBatch(lambda df, _: df.toArrow())
            .option("checkpointLocation", tmp)
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            last = query.lastProgress
            if last is not None and last.batchId >= 3 or query.exception() is not None:
                break
            time.sleep(0.2)
        failed = query.exception()
        query.stop()
        if failed is not None:  # an archive of a query that failed would miss its classes
            raise RuntimeError(f"the training query failed: {failed}")
    gateway = spark.sparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()  # the JVM exits at the end of its stdin, writing the archive
        proc.wait(300)


def _prune(keep: Path) -> None:
    """Delete the archives this one replaces, and those of pyspark installations that are gone.

    Each archive names its jars' directory beside it (`.jars`): one naming the same directory
    as `keep` was written for jars since replaced (a reinstall, another Java); one naming a
    directory that no longer exists belongs to a removed environment.
    """
    mine = keep.with_suffix(".jars").read_text().strip()
    for old in keep.parent.glob("spark-*.jsa"):
        source = old.with_suffix(".jars")
        try:
            jars = source.read_text().strip()
        except OSError:
            jars = ""  # written before the name of its jars was kept beside it
        if old != keep and (jars == mine or not jars or not Path(jars).is_dir()):
            old.unlink(missing_ok=True)
            source.unlink(missing_ok=True)


def build_archive(cache: Path | None = None, force: bool = False) -> Path | None:
    """Write this machine's archive (a training run of ~1 min); None if Java cannot write one."""
    path = archive_path(cache)
    if path.is_file() and not force:
        print(f"jvm archive: {path} (already there)")
        return path
    print("jvm archive: writing Spark's class archive once (~1 min): later JVMs start faster")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    started = time.monotonic()
    env = {**os.environ, "TIDEGAUGE_JVM_ARCHIVE": "off"}
    run = subprocess.run(
        [sys.executable, "-m", "jobs.runtime.jvm_archive_writer", "--train", str(tmp)],
        env=env,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        print(f"jvm archive: not written ({' | '.join(tail) or 'no archive'})", file=sys.stderr)
        return None
    os.replace(tmp, path)  # atomic: a concurrent start maps a whole archive or none
    path.with_suffix(".jars").write_text(str(jars_dir()))
    _prune(path)
    took = time.monotonic() - started
    size = path.stat().st_size / 1e6
    print(f"jvm archive: {path} ({size:.0f} MB) written in {took:.0f}s")
    return path


def main(argv: list[str] | None = None) -> int:
    """`python -m jobs.runtime.jvm_archive_writer [--force]`: write the archive unless it exists."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="write it again even if it exists")
    ap.add_argument("--train", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.train:
        _train(args.train)
        return 0
    # A JVM that cannot write one still runs Tidegauge, only slower to start: not an error.
    build_archive(force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
