"""The job's log: kafka-python's retried metadata refreshes are warnings, other errors stay."""

from __future__ import annotations

import logging

import pytest

from jobs.cli import _retried_by_kafka

pytestmark = pytest.mark.unit


def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("kafka.cluster", level, __file__, 1, msg, ("Cancelled",), None)


def test_a_retried_metadata_refresh_is_a_warning() -> None:
    r = record("Metadata refresh: failed %s")
    assert _retried_by_kafka(r)
    assert (r.levelno, r.levelname) == (logging.WARNING, "WARNING")


def test_other_errors_stay_errors() -> None:
    r = record("Metadata refresh loop error: %s")
    assert _retried_by_kafka(r)
    assert (r.levelno, r.levelname) == (logging.ERROR, "ERROR")
