"""Hlls (sketches/hlls.py): many HyperLogLogs as sparse columns give what HyperLogLog gives.

The object is the reference: registers, estimates and bytes are compared with it exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from sketches import HyperLogLog
from sketches.hlls import Hlls


def objects(hashes: np.ndarray, groups: np.ndarray, n: int) -> list[HyperLogLog]:
    out = []
    for g in range(n):
        s = HyperLogLog()
        s.update_hashes(hashes[groups == g])
        out.append(s)
    return out


@pytest.mark.parametrize("shape", [(1, 0), (3, 1), (100, 40), (20, 3_000), (3, 200_000)])
def test_build_estimate_encode_combine_equal_the_objects(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[0])
    n, per = shape
    groups = rng.integers(0, n, n * per)
    hashes = rng.integers(0, 2**32, n * per, dtype=np.uint64).astype(np.uint32)
    columns = Hlls.build(hashes, groups, n)
    expected = objects(hashes, groups, n)
    assert [columns.sketch(i) for i in range(n)] == expected
    assert columns.estimate().tolist() == [s.estimate() for s in expected]
    blobs = columns.encode()  # sparse, dense and deflated sketches among them
    assert blobs == [s.to_bytes() for s in expected]
    assert [Hlls.decode(blobs).sketch(i) for i in range(n)] == expected
    k = max(1, n // 3)
    keys = rng.integers(0, k, n)
    merged = columns.combine(keys, k)
    for key in range(k):
        parts = [expected[i] for i in range(n) if keys[i] == key]
        assert merged.sketch(key) == (HyperLogLog.merged(parts) if parts else HyperLogLog())
    rows = np.arange(n)[::-1]
    assert [columns.take(rows).sketch(i) for i in range(n)] == expected[::-1]
    assert [Hlls.of(expected).sketch(i) for i in range(n)] == expected


def test_saturated_and_empty_sketches_estimate_as_the_object_does() -> None:
    full = HyperLogLog(4, np.full(16, 29, np.uint8))  # every register at its top value
    empty = HyperLogLog(4)
    assert Hlls.of([full, empty]).estimate().tolist() == [full.estimate(), empty.estimate()]


def test_bad_blobs_are_refused() -> None:
    blob = Hlls.build(np.array([1, 2, 3], np.uint32), np.zeros(3, int), 1).encode()[0]
    with pytest.raises(ValueError, match="do not fit"):
        Hlls.decode([blob[:-1]])
    with pytest.raises(ValueError, match="precisions"):
        Hlls.of([HyperLogLog(10), HyperLogLog(12)])
    with pytest.raises(ValueError):
        Hlls.decode([b"nope" + blob[4:]])


def test_many_sparse_sketches_among_dense_ones_decode_as_the_objects() -> None:
    rng = np.random.default_rng(5)
    sizes = [3] * 40 + [50_000, 5] * 3 + [0, 2]  # mostly sparse, a few dense, empty ones
    expected = []
    for size in sizes:
        s = HyperLogLog()
        s.update_hashes(rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32))
        expected.append(s)
    rng.shuffle(expected)  # type: ignore[arg-type]
    blobs = [s.to_bytes() for s in expected]
    assert len({b[6] for b in blobs}) > 1  # several encodings
    decoded = Hlls.decode(blobs)
    assert [decoded.sketch(i) for i in range(len(blobs))] == expected
    assert decoded.encode() == blobs
    with pytest.raises(ValueError):
        Hlls.decode([*blobs[:30], blobs[30][:-2], *blobs[31:]])
