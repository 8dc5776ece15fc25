"""Error budget arithmetic, by hand-worked examples (the SRE workbook's numbers)."""

from __future__ import annotations

import pytest

from tidegauge.catalog.budget import BURN_RULES, Budget, burn_rate

DAY = 86_400_000
MONTH = 30 * DAY


def test_the_workbook_rates_for_a_30_day_slo_and_scaled_for_7_days() -> None:
    assert [r.rate(MONTH) for r in BURN_RULES] == pytest.approx([14.4, 6.0, 1.0])
    assert [r.rate(7 * DAY) for r in BURN_RULES] == pytest.approx([3.36, 1.4, 0.2333333])
    assert [(r.severity, r.long_ms // 60_000, r.short_ms // 60_000) for r in BURN_RULES] == [
        ("page", 60, 5),
        ("page", 360, 30),
        ("ticket", 4320, 360),
    ]


def test_burn_rate_is_the_bad_share_over_the_allowance() -> None:
    # 99.9 %: 1 bad in 1,000 allowed; 144 bad in 10,000 is 14.4 times that
    assert burn_rate(10_000, 144, 99.9) == pytest.approx(14.4)
    assert burn_rate(10_000, 10, 99.9) == pytest.approx(1.0)
    assert burn_rate(0, 0, 99.9) is None


def test_a_budget_consumed_left_and_when_it_runs_out() -> None:
    b = Budget(target=99.0, period_ms=MONTH, events=100_000, bad=250)  # 0.25 % of a 1 % budget
    assert b.sli == pytest.approx(99.75)
    assert b.consumed == pytest.approx(0.25) and b.left == pytest.approx(0.75)
    # burning at 3x from now: the 75 % left lasts 0.75 * 30 d / 3 = 7.5 days
    assert b.exhausted_in_ms(3.0) == pytest.approx(7.5 * DAY)
    assert b.exhausted_in_ms(0.0) is None and b.exhausted_in_ms(None) is None
    spent = Budget(target=99.0, period_ms=MONTH, events=1_000, bad=20)
    assert spent.left == pytest.approx(-1.0) and spent.exhausted_in_ms(1.0) == 0.0
    assert Budget(99.0, MONTH, 0, 0).sli is None and Budget(99.0, MONTH, 0, 0).left == 1.0


def test_a_rule_needs_both_windows_burning() -> None:
    fast = BURN_RULES[0]
    assert fast.fires(MONTH, long_burn=burn_rate(10_000, 144, 99.9), short_burn=20.0)
    assert not fast.fires(MONTH, long_burn=20.0, short_burn=2.0)  # it stopped: no page
    assert not fast.fires(MONTH, long_burn=2.0, short_burn=50.0)  # a blip: no page
    assert not fast.fires(MONTH, long_burn=None, short_burn=50.0)


@pytest.mark.parametrize(
    ("target", "events", "bad", "says"),
    [
        (100.0, 1, 0, "between 0 and 100"),
        (99.0, 5, 6, "between 0 and events"),
        (99.0, 5, -1, "between 0"),
    ],
)
def test_impossible_budgets_are_refused(target: float, events: int, bad: int, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Budget(target, MONTH, events, bad)
