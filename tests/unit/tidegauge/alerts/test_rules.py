"""Alert rules and the three states of a firing (tidegauge/alerts/rules.py), without Redis."""

from __future__ import annotations

import random

import pytest

from tests.fixtures import T as T0
from tidegauge.alerts.rules import (
    Firing,
    Rule,
    State,
    advance,
    batch_points,
    evaluate,
    load_rules,
    ongoing,
    parse_rule,
    window_points,
)
from tidegauge.core.store.records import WindowRow

pytestmark = pytest.mark.unit

S = 10_000  # window size, ms


def row(
    i: int, p99: float | None, *, closed: bool, service: str = "api", n: int = 100
) -> WindowRow:
    start = T0 + i * S
    return WindowRow(start, start + S, service, n, n / 10, p99=p99, closed=closed, spec="10s")


# --- rules ---------------------------------------------------------------------------------


def test_command_line_rules_read_as_written() -> None:
    r = parse_rule("p99 > 800 for 3 on api")
    assert (r.metric, r.op, r.threshold, r.windows, r.service) == ("p99", ">", 800.0, 3, "api")
    assert parse_rule("error_rate > 5% on *").threshold == pytest.approx(0.05)
    assert parse_rule("freshness > 2s for 5 batches").threshold == 2000.0
    assert parse_rule("freshness > 2s").metric == "freshness_p99"
    assert parse_rule("p99.9 >= 1500 for 2 windows").metric == "p999"
    assert parse_rule("events/s < 1 for 6 on checkout").op == "<"
    assert parse_rule("p99 > 800 for 3 on api").describe() == "p99 > 800 for 3 windows on api"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("p99 800", "expected METRIC OP THRESHOLD"),
        ("latency > 800", "unknown metric 'latency'"),
        ("p99 > 800 for 0", "at least 1 window"),
        ("p99 = 800", "expected METRIC OP THRESHOLD"),
    ],
)
def test_a_bad_rule_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_rule(text)


def test_rules_file_in_both_forms() -> None:
    rules = load_rules(
        """
[[rule]]
name = "api slow"
when = "p99 > 800 for 3 on api"

[[rule]]
name = "errors"
metric = "error_rate"
op = ">"
threshold = 0.05
for = 2
window = "1m"
"""
    )
    assert [r.name for r in rules] == ["api slow", "errors"]
    assert rules[0].windows == 3 and rules[0].service == "api"
    assert rules[1].service == "*" and rules[1].spec == "1m" and rules[1].windows == 2
    assert rules[0].key != rules[1].key
    assert Rule("renamed", "p99", ">", 800, 3, "api").key == rules[0].key  # names may change


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[[rule]]\nname='a'\nmetric='p99'\n", "missing op, threshold"),
        ("[[rule]]\nname='a'\nwhen='p99 > 1'\ncolour='red'\n", "unknown keys colour"),
        (
            "[[rule]]\nname='a'\nwhen='p99 > 1'\n[[rule]]\nname='a'\nwhen='p50 > 1'\n",
            "share a name",
        ),
        ("[[rule]\n", "not TOML"),
    ],
)
def test_a_bad_rules_file_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        load_rules(text)


# --- evaluation ----------------------------------------------------------------------------

RULE = Rule("slow", "p99", ">", 800, 3, "api")


def test_n_breaching_windows_fire_provisional_until_n_of_them_are_closed() -> None:
    values = [100, 900, 950, 990, 100]
    open_from = 3  # windows 3 and 4 are still open
    rows = [row(i, v, closed=i < open_from) for i, v in enumerate(values)]
    (f,) = evaluate(RULE, window_points(RULE, rows))
    assert (f.state, f.start, f.end, f.windows, f.closed, f.peak) == (
        "provisional",
        T0 + S,
        T0 + 4 * S,
        3,
        2,
        990.0,
    )
    rows = [row(i, v, closed=True) for i, v in enumerate(values)]
    (f,) = evaluate(RULE, window_points(RULE, rows))
    assert f.state == "confirmed"


def test_a_run_shorter_than_n_or_broken_by_a_gap_does_not_fire() -> None:
    rows = [row(i, 900, closed=True) for i in (0, 1, 3, 4)]  # window 2 has no events
    assert evaluate(RULE, window_points(RULE, rows)) == []
    other = [row(i, 900, closed=True, service="web") for i in range(5)]
    assert evaluate(RULE, window_points(RULE, other)) == []  # another service's windows


def test_silence_counts_as_windows_of_zero_events() -> None:
    quiet = Rule("quiet", "events_per_s", "<", 1, 3, "api")
    rows = [row(0, 1, closed=True), row(5, 1, closed=True)]  # windows 1-4 have no events
    (f,) = evaluate(quiet, window_points(quiet, rows, watermark_ms=T0 + 6 * S))
    assert (f.start, f.end, f.windows, f.state) == (T0 + S, T0 + 5 * S, 4, "confirmed")


def test_batch_rules_are_final_at_once() -> None:
    rule = parse_rule("freshness > 2s for 2")
    batches = [
        {"batch_id": i, "batch_time": T0 + i * 1000, "batch_duration_ms": 700,
         "freshness": {"p99_ms": v}}
        for i, v in enumerate([900, 2500, 3100, 1200])
    ]  # fmt: skip
    (f,) = evaluate(rule, batch_points(rule, batches))
    assert (f.state, f.start, f.windows, f.peak) == ("confirmed", T0 + 1000, 2, 3100.0)


