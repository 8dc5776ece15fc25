"""Retention tiers (tidegauge/core/retention.py): parsing, ages, what each tier covers, reads."""

from __future__ import annotations

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tests.fixtures import D, H, M, S
from tidegauge.core.retention import (
    DEFAULT_RETENTION,
    DEFAULT_RETENTION_SIZE,
    Footprint,
    Layer,
    Retention,
    Tier,
    cover,
    expired,
    fit,
    format_size,
    format_span,
    parse_size,
)
from tidegauge.core.windows import WindowSpec

RAW = WindowSpec.tumbling(10 * S)


def test_the_default_is_six_hours_then_minutes_for_a_week_then_hours_for_a_quarter() -> None:
    r = Retention.parse(DEFAULT_RETENTION)
    assert r == Retention(6 * H, (Tier(M, 7 * D), Tier(10 * M, 7 * D), Tier(H, 90 * D)))
    assert r.text() == DEFAULT_RETENTION and r.longest_ms == 90 * D
    assert [t.spec.key for t in r.tiers] == ["r60000", "r600000", "r3600000"]
    assert WindowSpec.from_key("r60000") == WindowSpec.rollup_of(M) != WindowSpec.tumbling(M)


def test_forever_keeps_everything() -> None:
    r = Retention.parse("forever")
    assert r.raw_ttl_ms is None and r.longest_ms is None and r.text() == "forever"
    assert not expired(0, 10**15, r.raw_ttl_ms)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("6h,1m", "is not SIZE:TTL"),
        ("6h,1m:7d,90s:90d", "whole multiple of the tier before (1m)"),
        ("6h,1h:7d,1m:90d", "whole multiple"),
        ("6h,1m:1h", "(1h) must be kept at least as long as the raw windows (6h)"),
        ("30m,1h:7d", "raw windows (30m) must be kept at least as long as one period"),
        ("0s", "must be positive"),
        ("soon", "not a duration"),
        ("forever,1m:7d", None),
    ],
)
def test_bad_retention_is_refused_with_the_reason(text: str, says: str | None) -> None:
    with pytest.raises(ValueError, match="--retention") as e:
        Retention.parse(text)
    if says:
        assert says in str(e.value)


def test_tiers_must_be_multiples_of_the_rolled_up_window() -> None:
    r = Retention.parse("6h,1m:7d")
    assert r.for_source(10 * S) is r
    with pytest.raises(ValueError, match="multiple of the smallest tumbling --window"):
        r.for_source(7 * S)
    assert r.for_source(None) == Retention(6 * H)  # hopping/session only: raw TTL, no roll-ups


def test_ages_are_event_time_behind_the_watermark() -> None:
    assert not expired(end_ms=10 * H, watermark_ms=16 * H - 1, ttl_ms=6 * H)
    assert expired(end_ms=10 * H, watermark_ms=16 * H, ttl_ms=6 * H)
    assert format_span(90 * D) == "90d" and format_span(H + 30 * M) == "1h30m"


def test_cover_takes_each_part_from_the_finest_tier_holding_it_whole() -> None:
    layers = [
        Layer(RAW),
        Layer(WindowSpec.rollup_of(M), ready_until=2 * H),
        Layer(WindowSpec.rollup_of(H), ready_until=H),
    ]
    # the raw windows hold it all: exactly them, as before retention existed
    keys = [(s.key, start) for s, start in cover(5 * S, 2 * H + 25 * S, layers)]
    assert keys == [("10000", start) for start in range(10 * S, 2 * H + 20 * S, 10 * S)]
    # raw windows gone up to 1h30m30s: minutes up to the first whole minute raw holds
    layers[0] = Layer(RAW, held_after=90 * M + 30 * S)
    keys = [(s.key, start) for s, start in cover(0, 2 * H, layers)]
    assert keys[:91] == [("r60000", k * M) for k in range(91)]
    assert keys[91:] == [("10000", start) for start in range(91 * M, 2 * H, 10 * S)]


