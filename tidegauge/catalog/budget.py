"""Error budgets and burn rates: the arithmetic of an SLO over counts of good and bad events.

An SLO of target T % over a period P allows a fraction `1 - T/100` of the period's events to be
bad: that is the **error budget**. Over any span of events, the **burn rate** is the bad fraction
divided by that allowance: 1 spends the budget exactly by the end of the period, 14.4 spends a
30-day budget's 2 % in one hour. Alerts on burn rate follow the SRE workbook's multiwindow,
multi-burn-rate recipe (`BURN_RULES`): a rule fires when both its long window (how much budget
went) and its short window (is it still going) burn at least its rate, so a short blip pages
no one and a page stops soon after the burning does. Pure: counts in, figures out.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BURN_RULES", "BurnRule", "Budget", "burn_rate"]

_HOUR = 3_600_000


def burn_rate(events: int, bad: int, target: float) -> float | None:
    """The bad fraction of `events` over the budget's allowance; None without events."""
    if events <= 0:
        return None
    allowed = 1 - target / 100
    return (bad / events) / allowed


@dataclass(frozen=True)
class Budget:
    """An SLO's standing over a span of its period: `events` measured, `bad` of them."""

    target: float
    period_ms: int
    events: int
    bad: int

    def __post_init__(self) -> None:
        if not 0 < self.target < 100:
            raise ValueError(f"target is a percentage between 0 and 100, got {self.target}")
        if self.bad < 0 or self.events < self.bad:
            raise ValueError(
                f"bad events ({self.bad}) must be between 0 and events ({self.events})"
            )

    @property
    def sli(self) -> float | None:
        """The share of good events, in percent (None without events)."""
        return None if not self.events else 100 * (self.events - self.bad) / self.events

    @property
    def burn_rate(self) -> float | None:
        """Bad fraction over the allowance (see the module docstring)."""
        return burn_rate(self.events, self.bad, self.target)

    @property
    def consumed(self) -> float:
        """Share of the period's budget these events used, if they are the period's events."""
        rate = self.burn_rate
        return 0.0 if rate is None else rate

    @property
    def left(self) -> float:
        """Share of the budget left (negative once overspent)."""
        return 1 - self.consumed

    def exhausted_in_ms(self, current_burn: float | None) -> float | None:
        """How long until the budget left is gone at `current_burn`.

        None: never at this pace; 0: already gone.
        """
        if self.left <= 0:
            return 0.0
        if current_burn is None or current_burn <= 0:
            return None
        return self.left * self.period_ms / current_burn


@dataclass(frozen=True)
class BurnRule:
    """Fire when the burn over `long_ms` and over `short_ms` are both at least the rule's rate.

    The rate is the one that spends `budget_share` of the period's budget in `long_ms`:
    `budget_share * period / long_ms` (14.4 for 2 % in 1 h of 30 days).
    """

    name: str
    severity: str
    budget_share: float
    long_ms: int
    short_ms: int

    def rate(self, period_ms: int) -> float:
        """The burn rate this rule fires at, for an SLO of `period_ms`."""
        return self.budget_share * period_ms / self.long_ms

    def fires(self, period_ms: int, long_burn: float | None, short_burn: float | None) -> bool:
        """Both windows burn at least the rule's rate (a window without events does not)."""
        threshold = self.rate(period_ms)
        return (
            long_burn is not None
            and short_burn is not None
            and long_burn >= threshold - _EPSILON * threshold
            and short_burn >= threshold - _EPSILON * threshold
        )


#: Relative tolerance of the rate comparison: 14.4 computed from counts lands a hair below.
_EPSILON = 1e-9

#: The SRE workbook's pairs for a 30-day SLO (their rates scale with the period).
BURN_RULES = (
    BurnRule("fast burn", "page", 0.02, _HOUR, 5 * 60_000),
    BurnRule("slow burn", "page", 0.05, 6 * _HOUR, 30 * 60_000),
    BurnRule("budget leak", "ticket", 0.10, 72 * _HOUR, 6 * _HOUR),
)
