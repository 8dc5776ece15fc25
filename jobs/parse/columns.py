"""A chunk's events column by column: numbers in numpy, strings in Arrow (pure, no Spark).

The read task summarises each chunk per service (jobs/summary/summarise.py) from `Columns`: arrays
of equal length in Kafka order, built once per chunk and sliced per service. Numbers are numpy
arrays. The `STRINGS` columns (service, user and event ids) stay Arrow arrays with nulls where
absent: they are sliced (`take`), hashed (sketches/hll.py reads Arrow without a copy) and
shipped (Arrow IPC) in C++, so no event's string ever becomes a Python object on the way. That
conversion and the null checks on object arrays were ~40 % of summarising (BENCHMARKS.md).
Registered fields' string columns stay numpy object arrays: registered metrics read
them as such.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

__all__ = [
    "STRINGS",
    "Columns",
    "arrow_strings",
    "decode_columns",
    "encode_columns",
    "present",
    "take",
    "take_rows",
]

#: Column name -> numpy array, or Arrow array for the `STRINGS` columns.
Columns = dict[str, Any]

#: The columns of `Columns` that are Arrow string arrays.
STRINGS = ("service", "user_id", "event_id")


def arrow_strings(col: pd.Series | pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string column as one Arrow array: zero-copy for Arrow-backed pandas strings.

    Object columns are converted once (None and NaN become nulls); an all-null column is typed
    as strings, so every chunk's column has a string type.
    """
    arr = col if isinstance(col, pa.Array | pa.ChunkedArray) else pa.array(col, from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_null(arr.type):
        arr = pa.nulls(len(arr), pa.string())
    return arr


def take(col: Any, idx: npt.NDArray[np.int64]) -> Any:
    """The rows `idx` (positions) of one column, numpy or Arrow."""
    return col.take(idx) if isinstance(col, pa.Array) else col[idx]


def take_rows(cols: Columns, rows: npt.NDArray[Any]) -> Columns:
    """Every column at `rows`: positions, or a boolean mask of the columns' length."""
    idx = np.flatnonzero(rows) if rows.dtype == np.bool_ else rows
    return {k: take(v, idx) for k, v in cols.items()}


def present(values: Any) -> npt.NDArray[np.bool_]:
    """True where a column (Arrow array, or numpy/pandas values) holds a value, not null/NaN."""
    if isinstance(values, pa.Array):
        return np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(pd.notna(values), dtype=bool)


_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_PLAIN = pa.ipc.IpcWriteOptions()

#: Rows from which `encode_columns` compresses: LZ4 halves the bytes (~25 per event instead of
#: ~45) but costs ~95 us per stream however small, 20 times the plain encoding of 100 rows, and
#: a chunk of a thousand services encodes a thousand small streams.
COMPRESS_FROM = 2_000


def encode_columns(cols: Columns) -> bytes:
    """`Columns` as an Arrow IPC stream (self-describing; NaN stays NaN, None becomes null).

    LZ4-compressed from `COMPRESS_FROM` rows; `decode_columns` reads either.
    """
    arrays = {
        k: v if isinstance(v, pa.Array) else pa.array(v, from_pandas=v.dtype == object)
        for k, v in cols.items()
    }
    batch = pa.RecordBatch.from_pydict(arrays)
    sink = pa.BufferOutputStream()
    options = _IPC_OPTIONS if batch.num_rows >= COMPRESS_FROM else _PLAIN
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def decode_columns(blob: bytes) -> Columns:
    """Inverse of `encode_columns` (strings as Arrow arrays, as `Columns` holds them)."""
    table = pa.ipc.open_stream(blob).read_all()
    out: Columns = {}
    for name, chunks in zip(table.column_names, table.columns, strict=True):
        col = chunks.combine_chunks()
        if name in STRINGS:
            out[name] = arrow_strings(col)
        elif not pa.types.is_primitive(col.type):  # registered string fields, all-null ones
            out[name] = np.array(col.to_pylist(), dtype=object)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out