def test_cover_at_a_resolution_takes_whole_roll_ups_and_fills_the_edges_from_finer_tiers() -> None:
    layers = [
        Layer(RAW),
        Layer(WindowSpec.rollup_of(M), ready_until=2 * H),
        Layer(WindowSpec.rollup_of(H), ready_until=H),
    ]
    pieces = cover(5 * S, 2 * H + 25 * S, layers, min_size_ms=M)
    keys = [(s.key, start) for s, start in pieces]
    assert keys[:5] == [("10000", 10 * S * k) for k in range(1, 6)]  # [0, 5s) is cut: left out
    assert ("r3600000", 0) not in keys  # starts before the range
    assert keys[5] == ("r60000", M) and keys[63] == ("r60000", 59 * M) and keys[64] == ("r60000", H)
    assert keys[-2:] == [("10000", 2 * H), ("10000", 2 * H + 10 * S)]
    assert len(keys) == 5 + 59 + 60 + 2
    hours = cover(0, 2 * H, layers, min_size_ms=H)
    assert hours[0] == (WindowSpec.rollup_of(H), 0) and len(hours) == 1 + 60


def test_a_ranking_of_an_hour_tiles_it_from_ten_minute_roll_ups_and_finer_ends() -> None:
    from tidegauge.core.store.ranking import RANK_FROM_MS, rank_size

    assert rank_size(H) == 10 * M and rank_size(15 * M) == 150 * S
    assert rank_size(30 * S) == RANK_FROM_MS and rank_size(H, min_size_ms=H) == H
    layers = [
        Layer(RAW),
        Layer(WindowSpec.rollup_of(M), ready_until=3 * H - 2 * M),
        Layer(WindowSpec.rollup_of(10 * M), ready_until=3 * H - 10 * M),
        Layer(WindowSpec.rollup_of(H), ready_until=2 * H),
    ]
    since, until = 2 * H - 3 * M - 50 * S, 3 * H - 3 * M - 50 * S  # an hour, unaligned
    pieces = cover(since, until, layers, rank_size(until - since))
    spans = sorted((start, s.end(start)) for s, start in pieces)
    assert spans[0][0] == since and spans[-1][1] == until  # the hour exactly ...
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))  # ... no gap, twice
    by = {k: sum(1 for s, _ in pieces if s.key == k) for k in ("10000", "r60000", "r600000")}
    assert by == {"10000": 5 + 1, "r60000": 3 + 6, "r600000": 5}
    assert len(pieces) < 30 < len(cover(since, until, layers, RANK_FROM_MS))


def test_cover_skips_what_every_tier_has_dropped() -> None:
    layers = [
        Layer(RAW, held_after=3 * H),
        Layer(WindowSpec.rollup_of(M), held_after=H, ready_until=4 * H),
    ]
    keys = [(s.key, start) for s, start in cover(0, 4 * H, layers)]
    assert keys[0] == ("r60000", H) and keys[119] == ("r60000", 3 * H - M)
    assert keys[120] == ("10000", 3 * H) and len(keys) == 120 + 360


@st.composite
def _layers(draw: st.DrawFn) -> list[Layer]:
    raw_after = draw(st.none() | st.integers(0, 400).map(lambda k: k * 10 * S))
    minute_ready = draw(st.integers(0, 100).map(lambda k: k * M))
    minute_after = draw(st.none() | st.integers(0, 100).map(lambda k: k * M))
    ten_ready = draw(st.integers(0, 10).map(lambda k: k * 10 * M))
    ten_after = draw(st.none() | st.integers(0, 10).map(lambda k: k * 10 * M))
    return [
        Layer(RAW, raw_after),
        Layer(WindowSpec.rollup_of(M), minute_after, minute_ready),
        Layer(WindowSpec.rollup_of(10 * M), ten_after, ten_ready),
    ]


