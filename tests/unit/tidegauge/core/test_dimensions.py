"""Dimensions (tidegauge/core/dimensions.py): names, values, slices and the Space-Saving summary."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegauge.core.dimensions import (
    SEP,
    Dimension,
    SpaceSaving,
    dimension_values,
    member,
    parse_dimensions,
    register_dimension_fields,
    slice_group,
    split_group,
    split_member,
    status_classes,
)
from tidegauge.core.events import EventField, event_fields, register_field, unregister_field


def test_dimension_names_and_combinations() -> None:
    assert Dimension.parse("route") == Dimension("route", ("route",))
    assert Dimension.parse(" route + method ") == Dimension("route+method", ("route", "method"))
    assert Dimension.parse("http.route").fields() == ("http.route",)
    assert Dimension.parse("status_class+region").fields() == ("region",)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Route", "not a field name"),
        ("route+", "not a field name"),
        ("route+route", "twice"),
        ("latency_ms", "metrics are computed from"),
        ("service", "metrics are computed from"),
    ],
)
def test_a_bad_dimension_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Dimension.parse(text)


def test_a_dimension_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="given twice"):
        parse_dimensions(["route", "region", "route"])


def test_dimension_fields_are_optional_strings_registered_once() -> None:
    before = len(event_fields())
    try:
        got = register_dimension_fields([Dimension.parse("route+method")])
        again = register_dimension_fields([Dimension.parse("route")])
        assert [f.name for f in got] == ["route", "method"]
        assert again == got[:1]
        assert len(event_fields()) == before + 2
        assert all(not f.required and f.type == "string" for f in got)
    finally:
        unregister_field("route")
        unregister_field("method")


def test_a_numeric_field_cannot_be_a_dimension() -> None:
    register_field(EventField("bytes_sent", "float"))
    try:
        with pytest.raises(ValueError, match="not a string"):
            register_dimension_fields([Dimension.parse("bytes_sent")])
    finally:
        unregister_field("bytes_sent")


def test_status_classes() -> None:
    got = status_classes(np.array([200, 204, 301, 404, 500, 599, -1, 0, 600, 99]))
    assert got.tolist() == ["2xx", "2xx", "3xx", "4xx", "5xx", "5xx", None, None, None, None]


def test_values_of_one_field_a_derived_one_and_a_combination() -> None:
    strings = {
        "route": np.array(["/a", None, "", "/b"], dtype=object),
        "method": np.array(["GET", "POST", "GET", None], dtype=object),
    }
    status = np.array([200, 503, -1, 404])
    assert dimension_values(Dimension.parse("route"), strings, status).tolist() == [
        "/a",
        None,
        None,
        "/b",
    ]
    assert dimension_values(Dimension.parse("status_class"), strings, status).tolist() == [
        "2xx",
        "5xx",
        None,
        "4xx",
    ]
    both = dimension_values(Dimension.parse("route+method"), strings, status)
    assert both.tolist() == ["/a GET", None, None, None]  # a combination needs every part


def test_slice_and_member_names_round_trip() -> None:
    name = slice_group("checkout", "route", "/cart=1")
    assert split_group(name) == ("checkout", "route", "/cart=1")
    assert split_group("checkout") is None
    assert split_member(member("*", "a b")) == ("*", "a b")
    assert SEP not in "checkout"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20)), min_size=1, max_size=300),
    st.integers(2, 12),
)
def test_space_saving_bounds_hold_for_any_stream(
    stream: list[tuple[int, int]], capacity: int
) -> None:
    """Every value over N / capacity is counted; each count overestimates by <= its error."""
    summary = SpaceSaving(capacity)
    truth: Counter[str] = Counter()
    for value, weight in stream:
        summary.add({f"v{value}": weight})
        truth[f"v{value}"] += weight
    n = sum(truth.values())
    assert len(summary.counts) <= capacity
    for v, count in summary.counts.items():
        error = summary.errors[v]
        assert count - error <= truth[v] <= count, v
        assert error <= n / capacity
    for v, w in truth.items():
        if w > n / capacity:
            assert v in summary.counts, v
    # the top ranks by guaranteed weight: a value ranked is at least as heavy as its bound
    for v in summary.top(3):
        assert truth[v] >= summary.counts[v] - summary.errors[v] > 0


def test_a_flood_of_one_off_values_does_not_push_out_the_busy_ones() -> None:
    """10,000 unique URLs against three busy routes, 80 counters (20 values kept, the default).

    The busy ones weigh more than N / 80 (137 of 11,000), so they keep their counters, and they
    rank first: a one-off value's weight is guaranteed only up to 1.
    """
    summary = SpaceSaving(80)
    summary.add({"/cart": 500, "/search": 300, "/login": 200})
    for i in range(10_000):  # unique URLs: each seen once
        summary.add({f"/item/{i}": 1})
    assert summary.top(20)[:3] == ["/cart", "/search", "/login"]
    assert len(summary.top(20)) == 20  # the rest of the top are one-offs: weight 1 guaranteed
    small = SpaceSaving(8)  # 8 counters: 200 is below N / 8, and the bound says so
    small.add({"/cart": 500, "/search": 300, "/login": 200})
    for i in range(10_000):
        small.add({f"/item/{i}": 1})
    assert "/login" not in small.top(3)


def test_halving_ages_the_counts_and_a_round_trip_keeps_them() -> None:
    summary = SpaceSaving(4)
    summary.add({"a": 9, "b": 1, "c": 4})
    summary.halve()
    assert summary.counts == {"a": 4, "c": 2}  # "b" at 0 is let go
    back = SpaceSaving.from_json(4, summary.to_json())
    assert (back.counts, back.errors) == (summary.counts, summary.errors)


@pytest.mark.parametrize("seed", range(5))
def test_on_a_zipf_stream_the_values_kept_are_the_busiest(seed: int) -> None:
    """Routes with Zipf-distributed traffic (1,000 of them, exponent 1.2, ~194,000 events),
    counted in 100 batches as the job counts them, 80 counters: every value over N / 80 is
    counted (the bound), the 10 busiest are all kept, and at least 18 of the 20 kept are the 20
    busiest (the rest are the next ones: the 20th and 21st are a few events apart)."""
    rng = np.random.default_rng(seed)
    values = rng.zipf(1.2, 200_000)
    values = values[values <= 1_000]
    summary = SpaceSaving(80)
    truth: Counter[str] = Counter()
    for batch in np.array_split(values, 100):
        counts = Counter(f"/r{v}" for v in batch.tolist())
        truth.update(counts)
        summary.add(dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))))
    n = sum(truth.values())
    ranked = [v for v, _ in sorted(truth.items(), key=lambda kv: (-kv[1], kv[0]))]
    assert {v for v in ranked if truth[v] > n / 80} <= set(summary.counts)
    kept = summary.top(20)
    assert set(ranked[:10]) <= set(kept)
    assert len(set(kept) & set(ranked[:20])) >= 18
    assert set(kept) <= set(ranked[:30])
