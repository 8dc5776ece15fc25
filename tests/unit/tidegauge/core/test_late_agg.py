"""LateAgg (tidegauge/core/late_agg.py): the late events of one window, service and batch.

`lateness` = arrival (broker time) - event time; `overdue` = frontier - window end, by how much
the event-time frontier had passed the event's window when it arrived. With allowed lateness L
an event would have been late exactly when overdue >= L:

  window [0, 10s)         frontier at arrival = 25s     -> overdue 15s
  ----[=========)---------------|------->  late with L <= 15s, accepted with L > 15s
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from sketches.tdigest import TDigest
from tests.unit.tidegauge.core.fixtures import NAN, exact_values, f64, i64
from tidegauge.core.late_agg import LateAgg, merge_late
from tidegauge.core.window_agg import WindowAgg


def test_late_agg_add() -> None:
    late = LateAgg()
    assert (late.count, late.lateness.count, late.overdue.count) == (0, 0, 0)
    late.add(f64(1_200.0, 35_000.0, NAN), 15_000)
    late.add(f64(), 99)  # nothing: no value, not even the overdue
    late.add(f64(40_000.0), 0)
    assert late.count == 4  # an unknown lateness is still a late event
    assert exact_values(late.lateness) == [1_200.0, 35_000.0, 40_000.0]
    assert late.lateness.nan_count == 1
    # the overdue is one value per event, including the one without a lateness
    assert exact_values(late.overdue) == [0.0, 15_000.0, 15_000.0, 15_000.0]


def _late_cases() -> dict[str, LateAgg]:
    rng = np.random.default_rng(8)
    many = LateAgg()
    for overdue in (0, 5, 40_000):
        many.add(rng.exponential(30_000.0, 10_000), overdue)
    one = LateAgg()
    one.add(f64(12.0), 3)
    nan_only = LateAgg()
    nan_only.add(f64(NAN, NAN), 7)
    return {"empty": LateAgg(), "one": one, "nan-only": nan_only, "many": many}


@pytest.mark.parametrize("name", list(_late_cases()))
def test_late_agg_bytes_round_trip(name: str) -> None:
    late = _late_cases()[name]
    blob = late.to_bytes()
    back = LateAgg.from_bytes(blob)
    assert back == late
    assert back.to_bytes() == blob
    assert LateAgg.from_bytes(bytearray(blob)) == late  # type: ignore[arg-type]
    assert LateAgg.count_of(blob) == late.count


def _late_good() -> bytes:
    late = LateAgg()
    late.add(f64(1.0, 2.0), 4)
    return late.to_bytes()


def _late_with_header(**changes: Any) -> bytes:
    good = _late_good()
    header = struct.Struct("<4sBqII")
    names = ["magic", "version", "count", "n_late", "n_over"]
    fields = dict(zip(names, header.unpack_from(good), strict=True))
    fields.update(changes)
    return header.pack(*fields.values()) + good[header.size :]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"TGLA", id="magic-only"),
        pytest.param(b"\x00" * 64, id="zeros"),
        pytest.param(_late_with_header(magic=b"TGWA"), id="window-magic"),
        pytest.param(_late_with_header(version=2), id="other-version"),
        pytest.param(_late_good()[:-1], id="truncated"),
        pytest.param(_late_good() + b"\x00", id="trailing-byte"),
        pytest.param(_late_with_header(n_late=1), id="lengths-disagree"),
        pytest.param(_late_good()[:21] + b"XXXX" + _late_good()[25:], id="corrupt-digest-magic"),
        pytest.param(WindowAgg().to_bytes(), id="a-window-agg"),
    ],
)
def test_late_agg_from_bytes_refuses_garbage(data: bytes) -> None:
    with pytest.raises(ValueError):
        LateAgg.from_bytes(data)
    with pytest.raises(ValueError):  # among good ones, merged as columns: refused too
        merge_late([_late_good(), data, _late_good()], np.zeros(3, np.int64), 1)


@pytest.mark.parametrize(
    "data",
    [b"", b"TGL", b"TGLA", WindowAgg().to_bytes(), b"\x00" * 64],
    ids=["empty", "short", "magic-only", "a-window-agg", "zeros"],
)
def test_late_agg_count_of_refuses_garbage(data: bytes) -> None:
    with pytest.raises(ValueError):
        LateAgg.count_of(data)


def test_late_agg_digests_are_the_window_agg_kind() -> None:
    # A reader merges late and accepted lateness digests: same compression, so merge works.
    late, agg = LateAgg(), WindowAgg()
    late.add(f64(5.0), 1)
    agg.add_hashed(f64(1.0), i64(200), None, f64(2.0), f64(3.0))
    merged = TDigest.merged([agg.lateness, late.lateness])
    assert exact_values(merged) == [2.0, 5.0]
    assert exact_values(TDigest.merged([agg.overdue, late.overdue])) == [1.0, 3.0]
