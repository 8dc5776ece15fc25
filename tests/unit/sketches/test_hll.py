"""HyperLogLog (sketches/hll.py): datasketch interop, merge, serialisation, inputs.

Its hash, TG64, is tested in test_tg64.py; accuracy against exact counts lives in
tests/accuracy/test_hll_accuracy.py.
"""

from __future__ import annotations

import pickle
import struct
import warnings
import zlib
from collections.abc import Callable

import datasketch
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sketches.hll import DEFAULT_P, HyperLogLog
from sketches.tg64 import datasketch_hashfunc, hash32
from tests.unit.sketches.fixtures import leb128, random_strings


def _datasketch_per_value(values: list[str], p: int = DEFAULT_P) -> datasketch.HyperLogLog:
    d = datasketch.HyperLogLog(p=p, hashfunc=datasketch_hashfunc)
    for v in values:
        d.update(v)
    return d


def _sketch(values: object, p: int = DEFAULT_P) -> HyperLogLog:
    s = HyperLogLog(p)
    s.update(values)
    return s


def _ds_count(d: datasketch.HyperLogLog) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # datasketch warns near its linear-counting threshold
        return float(d.count())


# --- datasketch interop ------------------------------------------------------------------------


@pytest.mark.parametrize("p", [4, 10, 14, 16])
def test_registers_equal_datasketch_updated_value_by_value(p: int) -> None:
    values = random_strings(10_000)
    ours = _sketch(values, p)
    theirs = _datasketch_per_value(values, p)
    np.testing.assert_array_equal(ours.registers, theirs.reg)
    assert ours.registers.dtype == np.uint8 and len(ours.registers) == 2**p


def test_datasketch_loads_and_merges_ours() -> None:
    a, b = random_strings(5000, seed=1), random_strings(5000, seed=2)
    ours = _sketch(a)
    theirs = _datasketch_per_value(b)
    theirs.merge(ours.to_datasketch())
    np.testing.assert_array_equal(theirs.reg, _sketch(a + b).registers)
    # The raw form a datasketch user writes: datasketch built on our registers and hash.
    raw = datasketch.HyperLogLog(reg=ours.registers, hashfunc=datasketch_hashfunc)
    raw.update(b[0])
    ours.update([b[0]])
    np.testing.assert_array_equal(raw.reg, ours.registers)


def test_to_datasketch_is_a_copy_that_keeps_updating_with_our_hash() -> None:
    ours = _sketch(["a", "b"])
    d = ours.to_datasketch()
    assert d.p == ours.p and d.hashfunc is datasketch_hashfunc
    d.update("c")
    assert ours == _sketch(["a", "b"])  # not shared
    assert HyperLogLog.from_datasketch(d) == _sketch(["a", "b", "c"])


def test_from_datasketch_round_trip() -> None:
    values = random_strings(3000)
    theirs = _datasketch_per_value(values, p=12)
    ours = HyperLogLog.from_datasketch(theirs)
    assert ours == _sketch(values, 12)
    assert HyperLogLog.from_datasketch(ours.to_datasketch()) == ours
    np.testing.assert_array_equal(ours.to_datasketch().reg, theirs.reg)


def test_from_datasketch_refuses_hyperloglogplusplus_and_other_objects() -> None:
    with pytest.raises(TypeError):
        HyperLogLog.from_datasketch(datasketch.HyperLogLogPlusPlus(p=8))
    with pytest.raises(TypeError):
        HyperLogLog.from_datasketch(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, 1, 10, 1000, 30_000, 60_000, 200_000])
@pytest.mark.parametrize("p", [4, 8, 14])
def test_count_equals_datasketch_count_on_the_same_registers(n: int, p: int) -> None:
    ours = _sketch([f"u{i}" for i in range(n)], p)
    assert ours.count() == pytest.approx(_ds_count(ours.to_datasketch()), rel=1e-12, abs=1e-12)


def test_count_large_range_correction_matches_datasketch() -> None:
    # Registers as if ~2^30 values were seen: exercises the > 2^32 / 30 branch.
    rng = np.random.default_rng(3)
    reg = (rng.geometric(0.5, size=2**14) + 16).clip(0, 19).astype(np.uint8)
    ours = HyperLogLog(14, reg)
    assert ours.count() > (1 << 32) / 30
    assert ours.count() == pytest.approx(_ds_count(ours.to_datasketch()), rel=1e-12)


# --- merge -------------------------------------------------------------------------------------


