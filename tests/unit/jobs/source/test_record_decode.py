"""The column-wise record decoder (jobs/source/record_decode.py) against kafka-python's own reader.

Batches are built with kafka-python's `DefaultRecordBatchBuilder` (what its producer sends) and
read back both ways: the fast decoder must give exactly kafka-python's records, or None for the
batches it leaves to kafka-python (compressed, with headers, control, broken). It never raises.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatch

from jobs.source.record_decode import (
    BATCH_HEAD,
    _chain_starts,
    _starts,
    _varints,
    decode_many,
    decode_records,
)
from tests.fixtures import T
from tests.unit.jobs.source.fixtures import build, kafka_python, random_records, text_records


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


def _zigzag(value: int) -> bytes:
    """Kafka's varint of a signed 64-bit value, as its record format writes it."""
    u = (value << 1) ^ (value >> 63) if value >= 0 else ((value << 1) ^ -1) & (2**64 - 1)
    out = bytearray()
    while True:
        out.append((u & 0x7F) | (0x80 if u > 0x7F else 0))
        u >>= 7
        if not out[-1] & 0x80:
            return bytes(out)


def test_varints_of_every_length_decode_side_by_side() -> None:
    """Varints of 1 to 10 bytes, both signs and the int64 extremes, read at once: the values,
    where each ends, and those that run on past 10 bytes marked too long."""
    rng = random.Random(3)
    values = [0, -1, 1, 63, -64, 64, 2**63 - 1, -(2**63)]
    values += [rng.randrange(-(2**bits), 2**bits) for bits in range(1, 64) for _ in range(5)]
    data, pos = bytearray(), []
    for v in values:
        pos.append(len(data))
        data += _zigzag(v)
    too_long = len(data)
    data += b"\xff" * 11  # a varint that never ends within 10 bytes
    buf = np.frombuffer(bytes(data) + bytes(16), dtype=np.uint8)
    got, after, long = _varints(buf, np.array([*pos, too_long], dtype=np.int64))
    ends = [*pos[1:], too_long]
    assert got[:-1].tolist() == values
    assert after[:-1].tolist() == ends
    assert long.tolist() == [False] * len(values) + [True]
    assert after[-1] == too_long + 10
