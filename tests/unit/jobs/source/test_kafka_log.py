"""A fetch's record batches decoded (jobs/source/kafka_log.py): the same as kafka-python's, faster.

Batches are built with kafka-python's `DefaultRecordBatchBuilder` (what its producer sends);
`decode_batches` frames v2 batches itself and must give exactly the batches kafka-python gives.
"""

from __future__ import annotations

import random

import pytest
from kafka.record.util import calc_crc32c

from jobs.source.kafka_log import SourceError, _decode_with_kafka_python, decode_batches
from tests.fixtures import T
from tests.unit.jobs.source.fixtures import build, kafka_python, random_records, text_records


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