def test_merge_is_union_commutative_associative_idempotent() -> None:
    a, b, c = (_sketch(random_strings(4000, seed=s)) for s in (1, 2, 3))
    union = _sketch(
        random_strings(4000, seed=1) + random_strings(4000, seed=2) + random_strings(4000, 3)
    )
    ab = a.copy()
    ab.merge(b)
    ba = b.copy()
    ba.merge(a)
    assert ab == ba
    abc = ab.copy()
    abc.merge(c)
    a_bc = b.copy()
    a_bc.merge(c)
    a_bc.merge(a)
    assert abc == a_bc == union == HyperLogLog.merged([c, b, a])
    again = abc.copy()
    again.merge(abc, a, b)  # idempotent
    assert again == abc
    many = a.copy()
    many.merge(b, c)  # several at once
    assert many == union


def test_merged_leaves_inputs_alone_and_needs_one_sketch() -> None:
    a, b = _sketch(["x"]), _sketch(["y"])
    m = HyperLogLog.merged([a, b])
    assert a == _sketch(["x"]) and b == _sketch(["y"]) and m == _sketch(["x", "y"])
    assert HyperLogLog.merged([a]) == a and HyperLogLog.merged([a]) is not a
    with pytest.raises(ValueError):
        HyperLogLog.merged([])


def test_merge_refuses_other_precision_without_changing_anything() -> None:
    a = _sketch(["x"], 14)
    before = a.copy()
    with pytest.raises(ValueError, match="p=12"):
        a.merge(_sketch(["y"], 14), _sketch(["z"], 12))
    assert a == before
    with pytest.raises(ValueError):
        HyperLogLog.merged([a, HyperLogLog(16)])
    with pytest.raises(TypeError):
        a.merge(a.to_datasketch())  # type: ignore[arg-type]


# --- serialisation -----------------------------------------------------------------------------


def gaps_bytes(s: HyperLogLog, version: int = 2) -> bytes:
    """`s` in the *gaps* encoding, written here register by register: the count, then the gap
    of each key (index << 5 | value) from the one before, the first key whole."""
    keys = [(int(i) << 5) | int(s.registers[i]) for i in np.flatnonzero(s.registers)]
    gaps = [k - before for k, before in zip(keys, [0, *keys][: len(keys)], strict=True)]
    body = leb128(len(keys)) + b"".join(map(leb128, gaps))
    return b"TGHL" + bytes([version, s.p, 3]) + body


@pytest.mark.parametrize("p", [4, 14, 16])
@pytest.mark.parametrize("n", [0, 1, 100, 2_000, 300_000])
def test_bytes_round_trip_exact(p: int, n: int) -> None:
    s = _sketch([f"u{i}" for i in range(n)], p)
    data = s.to_bytes()
    assert isinstance(data, bytes)
    assert HyperLogLog.from_bytes(data) == s
    assert HyperLogLog.from_bytes(bytearray(data)) == s
    assert HyperLogLog.from_bytes(memoryview(data)) == s
    gaps, dense = gaps_bytes(s), 7 + 5 * 2**p // 8
    if len(gaps) - 7 < 1_024:  # small sketches are never deflated
        assert data == gaps if len(gaps) < dense else len(data) == dense
    else:  # the smallest of gaps, dense and deflated
        assert len(data) <= min(len(gaps), dense)


def test_serialised_sizes_at_default_p() -> None:
    assert HyperLogLog().to_bytes() == b"TGHL\x02\x0e\x03\x00"  # empty window: 8 bytes
    hundred = _sketch([f"user-{i}" for i in range(100)])
    nz = int(np.count_nonzero(hundred.registers))
    assert hundred.to_bytes() == gaps_bytes(hundred)
    assert len(hundred.to_bytes()) <= 8 + 2.2 * nz  # ~2 bytes a register, not 3 as entries
    full = _sketch([f"u{i}" for i in range(1_000_000)])
    assert len(full.to_bytes()) < 0.75 * (7 + 10240)  # deflated beats 5 bits per register
    assert full.to_bytes()[4:7] == bytes([2, 14, 2])  # version, p, deflated
    hour = _sketch([f"user-{i}" for i in range(5_000)])  # a busy service's hour
    assert len(hour.to_bytes()) < 0.5 * (11 + 3 * int(np.count_nonzero(hour.registers)))
    assert HyperLogLog.from_bytes(full.to_bytes()) == full


def test_version_1_sparse_entries_are_still_read() -> None:
    """Sketches written before the gaps (u16 index, u8 value per register) read back the same."""
    s = _sketch([f"user-{i}" for i in range(100)])
    nz = np.flatnonzero(s.registers)
    old = _sparse([(int(i), int(s.registers[i])) for i in nz], p=14)
    assert len(old) == 11 + 3 * len(nz) and old[4] == 1
    assert HyperLogLog.from_bytes(old) == s
    with pytest.raises(ValueError, match="unknown encoding 3"):
        HyperLogLog.from_bytes(gaps_bytes(s, version=1))  # the gaps came with version 2


