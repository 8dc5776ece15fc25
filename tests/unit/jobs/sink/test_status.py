"""`jobs.sink.status.progress_summary` on StreamingQueryProgress JSON dicts shaped like Spark 4's.

Three progress events of one query: the first batch (startOffset null, watermark at the epoch),
a normal batch, and an idle (no-data) progress that has no `eventTime.max`.
"""

from __future__ import annotations

import calendar
import copy
import time
from datetime import datetime
from typing import Any

import pytest

from jobs.sink.status import progress_summary

LATENESS = 30_000
QUERY_ID = "5a1f4d9e-2c3b-4e7a-9f10-0b6c3d2e1a99"
RUN_ID = "7d2e9c41-8b6a-4f3e-a1d2-c3b4a5f6e7d8"


def ms(iso: str) -> int:
    """Epoch ms of a `...Z` timestamp, computed without the code under test."""
    whole, _, frac = iso.rstrip("Z").partition(".")
    secs = calendar.timegm(datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").timetuple())
    return secs * 1000 + int((frac or "0").ljust(3, "0")[:3])


def _source(
    start: dict[str, int] | None,
    end: dict[str, int],
    latest: dict[str, int],
    rows: int,
    in_rate: float,
    proc_rate: float,
) -> dict[str, Any]:
    src: dict[str, Any] = {
        "description": "tidegauge-kafka",
        "startOffset": start,
        "endOffset": end,
        "latestOffset": latest,
        "numInputRows": rows,
        "processedRowsPerSecond": proc_rate,
        "metrics": {},
    }
    if in_rate == in_rate:  # Spark leaves NaN rates out of the JSON
        src["inputRowsPerSecond"] = in_rate
    return src


def _state_operator(total: int, dropped: int) -> dict[str, Any]:
    return {
        "operatorName": "flatMapGroupsWithState",
        "numRowsTotal": total,
        "numRowsUpdated": total,
        "allUpdatesTimeMs": 12,
        "numRowsRemoved": 0,
        "allRemovalsTimeMs": 0,
        "commitTimeMs": 40,
        "memoryUsedBytes": 12_345,
        "numRowsDroppedByWatermark": dropped,
        "numShufflePartitions": 4,
        "numStateStoreInstances": 4,
        "customMetrics": {"loadedMapCacheHitCount": 0, "stateOnCurrentVersionSizeBytes": 900},
    }


FIRST = {
    "id": QUERY_ID,
    "runId": RUN_ID,
    "name": "tidegauge",
    "timestamp": "2026-11-22T10:00:00.000Z",
    "batchId": 0,
    "batchDuration": 4_321,
    "numInputRows": 1_500,
    # first batch: no previous trigger, so Spark has no input rate (NaN, left out of the JSON)
    "processedRowsPerSecond": 347.14,
    "durationMs": {
        "addBatch": 3_800,
        "commitOffsets": 25,
        "getBatch": 0,
        "latestOffset": 14,
        "queryPlanning": 420,
        "triggerExecution": 4_321,
        "walCommit": 31,
    },
    "eventTime": {
        "avg": "2026-11-22T09:59:50.250Z",
        "max": "2026-11-22T09:59:58.500Z",
        "min": "2026-11-22T09:59:40.000Z",
        "watermark": "1970-01-01T00:00:00.000Z",
    },
    "stateOperators": [_state_operator(6, 0)],
    "sources": [
        _source(
            None,
            {"0": 500, "1": 500, "2": 500},
            {"0": 500, "1": 500, "2": 500},
            1_500,
            float("nan"),
            347.14,
        )
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    "observedMetrics": {},
}

NORMAL = {
    "id": QUERY_ID,
    "runId": RUN_ID,
    "name": "tidegauge",
    "timestamp": "2026-11-22T10:00:05.123Z",
    "batchId": 1,
    "batchDuration": 812,
    "numInputRows": 900,
    "inputRowsPerSecond": 175.56,
    "processedRowsPerSecond": 1_108.37,
    "durationMs": {
        "addBatch": 700,
        "commitOffsets": 20,
        "getBatch": 0,
        "latestOffset": 9,
        "queryPlanning": 50,
        "triggerExecution": 812,
        "walCommit": 25,
    },
    "eventTime": {
        "avg": "2026-11-22T10:00:01.000Z",
        "max": "2026-11-22T10:00:05.250Z",
        "min": "2026-11-22T09:59:20.000Z",
        "watermark": "2026-11-22T09:59:28.500Z",
    },
    "stateOperators": [_state_operator(7, 3), _state_operator(2, 0)],
    "sources": [
        _source(
            {"0": 500, "1": 500, "2": 500},
            {"0": 800, "1": 800, "2": 800},
            {"0": 1_000, "1": 990, "2": 1_010},
            900,
            175.56,
            1_108.37,
        )
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    "observedMetrics": {},
}

IDLE = {
    "id": QUERY_ID,
    "runId": RUN_ID,
    "name": "tidegauge",
    "timestamp": "2026-11-22T10:00:20.000Z",
    "batchId": 2,
    "batchDuration": 0,
    "numInputRows": 0,
    "inputRowsPerSecond": 0.0,
    "processedRowsPerSecond": 0.0,
    "durationMs": {"latestOffset": 7, "triggerExecution": 7},
    "eventTime": {"watermark": "2026-11-22T09:59:35.250Z"},
    "stateOperators": [_state_operator(7, 0)],
    "sources": [
        _source(
            {"0": 1_000, "1": 990, "2": 1_010},
            {"0": 1_000, "1": 990, "2": 1_010},
            {"0": 1_000, "1": 990, "2": 1_010},
            0,
            0.0,
            0.0,
        )
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    "observedMetrics": {},
}


def test_first_batch() -> None:
    before = time.time() * 1000
    s = progress_summary(FIRST, LATENESS)
    after = time.time() * 1000
    assert s["batch_id"] == 0
    assert s["query_id"] == QUERY_ID
    assert s["batch_time"] == ms("2026-11-22T10:00:00.000Z")
    assert before - 1 <= s["status_time"] <= after + 1
    assert s["start_offsets"] == {}  # startOffset null: nothing before the first batch
    assert s["offsets"] == {"0": 500, "1": 500, "2": 500}
    assert s["latest_offsets"] == {"0": 500, "1": 500, "2": 500}
    assert s["input_rows"] == 1_500
    assert s["batch_duration_ms"] == 4_321
    assert s["durations_ms"]["addBatch"] == 3_800
    # watermark: at the epoch in force; after the batch, max - lateness
    assert s["watermark_in_force"] == 0
    assert s["max_event_time"] == ms("2026-11-22T09:59:58.500Z")
    assert s["watermark"] == ms("2026-11-22T09:59:28.500Z")
    # no input rate on the first batch -> 0, never NaN
    assert s["input_rows_per_s"] == 0.0
    assert s["processed_rows_per_s"] == pytest.approx(347.14)


def test_normal_batch() -> None:
    s = progress_summary(NORMAL, LATENESS)
    assert s["batch_id"] == 1
    assert s["start_offsets"] == {"0": 500, "1": 500, "2": 500}
    assert s["offsets"] == {"0": 800, "1": 800, "2": 800}
    assert s["latest_offsets"] == {"0": 1_000, "1": 990, "2": 1_010}
    assert all(isinstance(v, int) for v in s["offsets"].values())
    assert s["watermark_in_force"] == ms("2026-11-22T09:59:28.500Z")
    assert s["watermark"] == ms("2026-11-22T10:00:05.250Z") - LATENESS
    assert s["input_rows_per_s"] == pytest.approx(175.56)
    assert s["batch_time"] == ms("2026-11-22T10:00:05.123Z")


def test_idle_progress_keeps_the_watermark_in_force() -> None:
    s = progress_summary(IDLE, LATENESS)
    assert s["batch_id"] == 2
    assert s["input_rows"] == 0
    assert s["max_event_time"] is None
    assert s["watermark"] == s["watermark_in_force"] == ms("2026-11-22T09:59:35.250Z")
    assert s["start_offsets"] == s["offsets"] == {"0": 1_000, "1": 990, "2": 1_010}
    assert s["batch_duration_ms"] == 0


def test_watermark_never_moves_back_within_a_summary() -> None:
    # a batch of only old (late) rows: max - lateness is behind the watermark in force
    p = copy.deepcopy(NORMAL)
    p["eventTime"]["max"] = "2026-11-22T09:59:30.000Z"
    s = progress_summary(p, LATENESS)
    assert s["watermark"] == ms("2026-11-22T09:59:28.500Z")
    # exactly at it: unchanged; one ms beyond: moves by one ms
    p["eventTime"]["max"] = "2026-11-22T09:59:58.500Z"
    assert progress_summary(p, LATENESS)["watermark"] == ms("2026-11-22T09:59:28.500Z")
    p["eventTime"]["max"] = "2026-11-22T09:59:58.501Z"
    assert progress_summary(p, LATENESS)["watermark"] == ms("2026-11-22T09:59:28.501Z")


@pytest.mark.parametrize("lateness", [0, 1, 30_000, 3_600_000])
def test_watermark_after_is_max_in_force_or_max_minus_lateness(lateness: int) -> None:
    s = progress_summary(NORMAL, lateness)
    expected = max(ms("2026-11-22T09:59:28.500Z"), ms("2026-11-22T10:00:05.250Z") - lateness)
    assert s["watermark"] == expected


@pytest.mark.parametrize(
    "rate",
    [float("inf"), float("-inf"), float("nan"), "NaN", "Infinity", "-Infinity", None, "n/a"],
)
def test_non_finite_rates_become_zero(rate: Any) -> None:
    p = copy.deepcopy(NORMAL)
    p["inputRowsPerSecond"] = rate
    p["processedRowsPerSecond"] = rate
    s = progress_summary(p, LATENESS)
    assert s["input_rows_per_s"] == 0.0
    assert s["processed_rows_per_s"] == 0.0


def test_missing_rates_and_sections() -> None:
    p = {"id": QUERY_ID, "batchId": 5, "timestamp": "2026-11-22T10:00:00.000Z"}
    s = progress_summary(p, LATENESS)
    assert s["batch_id"] == 5
    assert s["watermark"] == s["watermark_in_force"] == 0
    assert s["input_rows_per_s"] == s["processed_rows_per_s"] == 0.0
    assert s["offsets"] == s["start_offsets"] == s["latest_offsets"] == {}
    assert s["input_rows"] == 0


def test_summary_feeds_write_progress() -> None:
    # every field write_progress reads is present and of the right kind
    for p in (FIRST, NORMAL, IDLE):
        s = progress_summary(p, LATENESS)
        for key in (
            "batch_id",
            "batch_time",
            "status_time",
            "watermark",
            "input_rows",
            "batch_duration_ms",
        ):
            assert isinstance(s[key], int), key
        assert isinstance(s["query_id"], str)
        for key in ("offsets", "latest_offsets", "start_offsets"):
            assert isinstance(s[key], dict)


def _listener() -> Any:
    from jobs.sink.status import StatusListener
    from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings

    cfg = JobConfig(
        kafka=KafkaSettings(bootstrap="127.0.0.1:1", topic="t"),  # nothing answers there
        redis=RedisSettings(url="redis://127.0.0.1:1/0"),  # never used: the client is lazy
        checkpoint="/nonexistent/checkpoint",
    )
    return StatusListener(cfg)


def test_a_close_while_the_topic_end_watcher_starts_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark asks `topic_end` from its listener thread while the job may be closing: `close`
    must not find a watcher made but not yet started (joining it raised RuntimeError)."""
    import threading

    import jobs.sink.status as status

    made = threading.Event()

    class SlowToStart(threading.Thread):
        def start(self) -> None:
            made.set()
            time.sleep(0.3)  # close() runs in this gap
            super().start()

    monkeypatch.setattr(status.threading, "Thread", SlowToStart)
    listener = _listener()
    asker = threading.Thread(target=listener.topic_end)
    asker.start()
    assert made.wait(5)
    listener.close()  # raised "cannot join thread before it is started"
    asker.join(5)
    assert listener._watcher is not None and not listener._watcher.is_alive()


def test_topic_end_after_close_starts_no_watcher() -> None:
    listener = _listener()
    listener.close()
    assert listener.topic_end() is None and listener._watcher is None
