r"""A batch caught by a stop: its result is abandoned, and Spark must see a stop, not a failure.

`query.stop()` (a SIGTERM or Ctrl-C to the job, jobs/cli.py) cancels the Spark jobs of the batch
in progress. The `foreachBatch` writer is then waiting for the batch's result (`toArrow`), which
fails with a Py4JJavaError whose text is the cancelled job's whole Java stack trace. That error
goes back to Spark's stream thread as the Python traceback's text, which Spark matches against
a regular expression (`StreamExecution.PROXY_ERROR`, `(.|\r\n|\r|\n)*` between a Py4J call
error and an interruption's class name) to tell a stop from a failure. Java's regex engine
recurses once per character of such a loop, so a trace of some thousand characters overflowed
the thread's stack: a StackOverflowError in the log of a stop that was otherwise clean.

`collect` raises a short `BatchAbandoned` instead, worded so that the same expression
recognises a stop: Spark ends the query as stopped, nothing of the batch was written to Redis
and its offsets were not committed, so the next start from the checkpoint redoes it.
"""

from __future__ import annotations

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame

__all__ = ["BatchAbandoned", "collect"]

#: What Spark's stream thread looks for in a Python error to call it an interruption by a stop.
_STOP_TEXT = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling toArrow: "
    "java.lang.InterruptedException"
)


class BatchAbandoned(Exception):
    """The query was stopped while the batch ran; the next start redoes it."""


def collect(batch: DataFrame, batch_id: int) -> pa.Table:
    """The batch's result on the driver, or `BatchAbandoned` when a stop cancelled its jobs."""
    try:
        return batch.toArrow()
    except Py4JJavaError as e:
        try:
            cancelled = "SPARK_JOB_CANCELLED" in str(e)  # its text comes from the JVM
        except Exception:  # noqa: BLE001 (the JVM is gone too: the error as it is)
            cancelled = False
        if not cancelled:
            raise
        raise BatchAbandoned(
            f"batch {batch_id} abandoned: the query was stopped while it ran and the next "
            f"start redoes it ({_STOP_TEXT})"
        ) from None