def test_dense_packing_is_still_read() -> None:
    """Sketches written before deflating (dense, 5 bits per register) read back the same."""
    full = _sketch([f"u{i}" for i in range(1_000_000)])
    bits = np.unpackbits(full.registers[:, None], axis=1, count=5, bitorder="little")
    packed = np.packbits(bits.reshape(-1), bitorder="little").tobytes()
    assert HyperLogLog.from_bytes(_header(p=14, encoding=0) + packed) == full


def test_max_register_value_survives_dense_packing() -> None:
    reg = np.full(2**4, 29, dtype=np.uint8)  # p=4: max rank 33 - 4 = 29 < 32
    s = HyperLogLog(4, reg)
    assert HyperLogLog.from_bytes(s.to_bytes()) == s


def test_pickle_round_trip() -> None:
    s = _sketch(random_strings(500))
    assert pickle.loads(pickle.dumps(s)) == s


def _header(version: int = 1, p: int = 4, encoding: int = 1) -> bytes:
    return b"TGHL" + bytes([version, p, encoding])


def _sparse(entries: list[tuple[int, int]], p: int = 4, count: int | None = None) -> bytes:
    body = struct.pack("<I", len(entries) if count is None else count)
    body += b"".join(struct.pack("<HB", i, v) for i, v in entries)
    return _header(p=p, encoding=1) + body


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"TGHL", id="header-truncated"),
        pytest.param(b"XXXX" + bytes([1, 4, 1, 0, 0, 0, 0]), id="bad-magic"),
        pytest.param(_header(version=3) + bytes(4), id="future-version"),
        pytest.param(_header(p=3) + bytes(4), id="p-too-small"),
        pytest.param(_header(p=17) + bytes(4), id="p-too-large"),
        pytest.param(_header(encoding=7) + bytes(4), id="unknown-encoding"),
        pytest.param(_header(encoding=2) + b"not zlib", id="deflated-garbage"),
        pytest.param(_header(encoding=2) + zlib.compress(bytes(15)), id="deflated-short"),
        pytest.param(_header(encoding=2) + zlib.compress(bytes(17)), id="deflated-long"),
        pytest.param(_header(encoding=2) + zlib.compress(b"\x1f" * 16), id="deflated-too-big"),
        pytest.param(_header(encoding=0) + bytes(9), id="dense-truncated"),
        pytest.param(_header(encoding=0) + bytes(11), id="dense-too-long"),
        pytest.param(_header(encoding=0) + b"\xff" * 10, id="dense-register-31-too-big"),
        pytest.param(_header() + bytes(3), id="sparse-count-truncated"),
        pytest.param(_sparse([(1, 2)], count=2), id="sparse-count-mismatch"),
        pytest.param(_sparse([(1, 2)]) + b"\0", id="sparse-trailing-byte"),
        pytest.param(_sparse([(3, 2), (1, 2)]), id="sparse-unsorted"),
        pytest.param(_sparse([(1, 2), (1, 3)]), id="sparse-duplicate-index"),
        pytest.param(_sparse([(1, 0)]), id="sparse-zero-value"),
        pytest.param(_sparse([(16, 1)]), id="sparse-index-out-of-range"),
        pytest.param(_sparse([(1, 30)]), id="sparse-value-too-big"),
        pytest.param(_header(2, encoding=3), id="gaps-no-count"),
        pytest.param(_header(2, encoding=3) + b"\x02\x22", id="gaps-count-mismatch"),
        pytest.param(_header(2, encoding=3) + b"\x01\x22\x00", id="gaps-trailing-byte"),
        pytest.param(_header(2, encoding=3) + b"\x01\xa2", id="gaps-truncated-varint"),
        pytest.param(_header(2, encoding=3) + b"\x02\x22\x00", id="gaps-duplicate-index"),
        pytest.param(_header(2, encoding=3) + b"\x01\x20", id="gaps-zero-value"),
        pytest.param(_header(2, encoding=3) + b"\x01\x81\x04", id="gaps-index-out-of-range"),
        pytest.param(_header(2, encoding=3) + b"\x11" + bytes(17), id="gaps-count-over-m"),
        pytest.param(b"\x0e" + bytes(2**14), id="datasketch-serialize-format"),
    ],
)
def test_from_bytes_rejects_garbage(data: bytes) -> None:
    with pytest.raises(ValueError):
        HyperLogLog.from_bytes(data)


