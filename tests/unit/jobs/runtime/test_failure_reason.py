"""What `tidegauge job` prints when the query fails: one line that says what went wrong."""

from __future__ import annotations

from jobs.cli import failure_reason

# A query failure as Spark reports it: its first line says a traceback follows, the worker's
# error comes after the wrappers' (shortened from a real one).
WORKER_ERROR = """[STREAM_FAILED] Query [id = 4d0a] terminated with exception: \
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach \
batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most \
recent call last):
  File "/venv/pyspark/sql/utils.py", line 165, in call
    raise e
pyspark.errors.exceptions.captured.PythonException:
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/work/jobs/summary/read_task.py", line 262, in read
    yield _summary(pending, clock, cfg)
          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
TypeError: only integer scalar arrays can be converted to a scalar index

\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:600)
"""


def test_a_python_error_in_a_task_is_named() -> None:
    assert failure_reason(WORKER_ERROR) == (
        "TypeError: only integer scalar arrays can be converted to a scalar index "
        "(--verbose shows where)"
    )


def test_our_own_errors_and_plain_failures_as_before() -> None:
    text = WORKER_ERROR.replace(
        "TypeError: only integer",
        "jobs.source.kafka_log.SourceError: offset 5 is gone; only integer",
    )
    assert failure_reason(text).startswith("offset 5 is gone")
    assert failure_reason("java.lang.IllegalStateException: boom\n\tat x") == (
        "java.lang.IllegalStateException: boom"
    )
    assert failure_reason("") == "unknown error"
