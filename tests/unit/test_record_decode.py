"""The column-wise record decoder (jobs/source/record_decode.py) against kafka-python's own reader.

Batches are built with kafka-python's `DefaultRecordBatchBuilder` (what its producer sends) and
read back both ways: the fast decoder must give exactly kafka-python's records, or None for the
batches it leaves to kafka-python (compressed, with headers, control, broken). It never raises.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from jobs.source.kafka_log import SourceError, _decode_with_kafka_python, decode_batches
from jobs.source.log_batches import LogRecord
from jobs.source.record_decode import (
    BATCH_HEAD,
    _chain_starts,
    _starts,
    decode_many,
    decode_records,
)

T = 1_795_341_600_000


def build(
    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]],
    codec: int = 0,
    base_offset: int = 0,
    transactional: bool = False,
) -> bytes:
    """A v2 batch of (offset delta, timestamp, key, value, headers), as kafka-python writes it."""
    builder = DefaultRecordBatchBuilder(
        2, codec, transactional, 7 if transactional else -1, 0, -1, 1 << 24
    )
    for delta, ts, key, value, headers in records:
        builder.append(delta, ts, key, value, headers)
    wire = bytearray(builder.build())
    wire[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(wire)


def kafka_python(wire: bytes) -> list[LogRecord]:
    batch = DefaultRecordBatch(wire)
    return [
        LogRecord(r.offset, r.timestamp if r.timestamp >= 0 else None, r.key, r.value)
        for r in batch
    ]


def random_records(rng: random.Random, n: int) -> list[tuple]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 40]))
        size = rng.choice([0, 1, 63, 64, 150, 8_191, 8_192, 20_000])
        value = None if rng.random() < 0.1 else rng.randbytes(size)
        ts = T + rng.randint(-5_000, 5_000)  # deltas of both signs against the first
        out.append((i, ts, key, value, []))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_decodes_exactly_what_kafka_python_reads(seed: int) -> None:
    rng = random.Random(seed)
    records = random_records(rng, rng.choice([1, 2, 17, 300]))
    wire = build(records, base_offset=rng.choice([0, 5, 2**40]))
    got = decode_records(wire)
    assert got is not None
    assert list(got) == kafka_python(wire)
    assert all(type(r.value) in (bytes, type(None)) for r in got)


def test_transactional_batches_are_decoded_too() -> None:
    wire = build([(0, T, b"k", b"v", []), (1, T + 1, None, b"w", [])], transactional=True)
    assert list(decode_records(wire) or ()) == kafka_python(wire)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_are_left_to_kafka_python(codec: int) -> None:
    wire = build([(i, T, b"k", b"x" * 100, []) for i in range(20)], codec=codec)
    assert DefaultRecordBatch(wire).compression_type == codec  # compression paid here
    assert decode_records(wire) is None


def test_batches_with_headers_are_left_to_kafka_python() -> None:
    wire = build([(0, T, b"k", b"v", []), (1, T, b"k", b"v", [("h", b"1")])])
    assert decode_records(wire) is None


def test_broken_batches_give_none_and_never_raise() -> None:
    rng = random.Random(3)
    wire = build(random_records(rng, 50))
    assert decode_records(wire) is not None
    for _ in range(2_000):
        broken = bytearray(wire)
        cut = rng.random() < 0.3
        if cut:
            broken = broken[: rng.randrange(len(broken))]
        else:
            i = rng.randrange(61, len(broken))  # a byte of the records, not of the header
            broken[i] = rng.randrange(256)
        got = decode_records(bytes(broken))
        if got is not None:  # a flipped byte inside a key or value: still well formed
            assert not cut and len(got) == 50


@pytest.mark.parametrize("seed", range(10))
def test_batches_decoded_together_are_each_decoded_as_alone(seed: int) -> None:
    # plain, compressed, with headers, empty, cut and corrupted batches side by side: each
    # gets exactly what it gets alone (kafka-python's records, or None), whatever its neighbours
    rng = random.Random(seed)
    wires = []
    for i in range(rng.randrange(1, 40)):
        records = random_records(rng, rng.choice([1, 2, 5, 33, 200]))
        kind = rng.random()
        wire = build(records, codec=1 if kind < 0.1 else 0, base_offset=i * 1_000)
        if 0.1 <= kind < 0.2:
            wire = build([(0, T, b"k", b"v", [("h", b"1")])], base_offset=i * 1_000)
        elif 0.2 <= kind < 0.3:
            wire = wire[: rng.randrange(len(wire))]
        elif 0.3 <= kind < 0.4:
            broken = bytearray(wire)
            broken[rng.randrange(61, len(broken))] = rng.randrange(256)
            wire = bytes(broken)
        elif 0.4 <= kind < 0.45:
            wire = b""
        wires.append(wire)
    together = decode_many(wires)
    assert len(together) == len(wires)
    for wire, got in zip(wires, together, strict=True):
        alone = decode_records(wire)
        assert (got is None) == (alone is None)
        if got is not None and alone is not None:
            assert list(got) == list(alone) == kafka_python(wire)


def test_decode_batches_uses_it_and_keeps_kafka_pythons_answers() -> None:
    """A fetch's records bytes of several batches, one compressed: the same records as before."""
    rng = random.Random(8)
    plain = build(random_records(rng, 30), base_offset=0)
    packed = build([(i, T, b"k", b"y" * 200, []) for i in range(10)], codec=1, base_offset=30)
    more = build(random_records(rng, 5), base_offset=40)
    batches = decode_batches(plain + packed + more[:-3], "t", 0)  # the last one cut off
    assert [b.base_offset for b in batches] == [0, 30]
    assert list(batches[0].records) == kafka_python(plain)
    assert list(batches[1].records) == kafka_python(packed)
    assert batches[1].codec == "gzip"


