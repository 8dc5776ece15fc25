"""Durations and instants (tidegauge/core/durations.py): the one place text becomes ms."""

from __future__ import annotations

import calendar
import random

import pytest

from tidegauge.core.durations import format_duration, parse_duration, parse_instant, to_iso

SECOND, MINUTE, HOUR, DAY = 1_000, 60_000, 3_600_000, 86_400_000

# 2026-11-22T10:00:00Z, the injected "now" for relative instants.
NOW = calendar.timegm((2026, 11, 22, 10, 0, 0)) * 1000


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("10s", 10 * SECOND),
        ("1sec", SECOND),
        ("1m", MINUTE),
        ("5min", 5 * MINUTE),
        ("2h", 2 * HOUR),
        ("1d", DAY),
        ("1m30s", 90 * SECOND),
        ("1h2m3s4ms", HOUR + 2 * MINUTE + 3 * SECOND + 4),
        ("1s500ms", 1_500),
        ("1m1ms", MINUTE + 1),  # "m" followed by "1ms", not "ms"
        ("1.5s", 1_500),
        ("0.25s", 250),
        ("10 s", 10 * SECOND),  # space between a number and its unit
        ("  10s\n", 10 * SECOND),  # surrounding whitespace
        ("10S", 10 * SECOND),  # units are case-insensitive
        ("30MS", 30),
        ("1h1h", 2 * HOUR),  # repeated parts add up
        ("0s", 0),
        ("0", 0),
        ("10", 10 * SECOND),  # a bare number is seconds
        ("2.5", 2_500),
        ("0.0001s", 0),  # rounds to whole milliseconds
    ],
)
def test_parse_duration(text: str, ms: int) -> None:
    got = parse_duration(text)
    assert got == ms
    assert type(got) is int


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "s",
        "ms",
        "-5s",  # durations are never negative
        "+5s",
        "1e3",
        "5mins",
        "5secs",
        "5 minutes",
        "1m 30s",  # no space between parts
        "1m,30s",
        "10x",
        "s10",
        "nan",
        "inf",
        "1.s",
        ".5s",
        "PT10S",  # ISO-8601 durations are not accepted
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration: .*use e\.g\. 250ms, 10s, 1m30s"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (1, "1ms"),
        (999, "999ms"),
        (1_000, "1s"),
        (1_500, "1s500ms"),
        (60_000, "1m"),
        (60_001, "1m1ms"),
        (61_000, "1m1s"),
        (90_000, "1m30s"),
        (HOUR, "1h"),
        (DAY, "24h"),  # no day unit in the output: hours are what people read in dashboards
        (HOUR + 2 * MINUTE + 3 * SECOND + 4, "1h2m3s4ms"),
        (-5_000, "-5s"),  # printable, but not parseable: durations in config are >= 0
    ],
)
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration(ms) == text


@pytest.mark.parametrize(
    "ms",
    [0, 1, 999, 1_000, 1_001, 59_999, 60_000, 60_001, HOUR - 1, HOUR, DAY, DAY + 1, 10**12 + 7],
)
def test_round_trip_table(ms: int) -> None:
    assert parse_duration(format_duration(ms)) == ms


def test_round_trip_random() -> None:
    rng = random.Random(3)
    for _ in range(20_000):
        ms = rng.choice([rng.randrange(2_000), rng.randrange(HOUR), rng.randrange(10**12)])
        assert parse_duration(format_duration(ms)) == ms, ms


@pytest.mark.parametrize("text", ["250ms", "10s", "1m30s", "2h", "1h2m3s4ms"])
def test_canonical_text_round_trips(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


def test_negative_is_formatted_but_not_parsed() -> None:
    # format_duration is total over ints; parse_duration only accepts durations >= 0.
    with pytest.raises(ValueError):
        parse_duration(format_duration(-1))


# --- instants -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        # epoch ms: 11 digits or more (so "15" or a bare seconds count is a duration)
        ("1795341600000", NOW),
        ("10000000000", 10_000_000_000),
        ("-1795341600000", -NOW),
        (" 1795341600000 ", NOW),
        # ISO-8601 with a zone, converted to UTC
        ("2026-11-22T10:00:00Z", NOW),
        ("2026-11-22T10:00:00.250Z", NOW + 250),
        ("2026-11-22T12:00:00+02:00", NOW),
        ("2026-11-22T04:30:00-05:30", NOW),
        ("2026-11-22 10:00:00+00:00", NOW),
        # a duration means that long before now
        ("15m", NOW - 15 * MINUTE),
        ("1h30m", NOW - 90 * MINUTE),
        ("0s", NOW),
        ("10", NOW - 10 * SECOND),  # bare number: seconds ago
        ("1700000000", NOW - 1_700_000_000 * SECOND),  # 10 digits: seconds ago, not epoch
    ],
)
def test_parse_instant(text: str, ms: int) -> None:
    assert parse_instant(text, now_ms=NOW) == ms


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("2026-11-22T10:00:00", "has no time zone"),
        ("2026-11-22", "has no time zone"),
        ("yesterday", "not a time"),
        ("", "not a time"),
        ("-15m", "not a time"),
        ("2026-13-01T00:00:00Z", "not a time"),
    ],
)
def test_parse_instant_rejects(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_instant(text, now_ms=NOW)


def test_parse_instant_uses_injected_clock_only() -> None:
    assert parse_instant("1s", now_ms=5_000) == 4_000
    assert parse_instant("1s", now_ms=0) == -1_000


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (NOW, "2026-11-22T10:00:00.000Z"),
        (NOW + 123, "2026-11-22T10:00:00.123Z"),
        (NOW + 999, "2026-11-22T10:00:00.999Z"),
    ],
)
def test_to_iso(ms: int, text: str) -> None:
    assert to_iso(ms) == text


def test_to_iso_round_trips_through_parse_instant() -> None:
    rng = random.Random(11)
    # The whole contract range and some of 1970 either side; float division must not lose a ms.
    samples = [rng.randrange(-(10**12), 4_102_444_800_000) for _ in range(20_000)]
    samples += [946_684_800_000, 4_102_444_799_999, 1, -1]
    for ms in samples:
        assert parse_instant(to_iso(ms), now_ms=0) == ms, ms