def brute_force_runs(breach: list[bool], closed: list[bool], n: int) -> list[tuple[int, str]]:
    out, i = [], 0
    while i < len(breach):
        if not breach[i]:
            i += 1
            continue
        j = i
        while j < len(breach) and breach[j]:
            j += 1
        if j - i >= n:
            state = "confirmed" if sum(closed[i:j]) >= n else "provisional"
            out.append((i, state))
        i = j
    return out


def test_evaluation_equals_a_brute_force_scan_of_random_series() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 4)
        length = rng.randint(0, 30)
        values = [rng.choice([None, 100.0, 900.0, 900.0]) for _ in range(length)]
        first_open = rng.randint(0, length)
        rows = [row(i, v, closed=i < first_open) for i, v in enumerate(values)]
        rule = Rule("r", "p99", ">", 800, n, "api")
        got = [
            (int((f.start - T0) // S), f.state) for f in evaluate(rule, window_points(rule, rows))
        ]
        breach = [v is not None and v > 800 for v in values]
        assert got == brute_force_runs(breach, [i < first_open for i in range(length)], n)


# --- states over time ----------------------------------------------------------------------


def step(
    known: list[Firing], rows: list[WindowRow], now: int, rule: Rule = RULE
) -> tuple[list[Firing], list[Firing]]:
    found = evaluate(rule, window_points(rule, rows))
    return advance(known, found, rule, oldest=T0, now_ms=now)


def test_stragglers_pushing_a_window_over_and_back_cause_one_notice_per_state() -> None:
    # window 2 is the third of the run; stragglers move its p99 over and under while it is open
    history = [900, 700, 905, 650, 910]  # p99 of window 2 after each batch
    notices: list[tuple[str, str]] = []
    known: list[Firing] = []
    for t, p99 in enumerate(history):
        rows = [row(0, 900, closed=True), row(1, 950, closed=True), row(2, p99, closed=False)]
        known, changed = step(known, rows, now=t)
        notices += [(f.id, f.state) for f in changed]
    assert [s for _, s in notices] == ["provisional", "retracted"]  # no fire/resolve stream
    # the watermark closes window 2 over the threshold: the retracted firing is confirmed
    rows = [row(0, 900, closed=True), row(1, 950, closed=True), row(2, 910, closed=True)]
    known, changed = step(known, rows, now=99)
    assert [f.state for f in changed] == ["confirmed"] and len(known) == 1
    assert set(known[0].since) == {"provisional", "retracted", "confirmed"}
    assert len({i for i, _ in notices} | {known[0].id}) == 1  # one firing throughout


def test_a_provisional_firing_whose_window_closes_under_is_retracted_for_good() -> None:
    known, changed = step([], [row(0, 900, closed=True), row(1, 900, closed=True),
                               row(2, 900, closed=False)], now=1)  # fmt: skip
    assert [f.state for f in changed] == ["provisional"]
    rows = [row(0, 900, closed=True), row(1, 900, closed=True), row(2, 500, closed=True)]
    known, changed = step(known, rows, now=2)
    assert [f.state for f in changed] == ["retracted"]
    known, changed = step(known, rows, now=3)
    assert changed == [] and [f.state for f in known] == ["retracted"]


def test_evaluating_again_changes_nothing_and_a_growing_run_keeps_its_identity() -> None:
    rows = [row(i, 900, closed=True) for i in range(3)]
    known, changed = step([], rows, now=1)
    assert [f.state for f in changed] == ["confirmed"]
    again, changed = step(known, rows, now=2)
    assert changed == [] and again == known  # a restarted evaluator re-sends nothing
    longer = [*rows, row(3, 1200, closed=True)]
    grown, changed = step(again, longer, now=3)
    assert changed == [] and len(grown) == 1
    assert grown[0].id == known[0].id and grown[0].windows == 4 and grown[0].peak == 1200.0
    # a straggler moving the run's start earlier keeps the firing too
    earlier = [row(-1, 990, closed=True), *longer]
    moved, changed = step(grown, earlier, now=4)
    assert changed == [] and moved[0].id == known[0].id and moved[0].start == T0 - S


def test_firings_older_than_what_was_read_are_kept_as_they_are() -> None:
    old = Firing("k", "slow", "api", T0 - 100 * S, T0 - 97 * S, "provisional", 900.0, 3, 2, id="x")
    known, changed = advance([old], [], RULE, oldest=T0, now_ms=5)
    assert known == [old] and changed == []


def test_a_firing_survives_a_round_trip_through_its_dict() -> None:
    (f,) = evaluate(RULE, window_points(RULE, [row(i, 900, closed=True) for i in range(3)]))
    assert Firing.from_dict(f.to_dict()) == f


def test_ongoing_firings_are_the_unretracted_ones_reaching_the_newest_windows() -> None:
    def firing(end_i: int, state: State) -> Firing:
        return Firing(
            "k", "r", "api", T0, T0 + end_i * S, state, 1.0, end_i, 0, id=f"{end_i}{state}"
        )

    fs = [firing(10, "confirmed"), firing(10, "retracted"), firing(3, "confirmed"),
          firing(9, "provisional")]  # fmt: skip
    got = ongoing(fs, newest_end_ms=T0 + 10 * S, slack_ms=2 * S)
    assert [f.id for f in got] == ["10confirmed", "9provisional"]
