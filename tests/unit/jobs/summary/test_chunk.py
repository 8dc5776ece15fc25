"""Chunk summaries as bytes (jobs/summary/chunk.py): integer columns packed, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from jobs.summary.chunk import _pack, _unpack

I64 = np.iinfo(np.int64)


@pytest.mark.parametrize(
    "values",
    [
        [],
        [5],
        [7, 7, 7],
        [1_780_000_000_000 + 10_000 * k for k in (0, 3, 1, 250)],  # window starts: one byte
        [1_780_000_000_000 + 10_000 * k for k in (0, 256)],  # two bytes
        [-3, 0, 2**40, -(2**40)],
        [I64.min, I64.max],
        [I64.min, 0],
        [0, 1, 2, 3, 65535, 65536],
    ],
)
def test_packed_int_columns_round_trip_exactly(values: list[int]) -> None:
    column = np.array(values, dtype=np.int64)
    blob = b"head" + _pack(column) + b"tail"
    back, end = _unpack(blob, 4, len(column))
    assert back.dtype == np.int64 and back.tolist() == values
    assert blob[end:] == b"tail"


def test_packed_window_starts_take_one_byte_each() -> None:
    starts = 1_780_000_000_000 + 10_000 * np.arange(200, dtype=np.int64)
    assert len(_pack(starts)) == 17 + 200  # base, step, width; then a byte a value
    assert len(_pack(np.full(1000, 42, np.int64))) == 17  # all equal: the base alone


def test_a_bad_width_is_refused() -> None:
    blob = bytearray(_pack(np.array([1, 5], np.int64)))
    blob[16] = 3  # no such width
    with pytest.raises(ValueError, match="width"):
        _unpack(bytes(blob), 0, 2)
