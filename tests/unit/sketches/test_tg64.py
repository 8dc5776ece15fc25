"""TG64 v1 (sketches/tg64.py): pinned values, the documented definition, vectorised = reference.

Persisted sketches, checkpoints and de-duplication state depend on these values never changing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sketches.tg64 import BLOCK, datasketch_hashfunc, hash32, hash64, hash64_blocks, tg64
from tests.unit.sketches.fixtures import random_strings

REPO = Path(__file__).resolve().parents[3]


def _spec_tg64(data: bytes) -> int:
    """TG64 v1 written again from the module docstring, independent of the module's code."""
    mask = (1 << 64) - 1

    def fmix(z: int) -> int:
        z ^= z >> 30
        z = z * 0xBF58476D1CE4E5B9 & mask
        z ^= z >> 27
        z = z * 0x94D049BB133111EB & mask
        return z ^ (z >> 31)

    h = 0x243F6A8885A308D3 ^ (len(data) * 0x9E3779B97F4A7C15 & mask)
    for i in range(0, len(data), 8):
        h = fmix(h ^ int.from_bytes(data[i : i + 8].ljust(8, b"\0"), "little"))
    return h


def _spec_hash32(data: bytes) -> int:
    return _spec_tg64(data) & 0xFFFFFFFF


# Pinned values: persisted sketches (Redis) depend on these never changing.
GOLDEN = [
    ("", 2242054355),
    ("a", 2353376217),
    ("user-1", 1101276968),
    ("abcdefgh", 4084176008),  # exactly one word
    ("abcdefghi", 898777113),  # one word and one byte
    ("é", 2772751143),
    ("𝄞 tide", 909874996),
    ("a\x00", 3770171327),  # differs from "a": the length is hashed
]


@pytest.mark.parametrize(("value", "expected"), GOLDEN)
def test_hash_golden_values(value: str, expected: int) -> None:
    assert datasketch_hashfunc(value) == expected
    assert _spec_hash32(value.encode()) == expected
    assert hash32([value]).tolist() == [expected]


def test_vectorised_hash_equals_per_value_hash_and_the_documented_spec() -> None:
    values = random_strings(50_000)  # > 3 blocks of ragged lengths
    expected = np.array([_spec_hash32(v.encode()) for v in values], dtype=np.uint32)
    got = hash32(values)
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, expected)
    assert [datasketch_hashfunc(v) for v in values[:2000]] == expected[:2000].tolist()


def test_hash64_is_the_whole_tg64_and_hash32_its_low_half() -> None:
    values = [*random_strings(20_000), None, "x"]  # nulls are dropped, as by hash32
    got = hash64(values)
    assert got.dtype == np.uint64
    assert got.tolist() == [_spec_tg64(v.encode()) for v in values if v is not None]
    np.testing.assert_array_equal(got.astype(np.uint32), hash32(values))
    assert hash64([]).dtype == np.uint64


def test_str_and_its_utf8_bytes_hash_alike() -> None:
    values = random_strings(1000)
    np.testing.assert_array_equal(hash32(values), hash32([v.encode() for v in values]))
    assert datasketch_hashfunc("é€") == datasketch_hashfunc("é€".encode())
    assert datasketch_hashfunc(bytearray(b"ab")) == datasketch_hashfunc(memoryview(b"ab"))


def test_datasketch_hashfunc_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        datasketch_hashfunc(12)  # type: ignore[arg-type]


def test_hash_is_the_same_in_a_fresh_interpreter_with_another_hashseed() -> None:
    values = ["alice", "bob", "é", "", "user-000000001234"]
    code = (
        "import json, sys; from sketches.tg64 import hash32; "
        f"print(json.dumps(hash32({values!r}).tolist()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == hash32(values).tolist()


def test_the_reference_is_the_documented_definition() -> None:
    for v in [*random_strings(2_000), "", "abcdefgh", "abcdefghi"]:
        data = v.encode()
        assert tg64(data) == _spec_tg64(data)
        assert datasketch_hashfunc(v) == tg64(data) & 0xFFFFFFFF


def test_hash64_blocks_are_at_most_a_block_and_make_up_hash64() -> None:
    values = pa.chunked_array([random_strings(BLOCK + 5), [None, "x"], []])
    blocks = list(hash64_blocks(values))
    assert all(0 < len(b) <= BLOCK for b in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks), hash64(values))
    assert len(hash64(values)) == BLOCK + 6  # the null is dropped


@pytest.mark.parametrize("bad", ["alice", b"alice", [1, 2], np.arange(3), 42])
def test_a_single_value_or_a_column_of_non_strings_is_refused(bad: object) -> None:
    with pytest.raises(TypeError):
        hash32(bad)