@settings(max_examples=300, deadline=None)
@given(_layers(), st.integers(0, 6000), st.integers(1, 6000))
def test_cover_tiles_exactly_what_some_tier_holds_inside_the_range(
    layers: list[Layer], lo_s: int, span_s: int
) -> None:
    since, until = lo_s * S, (lo_s + span_s) * S
    pieces = cover(since, until, layers)
    slots: list[int] = []
    for spec, start in pieces:
        layer = next(la for la in layers if la.spec == spec)
        assert layer.holds(start) and spec.lies_within(start, since, until)
        slots += range(start, spec.end(start), 10 * S)
    assert len(slots) == len(set(slots)), "pieces overlap"
    # Brute force: a 10 s slot is covered iff some tier holds a window that contains it and
    # lies inside the range.
    for slot in range(-(-since // (10 * S)) * 10 * S, until, 10 * S):
        could = any(
            la.holds(s) and la.spec.lies_within(s, since, until)
            for la in layers
            for s in [slot - slot % la.spec.size_ms]
        )
        assert (slot in set(slots)) == could


def _reads(layers: list[Layer], lo: int, hi: int, min_size: int = 0) -> list[tuple[str, int, int]]:
    from tidegauge.core.retention import plan_reads

    return [(s.key, a, b) for s, a, b in plan_reads(lo, hi, layers, min_size)]


def test_reads_take_each_part_from_the_finest_tier_holding_it() -> None:
    layers = [
        Layer(RAW, held_after=5 * H),
        Layer(WindowSpec.rollup_of(M), held_after=H, ready_until=11 * H + 5 * M),
        Layer(WindowSpec.rollup_of(H), ready_until=11 * H),
    ]
    # raw from the first whole minute it holds, minutes back to the hour they start in, hours
    assert _reads(layers, 0, 12 * H) == [
        ("r3600000", 0, H),
        ("r60000", H, 5 * H),
        ("10000", 5 * H, 12 * H),
    ]
    # a chart of at least 1 h windows: hours while rolled up, then minutes, then 10 s
    assert _reads(layers, 0, 12 * H, H) == [
        ("r3600000", 0, 11 * H),
        ("r60000", 11 * H, 11 * H + 5 * M),
        ("10000", 11 * H + 5 * M, 12 * H),
    ]


@settings(max_examples=300, deadline=None)
@given(_layers(), st.integers(0, 6000), st.integers(1, 6000), st.sampled_from([0, M, 10 * M]))
@example(  # found by CI: the minute tier held nothing of its part and the 10 m tier overlapped
    [
        Layer(RAW, 11 * M),
        Layer(WindowSpec.rollup_of(M), 11 * M, 20 * M),
        Layer(WindowSpec.rollup_of(10 * M), None, 20 * M),
    ],
    0,
    661,
    0,
)
def test_reads_do_not_overlap_and_stay_inside_the_range(
    layers: list[Layer], lo_s: int, span_s: int, min_size: int
) -> None:
    # as the sink leaves them: coarser tiers reach further back and are rolled up less far
    back = [-(10**18) if la.held_after is None else la.held_after for la in layers]
    ready = [10**18 if la.ready_until is None else la.ready_until for la in layers]
    assume(back == sorted(back, reverse=True) and ready == sorted(ready, reverse=True))
    since, until = lo_s * S, (lo_s + span_s) * S
    parts = _reads(layers, since, until, min_size)
    assert all(since <= a < b <= until for _, a, b in parts)
    assert all(p[2] <= q[1] for p, q in zip(parts, parts[1:], strict=False)), parts
    if layers[0].held_after is None:  # the raw tier holds everything: it answers to the end
        assert parts and parts[-1][2] == until


# --- a byte budget (`--retention-size`) -------------------------------------------------------

GB = 1 << 30


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2GB", 2 * GB),
        ("2g", 2 * GB),
        ("1.5GiB", 3 * GB // 2),
        ("512MB", 512 << 20),
        ("800k", 800 << 10),
    ],
)
def test_sizes_read_as_people_write_them(text: str, size: int) -> None:
    assert parse_size(text) == size
    assert parse_size(format_size(size)) == size


@pytest.mark.parametrize("text", ["none", "0", "off"])
def test_no_budget(text: str) -> None:
    assert parse_size(text) is None


@pytest.mark.parametrize("text", ["2 parsecs", "-1GB", "GB", "0.0MB"])
def test_a_size_that_is_not_one_says_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="such as 2GB"):
        parse_size(text)


