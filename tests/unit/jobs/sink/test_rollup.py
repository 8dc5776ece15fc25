"""Roll-ups in the sink (jobs/sink/rollup.py): one closed period rolled up from its windows."""

from __future__ import annotations

import numpy as np

from jobs.sink.rollup import RolledWindow, roll_period, roll_periods
from tests.fixtures import M, S
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_agg import WindowAgg


def _agg(seed: int, n: int) -> WindowAgg:
    rng = np.random.default_rng(seed)
    a = WindowAgg()
    users = np.array([f"u{u}" for u in rng.integers(0, 50, n)], dtype=object)
    a.add(rng.lognormal(3, 0.5, n), rng.choice([200, 500], n), users)
    return a


def test_a_period_rolls_up_to_the_merge_of_its_windows() -> None:
    windows = []
    for k in range(6):
        a, b = _agg(k, 40 + k), _agg(100 + k, 7)
        late = LateAgg()
        late.add(np.array([5_000.0, 9_000.0]), 1_000.0)
        windows.append(
            (
                k * 10 * S,
                RolledWindow(
                    aggs={"api": a.to_bytes(), "*": WindowAgg.merged([a, b]).to_bytes()},
                    late={"api|3": late.to_bytes(), "api|9": late.to_bytes()},
                    stragglers={"api|2": b"1", "api|3": b"2"},
                    duplicates={"api|4": b"5"},
                ),
            )
        )
    rolled = roll_period(list(reversed(windows)), batch_id=9)
    got = {s: WindowAgg.from_bytes(b) for s, b in rolled.aggs.items()}
    want = WindowAgg.merged(WindowAgg.from_bytes(w.aggs["api"]) for _, w in windows)
    assert got["api"].to_bytes() == want.to_bytes()  # the same merge, in window order
    assert got["api"].metrics(M)["count"] == sum(40 + k for k in range(6))
    assert got["*"].metrics(M)["count"] == sum(47 + k for k in range(6))
    # the building batch's own late rows (9) are added directly, not folded from the windows
    # the earlier batches' facts are folded into one field per service ("service|-1")
    assert set(rolled.late) == {"api|-1"} and LateAgg.count_of(rolled.late["api|-1"]) == 12
    # 18 stragglers brought by 2 batches to each of 6 windows: 12 revisions, `*`'s too
    assert rolled.stragglers == {"api|-1": b"18/12", "*|-1": b"18/12"}
    assert rolled.duplicates == {"api|-1": b"30"}


def test_a_coarser_period_folds_the_folded_facts_of_its_roll_ups() -> None:
    late = LateAgg()
    late.add(np.array([5_000.0]), 1_000.0)
    minutes = [
        (
            k * M,
            RolledWindow(
                aggs={"api": _agg(k, 30).to_bytes()},
                late={"api|-1": late.to_bytes(), "api|40": late.to_bytes()},
                stragglers={"api|-1": b"7/3", "web|-1": b"2/2", "*|-1": b"9/4"},
                duplicates={"api|-1": b"2"},
            ),
        )
        for k in range(3)
    ]
    hour = roll_period(minutes, batch_id=50)
    assert LateAgg.count_of(hour.late["api|-1"]) == 6 and set(hour.late) == {"api|-1"}
    assert hour.stragglers == {"*|-1": b"27/12", "api|-1": b"21/9", "web|-1": b"6/6"}
    assert hour.duplicates == {"api|-1": b"6"}


def test_many_periods_at_once_equal_each_rolled_alone() -> None:
    """A catching-up batch closes many periods in one pass: the same bytes as one at a time."""
    late = LateAgg()
    late.add(np.array([5_000.0, 7_000.0]), 1_000.0)
    periods: dict[int, list[tuple[int, RolledWindow]]] = {}
    for p in range(4):
        windows = []
        for k in range(6):
            names = ["api", "web"] if (p + k) % 3 else ["web"]  # services come and go
            windows.append(
                (
                    p * M + k * 10 * S,
                    RolledWindow(
                        aggs={
                            s: _agg(100 * p + 10 * k + i, 5 + k).to_bytes()
                            for i, s in enumerate(names)
                        },
                        late={"web|3": late.to_bytes()} if k % 2 else {},
                        stragglers={"web|2": b"1"},
                        duplicates={"api|4": b"2"} if p else {},
                    ),
                )
            )
        periods[p * M] = windows[::-1]
    together = roll_periods(periods, batch_id=9)
    assert list(together) == sorted(periods)
    for p, windows in periods.items():
        assert together[p] == roll_period(windows, batch_id=9)
        in_order = [w for _, w in sorted(windows, key=lambda sw: sw[0])]
        for service in ("api", "web"):
            want = WindowAgg.merged(
                WindowAgg.from_bytes(w.aggs[service]) for w in in_order if service in w.aggs
            )  # the scalar merge, window order
            assert together[p].aggs[service] == want.to_bytes()
        assert LateAgg.count_of(together[p].late["web|-1"]) == 6
