"""Which `toArrow` errors are a stop's (jobs/runtime/stopping.py): the texts Py4J gives.

The texts below are the two shapes a stop was seen to take (tests/spark/test_stop_mid_batch.py
meets either, depending on where the stop lands), and a real failure that must stay one.
"""

from __future__ import annotations

from jobs.runtime.stopping import stopped

_CANCELLED = (
    "An error occurred while calling o321.toArrow.\n"
    ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 7 cancelled part of "
    "cancelled job group ...\n\tat org.apache.spark.scheduler.DAGScheduler..."
)
_INTERRUPTED = (
    "An error occurred while calling o542.getResult.\n"
    ": java.lang.InterruptedException\n"
    "\tat java.base/java.util.concurrent.locks.AbstractQueuedSynchronizer"
    ".acquireSharedInterruptibly(AbstractQueuedSynchronizer.java:1048)\n"
)
_FAILED = (
    "An error occurred while calling o321.toArrow.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed: "
    "org.apache.spark.api.python.PythonException: Traceback ... ValueError: bad\n"
    "\tat ...\nCaused by: java.lang.InterruptedException\n"
)


def test_cancelled_jobs_and_an_interrupted_wait_are_stops() -> None:
    assert stopped(_CANCELLED)
    assert stopped(_INTERRUPTED)


def test_a_failure_is_not_a_stop_even_with_an_interruption_deep_in_its_causes() -> None:
    assert not stopped(_FAILED)
    assert not stopped("")