def _demo(services: int) -> list[Footprint]:
    """The demo's windows' measured bytes (BENCHMARKS.md, bench_store) for so many services."""
    per = [
        Footprint(10 * S, 877),  # 10 s windows
        Footprint(10 * S, 2_832),  # a 60 s sliding window, a row per 10 s
        Footprint(M, 2_286, 0),  # 1 m roll-ups
        Footprint(10 * M, 4_292, 1),  # 10 m roll-ups
        Footprint(H, 7_556, 2),  # 1 h roll-ups
        Footprint(10 * S, 205),  # arrivals, processing time
        Footprint(10 * S, 205),  # arrivals, broker time
    ]
    return [Footprint(f.step_ms, f.bytes * services, f.tier) for f in per]


def _held(r: Retention, services: int) -> float:
    """Bytes once full, counted window by window: what each TTL keeps, times its size."""
    assert r.raw_ttl_ms is not None
    per_service = r.raw_ttl_ms // (10 * S) * (877 + 2_832 + 205 + 205)
    for tier, window_bytes in zip(r.tiers, (2_286, 4_292, 7_556), strict=True):
        assert tier.ttl_ms is not None
        per_service += tier.ttl_ms // tier.size_ms * window_bytes
    return float(per_service * services)


def test_a_store_that_fits_keeps_the_retention_as_set() -> None:
    default = Retention.parse(DEFAULT_RETENTION)
    assert _held(default, 10) < 0.5 * GB  # ten services: 90 days of hours fit in 2 GB
    assert fit(default, _demo(10), parse_size(DEFAULT_RETENTION_SIZE)) == default
    assert fit(default, _demo(1_000), None) == default
    forever = Retention.parse("forever")
    assert fit(forever, _demo(1_000), 2 * GB) == forever


@pytest.mark.parametrize("services", [100, 1_000, 3_000])
def test_a_larger_store_shortens_every_ttl_by_one_factor_to_fit(services: int) -> None:
    default = Retention.parse(DEFAULT_RETENTION)
    assert _held(default, services) > 2 * GB
    got = fit(default, _demo(services), 2 * GB)
    got.check()  # still a valid retention: each tier outlives the next one's period
    assert 0.95 * 2 * GB <= _held(got, services) <= 2 * GB  # as much as fits
    ttls = [got.raw_ttl_ms] + [t.ttl_ms for t in got.tiers]
    wanted = [default.raw_ttl_ms] + [t.ttl_ms for t in default.tiers]
    factors = [g / w for g, w in zip(ttls, wanted, strict=True) if g is not None and w]
    assert max(factors) < 1 and max(factors) - min(factors) < 0.05  # one factor, rounded
    assert [t.size_ms for t in got.tiers] == [M, 10 * M, H]


def test_a_budget_too_small_for_any_useful_retention_keeps_the_shortest_one() -> None:
    got = fit(Retention.parse(DEFAULT_RETENTION), _demo(100_000), 2 * GB)
    # a minute of raw windows, ten minutes of minutes (a period of the next tier), an hour of
    # 10 minutes (a period of the hour tier), an hour's more
    assert got.text() == "1m,1m:10m,10m:1h,1h:1h"
    assert _held(got, 100_000) > 2 * GB


@given(st.floats(min_value=0.0001, max_value=1.0))
def test_scaling_never_breaks_the_tiers_shape(factor: float) -> None:
    default = Retention.parse(DEFAULT_RETENTION)
    got = default.scaled(factor)
    got.check()
    assert got.raw_ttl_ms is not None and got.raw_ttl_ms <= 6 * H
    assert all(g.ttl_ms <= d.ttl_ms for g, d in zip(got.tiers, default.tiers, strict=True))
