"""What traffic `tidegauge produce` makes (tidegauge/traffic/config.py): checks, flag parsers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.tidegauge.traffic.fixtures import T0
from tidegauge.traffic.config import GeneratorConfig, parse_latency, parse_services


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"rate": 0}, "--rate"),
        ({"seed": -1}, "--seed"),
        ({"count": 0}, "--count"),
        ({"duration_ms": 0}, "--duration"),
        ({"count": 5, "duration_ms": 5}, "--duration or --count"),
        ({"pace": "slow"}, "--pace"),
        ({"pace": "realtime", "start_time_ms": T0}, "--start-time"),
        ({"start_time_ms": 1_700_000_000}, "--start-time"),
        ({"partitions": 0}, "--partitions"),
        ({"services": ()}, "--services"),
        ({"services": (("a", 1.0), ("a", 2.0))}, "--services"),
        ({"services": (("a", 0.0),)}, "--services"),
        ({"users": 0}, "--users"),
        ({"zipf": -1}, "--zipf"),
        ({"latency": (("nope", 1.0, 0.1),)}, "--latency"),
        ({"latency": (("api", 0.0, 0.1),)}, "--latency"),
        ({"latency": (("api", 1.0, -0.1),)}, "--latency"),
        ({"anonymous_fraction": 1.5}, "--anonymous-fraction"),
        ({"error_rate": -0.1}, "--error-rate"),
        ({"iso_fraction": float("nan")}, "--iso-fraction"),
        ({"out_of_order_fraction": 0.6, "late_fraction": 0.6}, "--late-fraction"),
        ({"out_of_order_fraction": 0.1, "max_delay_ms": 0}, "--max-delay"),
        ({"late_fraction": 0.1, "lateness_ms": 0}, "--lateness"),
        ({"max_skew_ms": -1}, "--max-skew"),
        ({"duplicate_fraction": 2}, "--duplicate-fraction"),
        ({"malformed_fraction": -1}, "--malformed-fraction"),
        ({"heartbeat_interval_ms": -1}, "--heartbeat-interval"),
        ({"heartbeat_tail_ms": -1}, "--heartbeat-tail"),
        ({"heartbeat_tail_ms": 1_000, "heartbeat_interval_ms": 0}, "--heartbeat-tail needs"),
        ({"network_delay_ms": -1}, "--network-delay"),
        ({"scenarios": ("nope",)}, "--scenario: unknown 'nope'"),
        ({"scenarios": ("late-burst", "late-burst")}, "--scenario names a scenario twice"),
        ({"scenarios": ("skewed-clocks",)}, "skewed-clocks needs --skew-fraction > 0"),
        ({"scenarios": ("skewed-clocks",), "skew_fraction": 0.3, "max_skew_ms": 0}, "--max-skew"),
        ({"burst_at_ms": -1}, "--burst-at"),
        ({"burst_span_ms": 0}, "--burst-span must be positive"),
        ({"burst_rate": 0.0}, "--burst-rate"),
        ({"burst_rate": float("inf")}, "--burst-rate"),
        ({"burst_span_ms": 400, "burst_rate": 1.0}, "at least one event"),
        ({"scenarios": ("late-burst",), "users": 100}, "--users > 100"),
        ({"scenarios": ("backlog",)}, "backlog needs --pace realtime"),
        ({"backlog_at_ms": -5}, "--backlog-at"),
        ({"backlog_pause_ms": 0}, "--backlog-pause"),
    ],
)
def test_config_rejects(kwargs: dict[str, Any], flag: str) -> None:
    kwargs = {"pace": "fast", **kwargs}
    with pytest.raises(ValueError, match=flag):
        GeneratorConfig(**kwargs)


def test_config_is_frozen() -> None:
    cfg = GeneratorConfig()
    with pytest.raises(AttributeError):
        cfg.rate = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api:5,web:3", (("api", 5.0), ("web", 3.0))),
        (" api : 2 , db", (("api", 2.0), ("db", 1.0))),
    ],
)
def test_parse_services(text: str, expected: tuple[tuple[str, float], ...]) -> None:
    assert parse_services(text) == expected


@pytest.mark.parametrize("text", ["", "api:x", ","])
def test_parse_services_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="--services"):
        parse_services(text)


def test_parse_latency() -> None:
    assert parse_latency("api=40:0.6,web=120") == (("api", 40.0, 0.6), ("web", 120.0, 0.6))
    for bad in ("api", "api=x", "api=1:y"):
        with pytest.raises(ValueError, match="--latency"):
            parse_latency(bad)
