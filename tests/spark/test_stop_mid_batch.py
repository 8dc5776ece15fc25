"""A stop that lands while a batch's result is being collected (jobs/runtime/stopping.py).

`query.stop()` cancels the batch's Spark jobs under the `foreachBatch` writer. The writer must
abandon the batch (nothing written, its offsets not committed) and Spark must end the query as
stopped: no exception on the query, no StackOverflowError from the stream thread's matching of
a whole Java stack trace, and the next start from the checkpoint redoes the batch.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from jobs.runtime.stopping import BatchAbandoned, collect


def _slow(x: int) -> int:
    time.sleep(0.02)  # a batch of ~200 rows takes seconds to collect: room for the stop
    return x


def test_a_stop_while_a_batch_is_collected_is_a_stop_not_a_failure(
    spark: Any, tmp_path: Path
) -> None:
    running = threading.Event()
    abandoned: list[BatchAbandoned] = []
    written: list[int] = []

    def writer(batch: Any, batch_id: int) -> None:
        if batch_id >= 1:  # batch 0 of the rate source is empty
            running.set()
        try:
            collect(batch, batch_id)
        except BatchAbandoned as e:
            abandoned.append(e)
            raise
        written.append(batch_id)

    rows = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    slow = rows.select(F.udf(_slow, "long")("value").alias("v"))
    checkpoint = tmp_path / "checkpoint"
    query = (
        slow.writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        assert running.wait(120), "no batch with rows"
        time.sleep(0.5)  # its tasks are running now
    finally:
        query.stop()
    assert query.exception() is None  # Spark took it for a stop
    (e,) = abandoned
    assert "abandoned: the query was stopped while it ran" in str(e)
    # its offsets were planned, not committed: the next start redoes it
    offsets = {int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()}
    commits = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    assert max(offsets) not in commits and max(offsets) not in written
    assert commits == set(written)
