"""Varints (sketches/varint.py) against a value-by-value LEB128 (the tests' fixtures)."""

from __future__ import annotations

import numpy as np
import pytest

from sketches import varint
from tests.unit.sketches.fixtures import leb128

EDGES = [0, 1, 127, 128, 255, 16_383, 16_384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**32 - 1]


@pytest.mark.parametrize("seed", range(4))
def test_encode_and_decode_equal_textbook_leb128(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.concatenate([EDGES, rng.integers(0, 2**32, 200), rng.integers(0, 300, 200)])
    rng.shuffle(values)
    data = varint.encode(values)
    assert data.tobytes() == b"".join(leb128(int(v)) for v in values)
    assert varint.lengths(values).tolist() == [len(leb128(int(v))) for v in values]
    np.testing.assert_array_equal(varint.decode(data, len(values)), values)


def test_gaps_restart_at_each_run() -> None:
    values = np.array([3, 5, 9, 0, 4, 7], np.int64)
    np.testing.assert_array_equal(varint.gaps(values, np.array([0, 3])), [3, 2, 4, 0, 4, 3])
    np.testing.assert_array_equal(
        varint.ungap(np.array([3, 2, 4, 0, 4, 3]), np.array([3, 0, 3])), values
    )
    assert varint.encode(np.empty(0, np.int64)).size == 0
    assert varint.decode(np.empty(0, np.uint8), 0).size == 0


@pytest.mark.parametrize(
    ("data", "count"),
    [
        (b"\x81", 1),  # the value never ends
        (b"\x01\x02", 1),  # one value too many
        (b"\x01", 2),  # one too few
        (b"\x80\x80\x80\x80\x80\x01", 1),  # six bytes: longer than any offset
    ],
)
def test_bad_varints_are_refused(data: bytes, count: int) -> None:
    with pytest.raises(ValueError, match="varints"):
        varint.decode(np.frombuffer(data, np.uint8), count)


def test_one_value_and_one_at_each_offset_equal_textbook_leb128() -> None:
    values = [*EDGES, 2**35 - 1]
    joined = b"".join(leb128(v) for v in values)
    pos, at = 0, []
    for v in values:
        assert varint.pack(v) == leb128(v)
        at.append(pos)
        assert varint.unpack_from(joined, pos) == (v, pos + len(leb128(v)))
        pos += len(leb128(v))
    buf = np.frombuffer(joined, np.uint8)
    got, after = varint.read_at(buf, np.array(at), np.full(len(at), len(buf)))
    assert got.tolist() == values
    assert after.tolist() == [*at[1:], len(buf)]
    with pytest.raises(ValueError, match="out of range"):
        varint.pack(2**35)
    for bad in (b"\x81", b"\x80\x80\x80\x80\x80\x01"):  # runs out; longer than 5 bytes
        with pytest.raises(ValueError, match="varints"):
            varint.unpack_from(bad, 0)
        with pytest.raises(ValueError, match="varints"):
            varint.read_at(np.frombuffer(bad, np.uint8), np.array([0]), np.array([len(bad)]))
    # a varint may not run past its own blob's end, whatever follows in the buffer
    with pytest.raises(ValueError, match="truncated"):
        varint.read_at(np.frombuffer(b"\x81\x01", np.uint8), np.array([0]), np.array([1]))
