"""A chunk's columns (jobs/parse/columns.py): numbers in numpy, strings in Arrow, sliced alike.

The summaries slice, hash and ship these columns per service; whatever the column's form
(Arrow-backed pandas strings, object arrays with None or NaN, all-null columns), a row must
keep its values and a missing string must stay missing through slicing and the Arrow IPC
round trip the de-duplication rows take (jobs/summary/summarise.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.parse.columns import (
    arrow_strings,
    decode_columns,
    encode_columns,
    present,
    take,
    take_rows,
)
from sketches.tg64 import hash32


def test_strings_from_any_pandas_form_are_one_arrow_array() -> None:
    arrow_backed = pa.table({"s": ["a", None, "b"]}).to_pandas()["s"]
    objects = pd.Series(["a", None, np.nan], dtype=object)
    chunked = pa.chunked_array([["a"], [None, "b"]])
    assert arrow_strings(arrow_backed).to_pylist() == ["a", None, "b"]
    assert arrow_strings(objects).to_pylist() == ["a", None, None]
    assert arrow_strings(chunked).to_pylist() == ["a", None, "b"]
    nothing = arrow_strings(pd.Series([None, None], dtype=object))
    assert pa.types.is_string(nothing.type) and nothing.null_count == 2


def test_present_agrees_for_arrow_and_objects() -> None:
    values = ["u1", None, "u2", None]
    assert present(pa.array(values)).tolist() == [True, False, True, False]
    assert present(np.array(values, dtype=object)).tolist() == [True, False, True, False]
    assert present(np.array(["x", np.nan], dtype=object)).tolist() == [True, False]


def test_rows_taken_alike_from_numpy_and_arrow_columns() -> None:
    cols = {
        "event_ms": np.arange(6, dtype=np.int64),
        "user_id": pa.array(["a", None, "c", "d", None, "f"]),
        "extra:region": np.array(["eu", "us", None, "eu", "us", "ap"], dtype=object),
    }
    mask = np.array([True, False, True, False, True, True])
    by_mask, by_index = take_rows(cols, mask), take_rows(cols, np.flatnonzero(mask))
    for got in (by_mask, by_index):
        assert got["event_ms"].tolist() == [0, 2, 4, 5]
        assert got["user_id"].to_pylist() == ["a", "c", None, "f"]
        assert got["extra:region"].tolist() == ["eu", None, "us", "ap"]
    assert take(cols["user_id"], np.array([5, 0])).to_pylist() == ["f", "a"]


def test_hashes_of_arrow_users_equal_those_of_objects() -> None:
    users = ["alice", None, "bob", "alice"]
    assert hash32(pa.array(users)).tolist() == hash32(np.array(users, dtype=object)).tolist()


def test_shipped_columns_come_back_as_they_left() -> None:
    cols = {
        "event_ms": np.array([5, 6, 7], dtype=np.int64),
        "latency_ms": np.array([1.5, np.nan, 3.0]),
        "user_id": pa.array(["a", None, "c"]),
        "event_id": pa.nulls(3, pa.string()),
        "extra:region": np.array(["eu", None, "us"], dtype=object),
        "extra:none": np.array([None, None, None], dtype=object),
    }
    back = decode_columns(encode_columns(cols))
    assert back["event_ms"].tolist() == [5, 6, 7]
    assert np.isnan(back["latency_ms"][1]) and back["latency_ms"][2] == 3.0
    assert isinstance(back["user_id"], pa.Array)
    assert back["user_id"].to_pylist() == ["a", None, "c"]
    assert pa.types.is_string(back["event_id"].type) and back["event_id"].null_count == 3
    assert back["extra:region"].tolist() == ["eu", None, "us"]
    assert back["extra:none"].tolist() == [None, None, None]
