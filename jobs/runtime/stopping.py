r"""A batch caught by a stop: its result is abandoned, and Spark must see a stop, not a failure.

`query.stop()` (a SIGTERM or Ctrl-C to the job, jobs/cli.py) cancels the Spark jobs of the batch
in progress. The `foreachBatch` writer is then waiting for the batch's result (`toArrow`), which
fails with a Py4JJavaError whose text is the cancelled job's whole Java stack trace. That error
goes back to Spark's stream thread as the Python traceback's text, which Spark matches against
a regular expression (`StreamExecution.PROXY_ERROR`, `(.|\r\n|\r|\n)*` between a Py4J call
error and an interruption's class name) to tell a stop from a failure. Java's regex engine
recurses once per character of such a loop, so a trace of some thousand characters overflowed
the thread's stack: a StackOverflowError in the log of a stop that was otherwise clean.

The stop shows in one of two ways: the batch's jobs cancelled (`SPARK_JOB_CANCELLED` in the
error), or, when it lands while the driver waits for their result, that wait interrupted (the
error is a `java.lang.InterruptedException`). `collect` raises a short `BatchAbandoned`
instead, worded so that the same expression recognises a stop: Spark ends the query as
stopped, nothing of the batch was written to Redis and its offsets were not committed, so the
next start from the checkpoint redoes it.
"""

from __future__ import annotations

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame

__all__ = ["BatchAbandoned", "collect", "stopped"]

#: What Spark's stream thread looks for in a Python error to call it an interruption by a stop.
_STOP_TEXT = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling toArrow: "
    "java.lang.InterruptedException"
)


def stopped(error_text: str) -> bool:
    """Whether a Py4J error of `toArrow` (its text) is a stop's.

    Its jobs cancelled, or the wait for their result interrupted: the stop came while the
    driver waited, and the error itself is an `InterruptedException` naming no cancelled job.
    """
    head = error_text.lstrip().split("\n", 2)[:2]
    return "SPARK_JOB_CANCELLED" in error_text or any(
        line.lstrip(": ").startswith("java.lang.InterruptedException") for line in head
    )


class BatchAbandoned(Exception):
    """The query was stopped while the batch ran; the next start redoes it."""


def collect(batch: DataFrame, batch_id: int) -> pa.Table:
    """The batch's result on the driver, or `BatchAbandoned` when a stop cancelled its jobs."""
    try:
        return batch.toArrow()
    except Py4JJavaError as e:
        try:
            text = str(e)  # it comes from the JVM
        except Exception:  # noqa: BLE001 (the JVM is gone too: the error as it is)
            text = ""
        if not stopped(text):
            raise
        raise BatchAbandoned(
            f"batch {batch_id} abandoned: the query was stopped while it ran and the next "
            f"start redoes it ({_STOP_TEXT})"
        ) from None
