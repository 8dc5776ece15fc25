"""Hlls (sketches/hlls.py): many HyperLogLogs as sparse columns give what HyperLogLog gives.

The object is the reference: registers, estimates and bytes are compared with it exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from sketches import HyperLogLog, hll, hlls
from sketches.hlls import Hlls
from sketches.packed import Packed


def version_1(s: HyperLogLog) -> bytes:
    """`s` as version 1 wrote it: u32 count, then (u16 index, u8 value) per register."""
    nz = np.flatnonzero(s.registers)
    entries = np.empty(len(nz), hll._SPARSE_ENTRY)
    entries["index"], entries["value"] = nz, s.registers[nz]
    head = b"TGHL" + bytes([1, s.p, 1]) + len(nz).to_bytes(4, "little")
    return head + entries.tobytes()


def objects(hashes: np.ndarray, groups: np.ndarray, n: int) -> list[HyperLogLog]:
    out = []
    for g in range(n):
        s = HyperLogLog()
        s.update_hashes(hashes[groups == g])
        out.append(s)
    return out


@pytest.mark.parametrize("matrix", [0, 1 << 30])  # registers laid out never, or always
@pytest.mark.parametrize("shape", [(1, 0), (3, 1), (100, 40), (20, 3_000), (3, 200_000)])
def test_build_estimate_encode_combine_equal_the_objects(
    shape: tuple[int, int], matrix: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hlls, "_MATRIX_PER_ENTRY", matrix)
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
    with pytest.raises(ValueError, match="corrupt HyperLogLog: gaps"):
        Hlls.decode([blob[:-1]])
    with pytest.raises(ValueError, match="corrupt HyperLogLog: gaps"):
        Hlls.decode([blob[:-1]] + [blob] * 40)  # the many read at once, then the bad one named
    assert Hlls.unpack(Packed([blob[:-1], blob + b"\x01"])) is None  # each blob's own values
    with pytest.raises(ValueError, match="precisions"):
        Hlls.of([HyperLogLog(10), HyperLogLog(12)])
    with pytest.raises(ValueError):
        Hlls.decode([b"nope" + blob[4:]])


@pytest.mark.parametrize("sliced_from", [0, 1 << 30])  # every part copied a slice each, or none
def test_many_sparse_sketches_among_dense_ones_decode_as_the_objects(
    sliced_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hlls, "_SLICED_FROM", sliced_from)
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
    assert Hlls.estimate_blobs(blobs).tolist() == [s.estimate() for s in expected]
    with pytest.raises(ValueError):
        Hlls.decode([*blobs[:30], blobs[30][:-2], *blobs[31:]])


def _sketch(rng: np.random.Generator, size: int, p: int = 14) -> HyperLogLog:
    s = HyperLogLog(p)
    s.update_hashes(rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32))
    return s


def _dense(s: HyperLogLog, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """`s` written 5 bits a register (what `to_bytes` writes when deflating does not help)."""
    with monkeypatch.context() as m:
        m.setattr(hll, "_DEFLATE_FROM", 1 << 30)
        return s.to_bytes()


def test_dense_and_deflated_sketches_decode_together_as_the_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Full-register blobs (5-bit dense, deflated) are read as one matrix: same registers."""
    rng = np.random.default_rng(11)
    expected = [_sketch(rng, n) for n in (200_000, 3_000, 0, 7, 200_000, 5_000, 1)]
    blobs = [s.to_bytes() for s in expected]
    blobs[4] = _dense(expected[4], monkeypatch)
    assert {b[6] for b in blobs} == {0, 2, 3}  # dense, sparse and deflated among them
    for chosen in (blobs, [b for b in blobs if b[6] != 3], blobs[:2]):
        decoded = Hlls.decode(chosen)
        assert [decoded.sketch(i) for i in range(len(chosen))] == [
            HyperLogLog.from_bytes(b) for b in chosen
        ]
        assert decoded.encode() == [HyperLogLog.from_bytes(b).to_bytes() for b in chosen]
        # estimated where they lie (full ones from their registers): the objects' floats
        assert Hlls.estimate_blobs(chosen).tolist() == [
            HyperLogLog.from_bytes(b).estimate() for b in chosen
        ]
    sparse = [b for b in blobs if b[6] == 3]
    assert Hlls.estimate_blobs(sparse).tolist() == [
        HyperLogLog.from_bytes(b).estimate() for b in sparse
    ]
    assert Hlls.estimate_blobs([]).tolist() == []


def test_bad_full_register_blobs_are_refused_naming_the_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(12)
    dense = _dense(_sketch(rng, 200_000), monkeypatch)
    deflated = _sketch(rng, 3_000).to_bytes()
    assert (dense[6], deflated[6]) == (0, 2)
    with pytest.raises(ValueError, match="dense body"):
        Hlls.decode([deflated, dense[:-1]])
    with pytest.raises(ValueError, match="deflated"):
        Hlls.decode([dense, deflated[:20] + b"\x00" * 8])
    too_high = bytearray(dense)
    too_high[8:] = b"\xff" * (len(dense) - 8)  # every 5-bit register 31 > 33 - 14
    with pytest.raises(ValueError, match="register values"):
        Hlls.decode([bytes(too_high)])
    with pytest.raises(ValueError, match="precisions"):
        Hlls.decode([dense, _sketch(rng, 50_000, p=10).to_bytes()])
    with pytest.raises(ValueError, match="unknown encoding"):
        Hlls.decode([dense[:6] + b"\x07" + dense[7:]])
    # estimating without decoding refuses the same blobs
    for bad, fault in [
        ([deflated, dense[:-1]], "dense body"),
        ([dense, deflated[:20] + b"\x00" * 8], "deflated"),
        ([bytes(too_high)], "register values"),
        ([dense, _sketch(rng, 50_000, p=10).to_bytes()], "precisions"),
        ([dense, _sketch(rng, 5, p=10).to_bytes()], "precisions"),
        ([dense[:6] + b"\x07" + dense[7:]], "unknown encoding"),
        ([b"nope" + dense[4:]], "bad magic"),
        ([dense[:7]], "dense body"),
    ]:
        with pytest.raises(ValueError, match=fault):
            Hlls.estimate_blobs(bad)


def test_version_1_sparse_sketches_read_at_once_and_among_version_2() -> None:
    rng = np.random.default_rng(9)
    hashes = rng.integers(0, 2**32, 3_000, dtype=np.uint64).astype(np.uint32)
    expected = objects(hashes, rng.integers(0, 60, 3_000), 60)
    old = [version_1(s) for s in expected]
    fast = Hlls.unpack(Packed(old))
    assert fast is not None and [fast.sketch(i) for i in range(60)] == expected
    mixed = [
        b if i % 3 else s.to_bytes() for i, (b, s) in enumerate(zip(old, expected, strict=True))
    ]
    assert [Hlls.decode(mixed).sketch(i) for i in range(60)] == expected
    assert Hlls.estimate_blobs(mixed).tolist() == [s.estimate() for s in expected]


def test_a_version_this_code_does_not_read_is_refused_by_name() -> None:
    blob = Hlls.build(np.array([1, 2, 3], np.uint32), np.zeros(3, int), 1).encode()[0]
    newer = blob[:4] + b"\x09" + blob[5:]
    with pytest.raises(ValueError, match="version 9 is newer"):
        Hlls.decode([newer] + [blob] * 40)
