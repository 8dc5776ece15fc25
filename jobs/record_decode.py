"""The records of an uncompressed v2 record batch, decoded field by field across all records.

kafka-python decodes a batch record by record into objects, ~4 µs of Python per record (py-spy:
the largest single cost of the read task, BENCHMARKS.md issue 12). Here one Python loop only
walks the records' length prefixes to find where each record starts; every other field (the
timestamp and offset deltas, key and value lengths, the header count) is decoded with numpy for
all records at once, and the values are cut out of the batch as bytes.

Only the common case is taken: a data batch (not a control batch) of message format 2, not
compressed, whose records carry no headers. Anything else, and anything that does not add up
(a length running past the batch, a record whose fields do not end where its length says), gives
None, and the caller decodes the batch with kafka-python, which then reports whatever is wrong.
`tests/unit/test_record_decode.py` compares this decoder with kafka-python's on batches built by
kafka-python's own builder. Pure: no I/O.
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from jobs.log_batches import Records

__all__ = ["decode_records"]

#: The v2 batch header, big-endian: base offset, batch length, partition leader epoch, magic,
#: crc, attributes, last offset delta, first and max timestamp, producer id, producer epoch,
#: base sequence, record count.
_HEAD = struct.Struct(">qiibIhiqqqhii")
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20
_PAD = b"\0" * 10  # a varint is at most 10 bytes: reads past the end stay in the buffer

_I64 = npt.NDArray[np.int64]


def _varints(buf: npt.NDArray[np.uint8], pos: _I64) -> tuple[_I64, _I64]:
    """Zigzag varints starting at each position: (values, positions after them)."""
    value = np.zeros(len(pos), dtype=np.uint64)
    size = np.zeros(len(pos), dtype=np.int64)
    more = np.ones(len(pos), dtype=bool)
    for k in range(10):
        b = buf[pos + k].astype(np.uint64)
        value |= np.where(more, (b & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        size += more
        more &= b >= 0x80
        if not more.any():
            break
    else:
        raise ValueError("varint longer than 10 bytes")
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, pos + size


def _starts(body: bytes, count: int) -> list[int] | None:
    """Where each of `count` records starts, and where the last ends; None if they do not fit.

    The one per-record Python loop of the decoder (each start depends on the length before
    it); length prefixes of one or two bytes (records under 8 KiB) take the short way.
    """
    out: list[int] = []
    pos, end = 0, len(body)
    append = out.append
    for _ in range(count):
        if pos >= end:
            return None
        append(pos)
        b = body[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        elif pos + 1 < end and body[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (body[pos + 1] << 7), pos + 2
        else:
            pos += 1
            v, shift = b & 0x7F, 7
            while b >= 0x80:
                if pos >= end or shift > 63:
                    return None
                b = body[pos]
                pos += 1
                v |= (b & 0x7F) << shift
                shift += 7
        size = (v >> 1) ^ -(v & 1)
        if size < 0:
            return None
        pos += size
    if pos != end:
        return None
    append(end)
    return out


def decode_records(batch: bytes) -> Records | None:
    """The records of one uncompressed v2 data batch without headers; None for anything else.

    `batch` is the whole batch as on the wire (from its base offset field on). Timestamps are
    CreateTime (first timestamp + delta) or, for a LogAppendTime batch, its max timestamp;
    negative ones are None, as kafka-python's reader reports them.
    """
    if len(batch) < _HEAD.size:
        return None
    (base, length, _, magic, _, attrs, _, first_ts, max_ts, _, _, _, count) = _HEAD.unpack_from(
        batch
    )
    if magic != 2 or attrs & (_CODEC_MASK | _CONTROL) or len(batch) != 12 + length or count < 0:
        return None
    body = batch[_HEAD.size :]
    if count == 0:
        return Records([], [], [], []) if not body else None
    starts = _starts(body, count)
    if starts is None:
        return None
    buf = np.frombuffer(body + _PAD, dtype=np.uint8)
    bounds = np.array(starts, dtype=np.int64)
    ends = bounds[1:]
    try:
        _, pos = _varints(buf, bounds[:-1])  # the length prefix again, to step over it
        pos = pos + 1  # the record's attributes byte (unused)
        ts_delta, pos = _varints(buf, pos)
        off_delta, pos = _varints(buf, pos)
        key_len, pos = _varints(buf, pos)
        key_at = pos
        value_len, pos = _varints(buf, pos + np.maximum(key_len, 0))
        value_at = pos
        headers, pos = _varints(buf, pos + np.maximum(value_len, 0))
    except (ValueError, IndexError):
        return None
    if (
        np.any(headers != 0)
        or np.any(pos != ends)
        or np.any(key_len < -1)
        or np.any(value_len < -1)
    ):
        return None
    offsets = (base + off_delta).tolist()
    if attrs & _LOG_APPEND_TIME:
        times: list[int | None] = [max_ts if max_ts >= 0 else None] * count
    else:
        ts = first_ts + ts_delta
        times = ts.tolist() if ts.min() >= 0 else [t if t >= 0 else None for t in ts.tolist()]
    return Records(offsets, times, _cut(body, key_at, key_len), _cut(body, value_at, value_len))


def _cut(body: bytes, at: _I64, size: _I64) -> list[bytes | None]:
    """The byte strings of `body` at these positions and sizes (size -1: None)."""
    if size.max() < 0:
        return [None] * len(size)
    if size.min() >= 0:
        return [body[a:e] for a, e in zip(at.tolist(), (at + size).tolist(), strict=True)]
    return [
        None if n < 0 else body[a : a + n] for a, n in zip(at.tolist(), size.tolist(), strict=True)
    ]
