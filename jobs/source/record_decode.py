"""The records of an uncompressed v2 record batch, decoded field by field across all records.

kafka-python decodes a batch record by record into objects, ~4 µs of Python per record (py-spy:
the largest single cost of the read task, BENCHMARKS.md). Here the records' starts are
found for all batches of a fetch at once (`_chain_starts`; a Python walk over the length
prefixes, `_starts`, only for batches that search cannot vouch for); every other field (the
timestamp and offset deltas, key and value lengths, the header count) is decoded with numpy for
all records at once, and the keys and values are cut out of the batch as Arrow binary arrays.

Only the common case is taken: a data batch (not a control batch) of message format 2, not
compressed, whose records carry no headers. Anything else, and anything that does not add up
(a length running past the batch, a record whose fields do not end where its length says), gives
None, and the caller decodes the batch with kafka-python, which then reports whatever is wrong.
`tests/unit/jobs/source/test_record_decode.py` compares this decoder with kafka-python's on
batches built by kafka-python's own builder. Pure: no I/O.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from jobs.source.log_batches import Records

__all__ = ["BATCH_HEAD", "CODEC_MASK", "CONTROL", "TRANSACTIONAL", "decode_many", "decode_records"]

#: The v2 batch header, big-endian: base offset, batch length, partition leader epoch, magic,
#: crc, attributes, last offset delta, first and max timestamp, producer id, producer epoch,
#: base sequence, record count.
#: The CRC covers everything from the attributes on (byte 21). `jobs/source/kafka_log.py` frames a
#: fetch's batches with it too.
BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")
#: Attribute bits of a v2 batch.
CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
#: Zeros after the records: the first four fields of a record are at most 41 bytes long, later
#: reads are clamped to the end, so no read leaves the buffer whatever the bytes say.
_PAD = b"\0" * 64

_I64 = npt.NDArray[np.int64]


def _varints(buf: npt.NDArray[np.uint8], pos: _I64) -> tuple[_I64, _I64, npt.NDArray[np.bool_]]:
    """Zigzag varints starting at each position: (values, positions after them, too long).

    Byte k is read only for the varints still going after k bytes: most lengths and deltas
    take one or two.
    """
    first = buf[pos]
    value = (first & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), dtype=np.int64)
    going = np.flatnonzero(first >= 0x80)
    for k in range(1, 10):
        if not len(going):
            break
        b = buf[pos[going] + k]
        value[going] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[going] += 1
        going = going[b >= 0x80]
    long = np.zeros(len(pos), dtype=bool)
    long[going] = True
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, pos + size, long


def _starts(body: bytes | memoryview, count: int, at: int, out: list[int]) -> bool:
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


#: The shortest record after its length prefix: attributes, timestamp delta, offset delta, key
#: length, value length and header count, one byte each at least.
_MIN_RECORD = 6


def _chain_starts(
    buf: npt.NDArray[np.uint8], at: _I64, ends: _I64, counts: _I64
) -> tuple[_I64, npt.NDArray[np.bool_]]:
    """Every record start of every body found at once, and which bodies it holds for.

    Body b is `buf[at[b]:ends[b]]` with `counts[b]` records. The walk `_starts` does record by
    record is done here without one Python step per record: a record's attributes byte is zero
    and so is the header count that ends it (no headers, the case this decoder takes), while
    text values hold no zero byte. So the bytes after zero bytes, plus each body's start, are
    candidates; each candidate is decoded as if it were a record start (its length says where
    the next record would begin), and one check over all of them tells whether a body's
    candidates form exactly its chain: the first is the body's start, each says the next one
    begins where the next candidate is, the last ends at the body's end, and there are
    `counts[b]` of them. A chain starting at the body's start is unique, so a body that passes
    has exactly its records' starts; one that fails (binary values with zero bytes, non-zero
    attributes, a broken batch) is left to `_starts`.
    """
    total = int(ends[-1]) if len(ends) else 0
    marked = np.empty(total + 1, dtype=bool)  # position p: a body starts there, or p - 1 is 0
    marked[0] = False
    np.equal(buf[:total], 0, out=marked[1:])
    marked[at] = True
    cand = np.flatnonzero(marked[:total])
    size, after, long = _varints(buf, cand)
    fits = ~long & (size >= _MIN_RECORD) & (buf[np.minimum(after, total)] == 0)
    cand, nxt = cand[fits], (after + size)[fits]
    body = np.searchsorted(at, cand, side="right") - 1  # each candidate's body
    # where each candidate's successor should begin: the next candidate of the same body, or
    # that body's end after its last one
    expect = ends[body]
    same = body[1:] == body[:-1]
    expect[:-1][same] = cand[1:][same]
    wrong = nxt != expect
    n = np.bincount(body, minlength=len(at))
    good = (n == counts) & (np.bincount(body, weights=wrong, minlength=len(at)) == 0)
    first = np.searchsorted(body, np.arange(len(at)))  # each body's first candidate
    good &= cand[np.minimum(first, max(len(cand) - 1, 0))] == at if len(cand) else counts == 0
    return cand, good


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


def decode_many(batches: Sequence[bytes | memoryview]) -> list[Records | None]:
    """`decode_records` of each batch, decoded together.

    A fetch answers with many small batches when producers send often (at 100k events/s from
    five producers, ~30 records each): numpy's cost per call would then be paid per handful of
    records (14 µs per record at 33 per batch against 2 at 3,000). So the records of all the
    batches are decoded in one pass: one Python walk over the length prefixes, then each field
    for every record at once. A batch whose records do not add up gives None, alone.
    """
    out: list[Records | None] = [None] * len(batches)
    taken: list[_Plain] = []
    bodies: list[bytes | memoryview] = []
    for i, batch in enumerate(batches):
        if len(batch) < BATCH_HEAD.size:
            continue
        (base, length, _, magic, _, attrs, _, first_ts, max_ts, _, _, _, count) = (
            BATCH_HEAD.unpack_from(batch)
        )
        if magic != 2 or attrs & (CODEC_MASK | CONTROL) or len(batch) != 12 + length:
            continue
        body = batch[BATCH_HEAD.size :]
        if count <= 0:
            if count == 0 and not body:
                out[i] = Records.empty()
            continue
        taken.append(_Plain(i, base, attrs, first_ts, max_ts, count))
        bodies.append(body)
    if not taken:
        return out
    joined = b"".join([*bodies, _PAD])  # one copy, padded
    total = len(joined) - len(_PAD)
    buf = np.frombuffer(joined, dtype=np.uint8)
    sizes = np.array([len(b) for b in bodies], dtype=np.int64)
    body_ends = np.cumsum(sizes)
    body_at = body_ends - sizes
    starts, chained = _chain_starts(
        buf, body_at, body_ends, np.array([p.records for p in taken], dtype=np.int64)
    )
    # where every record of the plain batches starts in the joined bodies, and where each of
    # those batches' bodies ends (a record ends where the next of its batch begins)
    bounds: list[int] = []
    plain: list[_Plain] = []
    last_ends: list[int] = []
    walked = starts.tolist()
    for p, body, at, ok in zip(taken, bodies, body_at.tolist(), chained.tolist(), strict=True):
        if ok:
            lo = bisect_left(walked, at)
            bounds += walked[lo : lo + p.records]
        elif not _starts(body, p.records, at, bounds):
            continue
        plain.append(p)
        last_ends.append(at + len(body))
    if not plain:
        return out
    counts = np.array([p.records for p in plain], dtype=np.int64)
    firsts = np.array(bounds, dtype=np.int64)
    ends = np.empty_like(firsts)
    ends[:-1] = firsts[1:]
    ends[np.cumsum(counts) - 1] = last_ends
    which = np.repeat(np.arange(len(plain)), counts)  # each record's batch (in `plain`)
    _, pos, long1 = _varints(buf, firsts)  # the length prefix again, to step over it
    pos = pos + 1  # the record's attributes byte (unused)
    ts_delta, pos, long2 = _varints(buf, pos)
    off_delta, pos, long3 = _varints(buf, pos)
    key_len, pos, long4 = _varints(buf, pos)
    key_at = pos
    value_len, pos, long5 = _varints(buf, np.minimum(pos + np.maximum(key_len, 0), total))
    value_at = pos
    headers, pos, long6 = _varints(buf, np.minimum(pos + np.maximum(value_len, 0), total))
    bad = long1 | long2 | long3 | long4 | long5 | long6
    bad |= (headers != 0) | (pos != ends) | (key_len < -1) | (value_len < -1)
    bad_batch = np.bincount(which, weights=bad, minlength=len(plain)) > 0
    base = np.array([p.base for p in plain], dtype=np.int64)[which]
    log_append = np.array([bool(p.attrs & _LOG_APPEND_TIME) for p in plain])[which]
    first = np.array([p.first_ts for p in plain], dtype=np.int64)[which]
    latest = np.array([p.max_ts for p in plain], dtype=np.int64)[which]
    offsets = base + off_delta
    times = np.where(log_append, latest, first + ts_delta)  # negative: none
    keys = _cut(joined, total, buf, key_at, np.where(bad, -1, key_len))
    values = _cut(joined, total, buf, value_at, np.where(bad, -1, value_len))
    lo = 0
    for p, n, broken in zip(plain, counts.tolist(), bad_batch.tolist(), strict=True):
        if not broken:
            hi = lo + n
            out[p.slot] = Records(
                offsets[lo:hi], times[lo:hi], keys.slice(lo, n), values.slice(lo, n)
            )
        lo += n
    return out


#: Bytes a binary view holds inline: values up to this long are copied into their view.
_INLINE = 12


def _cut(data: bytes, total: int, buf: npt.NDArray[np.uint8], at: _I64, size: _I64) -> pa.Array:
    """The byte strings of `data` at these positions and sizes (size -1: null), as Arrow binary.

    Built as an Arrow binary *view* array over `data` itself (16 bytes per value: its length
    and either the value inline, or its first four bytes and where it is in `data`), then cast
    to plain binary in C++: no Python object per value. `data` holds `total` bytes of records
    and then at least `_INLINE` bytes of padding; `buf` is `data` as numpy bytes.
    """
    n = len(size)
    if total >= 2**31:  # beyond a view's 32-bit offsets (fetches are far smaller)
        cut = [
            None if k < 0 else data[a : a + k]
            for a, k in zip(at.tolist(), size.tolist(), strict=True)
        ]
        return pa.array(cut, pa.binary())
    valid = size >= 0
    length = np.where(valid, size, 0)
    views = np.zeros((n, 4), dtype=np.int32)  # length, prefix, buffer index, offset
    views[:, 0] = length
    inline = np.flatnonzero(length <= _INLINE)
    far = np.flatnonzero(length > _INLINE)
    if len(far):
        head = buf[at[far, None] + np.arange(4)]
        views[far, 1] = np.ascontiguousarray(head).view("<i4")[:, 0]
        views[far, 3] = at[far]
    if len(inline):
        span = np.arange(_INLINE)
        body = buf[np.minimum(at[inline, None], total) + span]
        body[span >= length[inline, None]] = 0
        views.view(np.uint8).reshape(n, 16)[inline, 4:] = body
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view = pa.Array.from_buffers(
        pa.binary_view(),
        n,
        [validity, pa.py_buffer(views), pa.py_buffer(data)],
        null_count=n - int(np.count_nonzero(valid)),
    )
    return view.cast(pa.binary())
