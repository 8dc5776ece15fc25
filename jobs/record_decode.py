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
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from jobs.log_batches import Records

__all__ = ["decode_many", "decode_records"]

#: The v2 batch header, big-endian: base offset, batch length, partition leader epoch, magic,
#: crc, attributes, last offset delta, first and max timestamp, producer id, producer epoch,
#: base sequence, record count.
_HEAD = struct.Struct(">qiibIhiqqqhii")
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20
#: Zeros after the records: the first four fields of a record are at most 41 bytes long, later
#: reads are clamped to the end, so no read leaves the buffer whatever the bytes say.
_PAD = b"\0" * 64

_I64 = npt.NDArray[np.int64]


def _varints(buf: npt.NDArray[np.uint8], pos: _I64) -> tuple[_I64, _I64, npt.NDArray[np.bool_]]:
    """Zigzag varints starting at each position: (values, positions after them, too long)."""
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
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, pos + size, more


def _starts(body: bytes, count: int, at: int, out: list[int]) -> bool:
    """Append where each of `count` records starts (`body` placed at `at`); False if not.

    False when the records do not fill the body exactly; then nothing is appended.

    The one per-record Python loop of the decoder (each start depends on the length before
    it); length prefixes of one or two bytes (records under 8 KiB) take the short way.
    """
    before = len(out)
    pos, end = 0, len(body)
    append = out.append
    for _ in range(count):
        if pos >= end:
            break
        append(at + pos)
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
                    pos = -1
                    break
                b = body[pos]
                pos += 1
                v |= (b & 0x7F) << shift
                shift += 7
            if pos < 0:
                break
        size = (v >> 1) ^ -(v & 1)
        if size < 0:
            break
        pos += size
    else:
        if pos == end:
            return True
    del out[before:]
    return False


def decode_records(batch: bytes) -> Records | None:
    """The records of one uncompressed v2 data batch without headers; None for anything else.

    `batch` is the whole batch as on the wire (from its base offset field on). Timestamps are
    CreateTime (first timestamp + delta) or, for a LogAppendTime batch, its max timestamp;
    negative ones are None, as kafka-python's reader reports them.
    """
    return decode_many([batch])[0]


class _Plain(NamedTuple):
    """A batch the fast path takes: its body's place in the joined buffer, and its header."""

    slot: int
    base: int
    attrs: int
    first_ts: int
    max_ts: int
    records: int


def decode_many(batches: Sequence[bytes]) -> list[Records | None]:
    """`decode_records` of each batch, decoded together.

    A fetch answers with many small batches when producers send often (at 100k events/s from
    five producers, ~30 records each): numpy's cost per call would then be paid per handful of
    records (14 µs per record at 33 per batch against 2 at 3,000). So the records of all the
    batches are decoded in one pass: one Python walk over the length prefixes, then each field
    for every record at once. A batch whose records do not add up gives None, alone.
    """
    out: list[Records | None] = [None] * len(batches)
    plain: list[_Plain] = []
    bodies: list[bytes] = []
    # where every record starts in the joined bodies, then where the last one ends: a record
    # ends where the next begins, in its batch or the next one (the bodies follow each other)
    bounds: list[int] = []
    at = 0
    for i, batch in enumerate(batches):
        if len(batch) < _HEAD.size:
            continue
        (base, length, _, magic, _, attrs, _, first_ts, max_ts, _, _, _, count) = _HEAD.unpack_from(
            batch
        )
        if magic != 2 or attrs & (_CODEC_MASK | _CONTROL) or len(batch) != 12 + length:
            continue
        body = batch[_HEAD.size :]
        if count <= 0:
            if count == 0 and not body:
                out[i] = Records([], [], [], [])
            continue
        if not _starts(body, count, at, bounds):
            continue
        plain.append(_Plain(i, base, attrs, first_ts, max_ts, count))
        bodies.append(body)
        at += len(body)
    if not plain:
        return out
    bounds.append(at)
    joined = b"".join(bodies)
    buf = np.frombuffer(joined + _PAD, dtype=np.uint8)
    counts = np.array([p.records for p in plain], dtype=np.int64)
    edges = np.array(bounds, dtype=np.int64)
    firsts, ends = edges[:-1], edges[1:]
    which = np.repeat(np.arange(len(plain)), counts)  # each record's batch (in `plain`)
    _, pos, long1 = _varints(buf, firsts)  # the length prefix again, to step over it
    pos = pos + 1  # the record's attributes byte (unused)
    ts_delta, pos, long2 = _varints(buf, pos)
    off_delta, pos, long3 = _varints(buf, pos)
    key_len, pos, long4 = _varints(buf, pos)
    key_at = pos
    value_len, pos, long5 = _varints(buf, np.minimum(pos + np.maximum(key_len, 0), len(joined)))
    value_at = pos
    headers, pos, long6 = _varints(buf, np.minimum(pos + np.maximum(value_len, 0), len(joined)))
    bad = long1 | long2 | long3 | long4 | long5 | long6
    bad |= (headers != 0) | (pos != ends) | (key_len < -1) | (value_len < -1)
    bad_batch = np.bincount(which, weights=bad, minlength=len(plain)) > 0
    base = np.array([p.base for p in plain], dtype=np.int64)[which]
    log_append = np.array([bool(p.attrs & _LOG_APPEND_TIME) for p in plain])[which]
    first = np.array([p.first_ts for p in plain], dtype=np.int64)[which]
    latest = np.array([p.max_ts for p in plain], dtype=np.int64)[which]
    offsets = (base + off_delta).tolist()
    ts = np.where(log_append, latest, first + ts_delta)
    times: list[int | None] = (
        ts.tolist() if ts.min() >= 0 else [t if t >= 0 else None for t in ts.tolist()]
    )
    keys = _cut(joined, key_at, key_len)
    values = _cut(joined, value_at, value_len)
    lo = 0
    for p, n, broken in zip(plain, counts.tolist(), bad_batch.tolist(), strict=True):
        if not broken:
            hi = lo + n
            out[p.slot] = Records(offsets[lo:hi], times[lo:hi], keys[lo:hi], values[lo:hi])
        lo += n
    return out


def _cut(body: bytes, at: _I64, size: _I64) -> list[bytes | None]:
    """The byte strings of `body` at these positions and sizes (size -1: None)."""
    if size.max() < 0:
        return [None] * len(size)
    if size.min() >= 0:
        return [body[a:e] for a, e in zip(at.tolist(), (at + size).tolist(), strict=True)]
    return [
        None if n < 0 else body[a : a + n] for a, n in zip(at.tolist(), size.tolist(), strict=True)
    ]
