"""Catalog entries: the record value's JSON, the TOML file teams keep, and clear errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegauge.catalog.entry import DEFAULT_PERIOD_MS, CatalogEntry, Slo, entries_from_toml

CHECKOUT = CatalogEntry(
    team="payments",
    tier="1",
    tags={"oncall": "#payments"},
    slo=Slo(availability=99.9, latency_ms=800, latency_target=99, period_ms=7 * 86_400_000),
    effective_from_ms=1_795_000_000_000,
)


def test_an_entry_is_the_same_after_its_bytes() -> None:
    assert CatalogEntry.from_bytes(CHECKOUT.to_bytes()) == CHECKOUT
    assert json.loads(CHECKOUT.to_bytes()) == {
        "team": "payments",
        "tier": "1",
        "tags": {"oncall": "#payments"},
        "slo": {"availability": 99.9, "latency_ms": 800, "latency_target": 99, "period": "168h"},
        "effective_from": "2026-11-18T11:06:40.000Z",
    }


def test_a_tier_may_be_a_number_and_the_period_defaults_to_30_days() -> None:
    entry = CatalogEntry.from_json({"tier": 2, "slo": {"availability": 99.5}})
    assert entry.tier == "2" and entry.team is None
    assert entry.slo is not None and entry.slo.period_ms == DEFAULT_PERIOD_MS
    assert entry.slo.budget(99.5) == pytest.approx(0.005)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({}, "needs a team, a tier or an slo"),
        ({"team": "a b"}, "team 'a b'"),
        ({"team": 7}, "team must be a string"),
        ({"owner": "x", "team": "a"}, "unknown fields ['owner']"),
        ({"slo": {"availability": 100}}, "between 0 and 100"),
        ({"slo": {"latency_ms": 800}}, "needs both slo.latency_ms and slo.latency_target"),
        ({"slo": {"availability": "99.9"}}, "slo.availability must be a number"),
        ({"slo": {"period": "a month"}}, "not a duration"),
        ({"slo": {}}, "needs an availability target or a latency objective"),
        ({"team": "a", "effective_from": "15m"}, "ISO-8601 time with a zone"),
        ({"team": "a", "effective_from": "2026-11-27T10:00:00"}, "no time zone"),
        ({"team": "a", "tags": {"k": 1}}, "tags are strings"),
        ([1], "a JSON object"),
    ],
)
def test_a_bad_value_says_which_field(value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=None) as e:
        CatalogEntry.from_bytes(json.dumps(value).encode())
    assert says in str(e.value)


@given(st.binary(max_size=200))
def test_any_bytes_are_an_entry_or_a_value_error(value: bytes) -> None:
    try:
        entry = CatalogEntry.from_bytes(value)
    except ValueError:
        return
    assert CatalogEntry.from_bytes(entry.to_bytes()) == entry


def test_a_catalog_file_has_one_table_per_service() -> None:
    entries = entries_from_toml(
        """
        [services.checkout]
        team = "payments"
        tier = 1
        slo = { availability = 99.9, latency_ms = 800, latency_target = 99, period = "30d" }

        [services.search]
        team = "discovery"
        tags = { lang = "go" }
        """
    )
    assert entries["checkout"].slo == Slo(99.9, 800, 99, DEFAULT_PERIOD_MS)
    assert entries["search"] == CatalogEntry(team="discovery", tags={"lang": "go"})
    with pytest.raises(ValueError, match=r"\[services.search\]: slo.availability"):
        entries_from_toml('[services.search]\nslo = { availability = "high" }')
    with pytest.raises(ValueError, match="one \\[services.NAME\\] table"):
        entries_from_toml('team = "x"')
    with pytest.raises(ValueError, match="not TOML"):
        entries_from_toml("[services")