# --- inputs and nulls --------------------------------------------------------------------------

VALUES = ["alice", "bob", "é", "𝄞", "", "user-000000001234", "bob"]


def _string_view(v: list[str]) -> pa.Array:
    return pa.array(v, pa.string_view())


INPUTS: list[tuple[str, Callable[[list[str]], object]]] = [
    ("list", lambda v: v),
    ("tuple", tuple),
    ("generator", lambda v: (x for x in v)),
    ("numpy-object", lambda v: np.array(v, dtype=object)),
    ("numpy-unicode", lambda v: np.array(v)),
    ("numpy-stringdtype", lambda v: np.array(v, dtype=np.dtypes.StringDType())),
    ("bytes-list", lambda v: [x.encode() for x in v]),
    ("series-str", lambda v: pd.Series(v, dtype="str")),
    ("series-object", lambda v: pd.Series(v, dtype=object)),
    ("series-string-python", lambda v: pd.Series(v, dtype="string[python]")),
    ("series-category", lambda v: pd.Series(v, dtype="category")),
    ("index", pd.Index),
    ("arrow-string", pa.array),
    ("arrow-large-string", lambda v: pa.array(v, pa.large_string())),
    ("arrow-binary", lambda v: pa.array([x.encode() for x in v], pa.binary())),
    ("arrow-string-view", _string_view),
    ("arrow-dictionary", lambda v: pa.array(v).dictionary_encode()),
    ("arrow-chunked", lambda v: pa.chunked_array([v[:2], [], v[2:]])),
    ("arrow-sliced", lambda v: pa.array(["pad", *v, "pad"])[1:-1]),
]


@pytest.mark.parametrize("make", [m for _, m in INPUTS], ids=[n for n, _ in INPUTS])
def test_input_types_give_the_same_sketch(make: Callable[[list[str]], object]) -> None:
    expected = _datasketch_per_value(VALUES)
    s = _sketch(make(VALUES))
    np.testing.assert_array_equal(s.registers, expected.reg)
    assert hash32(make(VALUES)).tolist() == [datasketch_hashfunc(v) for v in VALUES]


@pytest.mark.parametrize(
    "with_nulls",
    [
        pytest.param(["a", None, "b", float("nan")], id="list-none-nan"),
        pytest.param(np.array(["a", None, "b", np.nan], dtype=object), id="numpy-object"),
        pytest.param(pd.Series(["a", None, "b", pd.NA], dtype="string[python]"), id="pd-NA"),
        pytest.param(pd.Series(["a", None, "b"], dtype="str"), id="series-str"),
        pytest.param(pa.array(["a", None, "b"]), id="arrow-null"),
        pytest.param(pa.array(["a", None, "b", None]).dictionary_encode(), id="dictionary"),
        pytest.param(
            pa.DictionaryArray.from_arrays(pa.array([0, 1, None]), pa.array(["a", "b"])),
            id="dictionary-null-index",
        ),
        pytest.param(pa.chunked_array([["a"], [None], ["b"]]), id="chunked"),
    ],
)
def test_nulls_are_ignored(with_nulls: object) -> None:
    assert _sketch(with_nulls) == _sketch(["a", "b"])
    assert hash32(with_nulls).tolist() == hash32(["a", "b"]).tolist()


@pytest.mark.parametrize(
    "only_nulls",
    [[], [None, None], np.array([None], dtype=object), pa.nulls(3), pa.array([], pa.string())],
    ids=["empty-list", "nones", "numpy-none", "arrow-null-type", "arrow-empty"],
)
def test_empty_or_all_null_columns_leave_the_sketch_empty(only_nulls: object) -> None:
    s = _sketch(only_nulls)
    assert s.is_empty() and s.count() == 0.0 and s == HyperLogLog()
    assert len(hash32(only_nulls)) == 0


def test_empty_strings_are_values_not_nulls() -> None:
    assert _sketch([""]).count() == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        pytest.param("alice", TypeError, id="single-str"),
        pytest.param(b"alice", TypeError, id="single-bytes"),
        pytest.param([1, 2, 3], TypeError, id="ints"),
        pytest.param(["a", 1], TypeError, id="mixed"),
        pytest.param(np.arange(3), TypeError, id="numpy-ints"),
        pytest.param(np.array([["a"]]), ValueError, id="2-d"),
        pytest.param(pa.array([1.5]), TypeError, id="arrow-float"),
        pytest.param(42, TypeError, id="scalar"),
    ],
)
def test_bad_columns_are_refused(bad: object, error: type[Exception]) -> None:
    s = HyperLogLog()
    with pytest.raises(error):
        s.update(bad)
    assert s.is_empty()


