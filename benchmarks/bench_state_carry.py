"""What `applyInPandasWithState` costs to carry its state from batch to batch, before any work.

    .venv/bin/python benchmarks/bench_state_carry.py [--mb 0,1,3] [--keys 4] [--batches 10]
        [--operator state|files] [--conf KEY=VALUE ...]

A file stream of `--batches` tiny batches (one row per key) goes through `applyInPandasWithState`
whose function does nothing but keep a state of `--mb` MB per key (random bytes: the job's
shard states hold sketches and id hashes, which compress about 2:1), on `local[2]` with 2
shuffle partitions, into Spark's `noop` sink. Per state size it prints the median batch and the
median of Spark's `allUpdatesTimeMs` (summed over tasks) over the batches after the first three,
and what one more byte of state costs. The job's state shards (jobs/state/codec.py) go through
this operator every batch: this is the floor under its state step. Nothing is asserted.

`--operator files` measures the alternative: no Spark state at all, each batch (`foreachBatch`)
shuffled by key into a `mapInArrow` whose task reads each key's state from a file of the batch
before and writes the batch's own (kept per batch id, as a replay needs), into the `noop` sink;
its "state updates" column is the batch's `foreachBatch` time (addBatch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402
from jobs.runtime.session import build_session  # noqa: E402


def _source(root: Path, keys: int, batches: int) -> Path:
    """A directory of `batches` JSON files, one row per key each: one file a batch."""
    source = root / "in"
    source.mkdir(parents=True)
    for i in range(batches):
        lines = [json.dumps({"k": k, "v": i}) for k in range(keys)]
        (source / f"{i:04d}.json").write_text("\n".join(lines) + "\n")
    return source


def run(spark: Any, root: Path, mb: float, keys: int, batches: int) -> tuple[float, float]:
    """(median batch ms, median update ms) of a stream carrying `mb` MB of state per key."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    source = _source(root, keys, batches)
    blob = os.urandom(int(mb * 1e6))

    def carry(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Any:
        n = sum(len(f) for f in frames)
        kept = bytes(state.get[0]) if state.exists else blob
        state.update((kept,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    stream = (
        spark.readStream.schema("k long, v long")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .groupBy("k")
        .applyInPandasWithState(
            carry,
            outputStructType="k long, n long",
            stateStructType="blob binary",
            outputMode="update",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    )
    writer = stream.writeStream.format("noop").outputMode("update")
    return _medians(writer, root, lambda p: p["stateOperators"][0]["allUpdatesTimeMs"])


def run_files(spark: Any, root: Path, mb: float, keys: int, batches: int) -> tuple[float, float]:
    """`run` with the state in files of its own: (median batch ms, median addBatch ms)."""
    import pyarrow as pa

    source = _source(root, keys, batches)
    store = root / "state"
    size = int(mb * 1e6)

    def each(df: Any, batch_id: int) -> None:
        def carry(batches_in: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            ks = sorted({k for b in batches_in for k in b.column("k").to_pylist()})
            for k in ks:
                prev = store / str(k) / str(batch_id - 1)
                kept = prev.read_bytes() if prev.exists() else os.urandom(size)
                (store / str(k)).mkdir(parents=True, exist_ok=True)
                tmp = store / str(k) / f".{batch_id}.tmp"
                tmp.write_bytes(kept)
                tmp.replace(store / str(k) / str(batch_id))
            yield pa.RecordBatch.from_pydict(
                {"k": ks, "n": [1] * len(ks)},
                schema=pa.schema([("k", pa.int64()), ("n", pa.int64())]),
            )

        out = df.repartition(2, "k").mapInArrow(carry, "k long, n long")
        out.write.format("noop").mode("overwrite").save()

    stream = spark.readStream.schema("k long, v long").option("maxFilesPerTrigger", 1)
    writer = stream.json(str(source)).writeStream.foreachBatch(each)
    return _medians(writer, root, lambda p: p["durationMs"]["addBatch"])


def _medians(writer: Any, root: Path, part: Callable[[Any], float]) -> tuple[float, float]:
    """Run the query to its end: (median batch ms, median of `part` ms) after three batches."""
    query = (
        writer.option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    done = [p for p in query.recentProgress if p["numInputRows"]][3:]
    batch = statistics.median(p["durationMs"]["triggerExecution"] for p in done)
    return batch, statistics.median(part(p) for p in done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", default="0,1,3", help="state sizes per key, MB")
    parser.add_argument("--keys", type=int, default=4, help="state keys (the job's shards)")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument(
        "--operator",
        choices=("state", "files"),
        default="state",
        help="applyInPandasWithState, or a mapInArrow keeping its state in files",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeat)"
    )
    args = parser.parse_args()
    conf = [tuple(c.split("=", 1)) for c in args.conf]
    print(describe(["pyspark", "pyarrow", "pandas"]))
    figures: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="tg-carry-") as tmp:
        # the job's settings for a checkpoint on the local disk (no Spark checksum files)
        spark = build_session("local[2]", shuffle_partitions=2, ui=False, conf=conf, checkpoint=tmp)
        for k, mb in enumerate(float(x) for x in args.mb.split(",")):
            t = time.perf_counter()
            how = run if args.operator == "state" else run_files
            batch, update = how(spark, Path(tmp) / str(k), mb, args.keys, args.batches)
            figures.append((mb, batch, update))
            print(
                f"{mb:g} MB x {args.keys} keys: batch {batch:,.0f} ms, state updates "
                f"{update:,.0f} ms (median of {args.batches - 3}; {time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    (mb0, b0, _), (mb1, b1, _) = figures[0], figures[-1]
    if mb1 > mb0:
        per_byte = (b1 - b0) / ((mb1 - mb0) * 1e6 * args.keys) * 1e6
        print(f"one more byte of state: {per_byte:.1f} ns per batch")


if __name__ == "__main__":
    main()
