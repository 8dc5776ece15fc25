"""Spark's offset log as the Kafka planner reads it (jobs/source/offset_log.py), on such files.

`checkpointed_end` finds where the last batch ended; `batch_clock` the watermark and timestamp
Spark fixed for the batch being planned, which the read tasks summarise against.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.source.offset_log import BatchClock, batch_clock, checkpointed_end

# --- checkpointed_end: Spark's offset log --------------------------------------------------
#
# <checkpoint>/offsets/<batch id> holds three lines for a one-source query:
#     v1
#     {"batchWatermarkMs":...,"batchTimestampMs":...,"conf":{...}}
#     {"0":123,"1":45}          <- our source's end offset for that batch

_METADATA = json.dumps(
    {
        "batchWatermarkMs": 1_795_341_570_000,
        "batchTimestampMs": 1_795_341_600_123,
        "conf": {
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
            ),
        },
    },
    separators=(",", ":"),
)


def _write_offsets(checkpoint: Path, batch_id: int, offsets: dict[str, int] | str) -> None:
    d = checkpoint / "offsets"
    d.mkdir(parents=True, exist_ok=True)
    line = offsets if isinstance(offsets, str) else json.dumps(offsets, separators=(",", ":"))
    (d / str(batch_id)).write_text(f"v1\n{_METADATA}\n{line}")


def testcheckpointed_end_picks_the_highest_batch(tmp_path: Path) -> None:
    _write_offsets(tmp_path, 0, {"0": 100, "1": 90, "2": 80})
    _write_offsets(tmp_path, 1, {"0": 200, "1": 190, "2": 180})
    # Spark's side files: checksums, temp files, the commit log; none of them is a batch
    (tmp_path / "offsets" / ".1.crc").write_bytes(b"\x00garbage")
    (tmp_path / "offsets" / ".2.tmp").write_text('v1\n{}\n{"0": 999}')
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert checkpointed_end(str(tmp_path)) == {"0": 200, "1": 190, "2": 180}


def testcheckpointed_end_orders_batch_ids_numerically(tmp_path: Path) -> None:
    for i in range(11):  # 0..10: "9" > "10" as strings
        _write_offsets(tmp_path, i, {"0": i * 10})
    assert checkpointed_end(str(tmp_path)) == {"0": 100}


def testcheckpointed_end_normalises_keys_and_values(tmp_path: Path) -> None:
    _write_offsets(tmp_path, 3, '{"0": 5, "1": 0, "12": 77}')
    got = checkpointed_end(str(tmp_path))
    assert got == {"0": 5, "1": 0, "12": 77}
    assert got is not None
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in got.items())


def testcheckpointed_end_without_a_checkpoint(tmp_path: Path) -> None:
    assert checkpointed_end(None) is None
    assert checkpointed_end("") is None
    assert checkpointed_end(str(tmp_path / "does-not-exist")) is None
    assert checkpointed_end(str(tmp_path)) is None  # exists, but no offsets/ yet


def testcheckpointed_end_offsets_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "offsets").write_text("not a directory")
    assert checkpointed_end(str(tmp_path)) is None


def testcheckpointed_end_empty_offset_log(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    assert checkpointed_end(str(tmp_path)) is None
    (tmp_path / "offsets" / ".0.tmp").write_text("v1")  # only side files
    assert checkpointed_end(str(tmp_path)) is None


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty-file"),
        pytest.param(b"v1\n", id="version-only"),
        pytest.param(f"v1\n{_METADATA}".encode(), id="no-source-line"),
        pytest.param(f"v1\n{_METADATA}\n-".encode(), id="source-without-offset"),
        pytest.param(f'v1\n{_METADATA}\n{{"0": 12'.encode(), id="truncated-json"),
        pytest.param(f"v1\n{_METADATA}\n[1, 2, 3]".encode(), id="json-list"),
        pytest.param(f'v1\n{_METADATA}\n{{"0": "twelve"}}'.encode(), id="non-numeric-offset"),
        pytest.param(f'v1\n{_METADATA}\n{{"0": null}}'.encode(), id="null-offset"),
        pytest.param(f'v1\n{_METADATA}\n{{"0": [12]}}'.encode(), id="list-offset"),
        pytest.param(b"\xff\xfe\x00garbage\x80\n\x81\n\x82", id="binary-garbage"),
    ],
)
def testcheckpointed_end_garbled_newest_entry(tmp_path: Path, content: bytes) -> None:
    _write_offsets(tmp_path, 0, {"0": 1})
    (tmp_path / "offsets" / "1").write_bytes(content)
    assert checkpointed_end(str(tmp_path)) is None


# --- batch_clock -------------------------------------------------------------------------------


def test_batch_clock_is_the_metadata_of_the_entry_ending_at_the_planned_offsets(
    tmp_path: Path,
) -> None:
    _write_offsets(tmp_path, 6, {"0": 100, "1": 90})
    _write_offsets(tmp_path, 7, {"0": 200, "1": 190})
    assert batch_clock(str(tmp_path), {"0": 200, "1": 190}) == BatchClock(
        7, 1_795_341_570_000, 1_795_341_600_123
    )
    # keys and values as Spark hands them to `partitions` (ints or strings)
    assert batch_clock(str(tmp_path), {"1": "190", 0: 200}).batch_id == 7  # type: ignore[dict-item]


def test_batch_clock_of_a_first_batch_has_watermark_zero(tmp_path: Path) -> None:
    d = tmp_path / "offsets"
    d.mkdir()
    (d / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":5,"conf":{}}\n{"0":3}')
    assert batch_clock(str(tmp_path), {"0": 3}) == BatchClock(0, 0, 5)


def test_batch_clock_finds_a_replayed_batch_just_behind_the_newest(tmp_path: Path) -> None:
    _write_offsets(tmp_path, 3, {"0": 30})
    _write_offsets(tmp_path, 4, {"0": 40})
    assert batch_clock(str(tmp_path), {"0": 30}).batch_id == 3


@pytest.mark.parametrize("checkpoint", [None, "", "missing"])
def test_batch_clock_without_a_matching_entry_says_what_is_missing(
    tmp_path: Path, checkpoint: str | None
) -> None:
    _write_offsets(tmp_path, 0, {"0": 10})
    where = str(tmp_path / checkpoint) if checkpoint == "missing" else checkpoint
    with pytest.raises(RuntimeError, match="checkpoint"):
        batch_clock(where, {"0": 10})
    with pytest.raises(RuntimeError, match="ends at"):
        batch_clock(str(tmp_path), {"0": 11})  # not the planned batch's offsets


def test_batch_clock_refuses_an_unreadable_entry(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v2\n{}\n{}")
    with pytest.raises(ValueError, match="not a readable offset log entry"):
        batch_clock(str(tmp_path), {"0": 1})