def test_duplicates_do_not_change_the_sketch() -> None:
    values = random_strings(2000)
    assert _sketch(values * 3) == _sketch(values)


# --- construction and value semantics -----------------------------------------------------------


def test_empty_sketch() -> None:
    s = HyperLogLog()
    assert s.p == DEFAULT_P == 14
    assert s.registers.dtype == np.uint8 and s.registers.shape == (2**14,)
    assert s.count() == 0.0 and s.is_empty()
    assert _ds_count(s.to_datasketch()) == 0.0


@pytest.mark.parametrize("p", [3, 17, 0, -1])
def test_precision_out_of_range(p: int) -> None:
    with pytest.raises(ValueError):
        HyperLogLog(p)


@pytest.mark.parametrize(
    "registers",
    [
        pytest.param(np.zeros(2**14 - 1, np.uint8), id="short"),
        pytest.param(np.zeros((2, 2**13), np.uint8), id="2-d"),
        pytest.param(np.full(2**14, 20, np.uint8), id="value-above-33-p"),
        pytest.param(np.full(2**14, -1, np.int8), id="negative"),
        pytest.param(np.zeros(2**14, np.float64), id="float"),
    ],
)
def test_bad_registers(registers: np.ndarray) -> None:
    with pytest.raises(ValueError):
        HyperLogLog(14, registers)


def test_registers_are_copied_in_and_copy_is_independent() -> None:
    reg = np.zeros(2**14, np.int8)
    s = HyperLogLog(14, reg)
    reg[0] = 5
    assert s.is_empty()
    c = s.copy()
    c.update(["x"])
    assert s.is_empty() and not c.is_empty() and c != s


def test_equality_and_repr() -> None:
    assert _sketch(["a"]) == _sketch(["a"])
    assert _sketch(["a"]) != _sketch(["b"])
    assert HyperLogLog(12) != HyperLogLog(14)
    assert HyperLogLog() != "HyperLogLog"
    r = repr(_sketch(["a", "b"]))
    assert r.startswith("HyperLogLog(p=14, nonzero=2/16384")
    with pytest.raises(TypeError):
        hash(HyperLogLog())


# --- estimate (Ertl's improved estimator) ------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, 0.0), (1, 1.0), (2, 2.0), (10, 10.0)],
)
def test_estimate_small_counts_are_near_exact(n: int, expected: float) -> None:
    assert _sketch([f"u{i}" for i in range(n)]).estimate() == pytest.approx(expected, rel=1e-3)


def test_estimate_agrees_with_count_away_from_the_transition() -> None:
    s = _sketch([f"u{i}" for i in range(5000)])  # linear-counting range: both near-unbiased
    assert s.estimate() == pytest.approx(s.count(), rel=0.002)


def test_estimate_of_saturated_registers_is_infinite() -> None:
    assert HyperLogLog(4, np.full(16, 29, np.uint8)).estimate() == float("inf")


# --- update_hashes (hash a batch once, split by window) ----------------------------------------


def test_update_hashes_equals_update() -> None:
    values = random_strings(40_000)
    h = hash32(values)
    by_hash = HyperLogLog()
    by_hash.update_hashes(h)
    assert by_hash == _sketch(values)
    split = [HyperLogLog(), HyperLogLog()]
    window = np.arange(len(h)) % 2
    for w, s in enumerate(split):
        s.update_hashes(h[window == w])
    assert HyperLogLog.merged(split) == by_hash
    as_ints = HyperLogLog()
    as_ints.update_hashes([datasketch_hashfunc(v) for v in values[:100]])
    assert as_ints == _sketch(values[:100])


@pytest.mark.parametrize(
    "bad",
    [np.array([-1]), np.array([2**32]), np.array([0.5]), ["a"]],
    ids=["negative", "too-big", "float", "str"],
)
def test_update_hashes_rejects_non_uint32(bad: object) -> None:
    with pytest.raises(ValueError):
        HyperLogLog().update_hashes(bad)  # type: ignore[arg-type]


def test_hash_once_split_by_group_with_nulls_equals_per_group_update() -> None:
    users = np.array(["a", None, "b", "c", None, "a", "d"], dtype=object)
    group = np.array([0, 0, 1, 1, 1, 0, 1])
    valid = pd.notna(users)
    h = hash32(users[valid])
    for g in (0, 1):
        mask = group == g
        by_hash = HyperLogLog()
        by_hash.update_hashes(h[mask[valid]])
        assert by_hash == _sketch(users[mask])