def text_records(rng: random.Random, n: int) -> list[tuple]:
    """Records as the project's producers write them: JSON text values, no zero byte."""
    out = []
    for i in range(n):
        key = None if rng.random() < 0.5 else f"svc-{rng.randrange(9)}".encode()
        pad = "x" * rng.choice([0, 50, 130, 9_000])
        value = f'{{"event_id":"e{i}","pad":"{pad}"}}'
        out.append((i, T + rng.randint(-5_000, 5_000), key, value.encode(), []))
    return out


@pytest.mark.parametrize("seed", range(10))
def test_record_starts_found_at_once_are_the_walked_ones(seed: int) -> None:
    """Text batches take the all-at-once search for record starts (`_chain_starts`); binary
    values with zero bytes in them may not, and are walked record by record. Both give the
    starts the walk gives, and the records kafka-python reads."""
    rng = random.Random(seed)
    wires, texts = [], []
    for i in range(rng.randrange(1, 30)):
        n = rng.choice([1, 2, 33, 200])
        binary = rng.random() < 0.3
        records = random_records(rng, n) if binary else text_records(rng, n)
        wires.append(build(records, base_offset=i * 1_000))
        texts.append(not binary)
    bodies = [w[BATCH_HEAD.size :] for w in wires]
    counts = [DefaultRecordBatch(w).next_offset - i * 1_000 for i, w in enumerate(wires)]
    sizes = np.array([len(b) for b in bodies], dtype=np.int64)
    ends = np.cumsum(sizes)
    buf = np.frombuffer(b"".join(bodies) + bytes(64), dtype=np.uint8)
    starts, chained = _chain_starts(buf, ends - sizes, ends, np.array(counts, dtype=np.int64))
    walked: list[int] = []
    for body, at, n in zip(bodies, (ends - sizes).tolist(), counts, strict=True):
        assert _starts(body, n, at, walked)
    found = starts.tolist()
    for (at, end), ok, text in zip(
        zip((ends - sizes).tolist(), ends.tolist(), strict=True),
        chained.tolist(),
        texts,
        strict=True,
    ):
        want = [s for s in walked if at <= s < end]
        if ok:
            assert [s for s in found if at <= s < end] == want
        # text values hold no zero byte: such a body is found at once
        assert ok or not text
    for wire, got in zip(wires, decode_many(wires), strict=True):
        assert got is not None and list(got) == kafka_python(wire)


def control(base_offset: int, commit: bool) -> bytes:
    """A transaction marker batch (control flag set), as a broker writes it."""
    key = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
    wire = bytearray(build([(0, T, key, b"", [])], base_offset=base_offset, transactional=True))
    wire[22] |= 0x20  # the control flag, low byte of the attributes; then the CRC again
    wire[17:21] = calc_crc32c(memoryview(bytes(wire))[21:]).to_bytes(4, "big")
    return bytes(wire)


@pytest.mark.parametrize("seed", range(8))
def test_v2_batches_framed_here_equal_kafka_pythons_batches(seed: int) -> None:
    """Plain, transactional, compressed, header-carrying and control batches, the last one cut
    off: framing the v2 headers here gives exactly the batches kafka-python's objects give."""
    rng = random.Random(seed)
    wires, at = [], 0
    for _ in range(rng.randrange(1, 25)):
        kind = rng.random()
        n = rng.choice([1, 3, 33])
        if kind < 0.1:
            wire = build([(i, T, b"k", b"z" * 90, []) for i in range(n)], codec=1, base_offset=at)
        elif kind < 0.2:
            wire = build([(0, T, b"k", b"v", [("h", b"1")])], base_offset=at)
            n = 1
        elif kind < 0.3:
            wire, n = control(at, rng.random() < 0.5), 1
        else:
            records = text_records(rng, n) if kind < 0.8 else random_records(rng, n)
            wire = build(records, base_offset=at, transactional=kind < 0.4)
        wires.append(wire)
        at += n
    data = b"".join(wires)
    if rng.random() < 0.5:
        data = data[: len(data) - rng.randrange(1, len(wires[-1]))]
    got = decode_batches(data, "t", 0)
    want = _decode_with_kafka_python(data, "t", 0, True)
    assert len(got) == len(want) >= len(wires) - 1
    for g, w in zip(got, want, strict=True):
        assert (g.base_offset, g.next_offset, g.producer_id) == (
            w.base_offset,
            w.next_offset,
            w.producer_id,
        )
        assert (g.transactional, g.marker, g.codec) == (w.transactional, w.marker, w.codec)
        assert list(g.records) == list(w.records)


def test_a_batch_failing_its_crc_stops_the_read_with_its_offset() -> None:
    rng = random.Random(5)
    first = build(text_records(rng, 10), base_offset=0)
    second = bytearray(build(text_records(rng, 10), base_offset=10))
    second[rng.randrange(70, len(second))] ^= 0x40  # one bit of a value
    with pytest.raises(SourceError, match=r"t\[0\]: the record batch at offset 10 fails its CRC"):
        decode_batches(first + bytes(second), "t", 0)
    assert len(decode_batches(first + bytes(second), "t", 0, check_crc=False)) == 2
