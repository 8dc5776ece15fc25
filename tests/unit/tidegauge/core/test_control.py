"""Live demo commands (tidegauge/core/control.py): the control hash parsed, the commands checked."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tidegauge.core.control import (
    DemoCommands,
    Incident,
    LateBurstRequest,
    parse_commands,
)

T0 = 1_800_000_000_000


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, DemoCommands()),
        ({b"pause_until": b"1800000030000"}, DemoCommands(pause_until_ms=T0 + 30_000)),
        (
            {
                "incident_until": "1800000060000",
                "incident_factor": "2.5",
                "incident_service": "api",
            },
            DemoCommands(incident=Incident(T0 + 60_000, 2.5, "api")),
        ),
        (
            {"incident_until": "1800000060000", "incident_where": "region=eu-west-1"},
            DemoCommands(incident=Incident(T0 + 60_000, 5.0, "*", "region", "eu-west-1")),
        ),
        # A value may hold '=': the dimension is what comes before the first one.
        (
            {"incident_until": "1800000060000", "incident_where": "route=/q?a=b"},
            DemoCommands(incident=Incident(T0 + 60_000, 5.0, "*", "route", "/q?a=b")),
        ),
        # A partial incident (a hand-written HSET) takes start_incident's defaults.
        ({b"incident_until": b"1800000060000"}, DemoCommands(incident=Incident(T0 + 60_000, 5.0))),
        # Factor or service without an end: no incident.
        ({"incident_factor": "3", "incident_service": "web"}, DemoCommands()),
        (
            {b"late_burst": b'{"id": 1800000000000, "span_ms": 600000}'},
            DemoCommands(late_burst=LateBurstRequest(T0, 600_000)),
        ),
        # Fields of other tools are left alone.
        ({"pause_until": "5", "someone_elses": "x"}, DemoCommands(pause_until_ms=5)),
    ],
)
def test_parse(fields: dict[Any, Any], expected: DemoCommands) -> None:
    assert parse_commands(fields) == expected


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pause_until": "soon"}, "pause_until is not epoch ms: 'soon'"),
        ({"pause_until": "1.5e12"}, "pause_until is not epoch ms"),
        ({"incident_until": ""}, "incident_until is not epoch ms"),
        ({"incident_until": "1", "incident_factor": "fast"}, "incident_factor is not a number"),
        ({"incident_until": "1", "incident_factor": "0"}, "factor must be a positive number"),
        ({"incident_until": "1", "incident_factor": "-2"}, "factor must be a positive number"),
        ({"incident_until": "1", "incident_factor": "nan"}, "factor must be a positive number"),
        ({"incident_until": "1", "incident_service": ""}, "service must be a service name"),
        ({"late_burst": "{"}, "late_burst is not JSON"),
        ({"late_burst": "[1, 2]"}, "late_burst wants"),
        ({"late_burst": '{"id": 1}'}, "late_burst wants"),
        ({"late_burst": '{"id": "1", "span_ms": 5}'}, "late_burst wants"),
        ({"late_burst": '{"id": 1, "span_ms": 1.5}'}, "late_burst wants"),
        ({"late_burst": '{"id": true, "span_ms": 5}'}, "late_burst wants"),
        ({"late_burst": '{"id": 1, "span_ms": -5}'}, "span must be positive"),
        ({b"pause_until": b"\xff"}, "not UTF-8"),
    ],
)
def test_garbage_is_a_clear_value_error(fields: dict[Any, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_commands(fields)


@pytest.mark.parametrize("factor", [0.0, -1.0, math.inf, math.nan])
def test_incident_factor_must_be_positive_and_finite(factor: float) -> None:
    with pytest.raises(ValueError, match="factor must be a positive number"):
        Incident(T0, factor)


def test_incident_window_and_services() -> None:
    """The incident is in force strictly before its end; `*` matches every service.

    ... T0 - 1 | T0 (until) ...
       active  | over
    """
    every, api = Incident(T0, 5.0), Incident(T0, 5.0, "api")
    assert every.active_at(T0 - 1) and not every.active_at(T0)
    assert every.applies_to("web") and every.applies_to("api")
    assert api.applies_to("api") and not api.applies_to("web") and not api.applies_to("*")


def test_an_incident_narrowed_to_an_attribute() -> None:
    cart = Incident(T0, 5.0, "checkout", "route", "/api/cart")
    assert cart.applies_to("checkout") and not cart.applies_to("search")
    assert cart.matches({"route": "/api/cart", "region": "x"})
    assert not cart.matches({"route": "/"}) and not cart.matches({})
    assert Incident(T0, 5.0).matches({}) and Incident(T0, 5.0).where == ""
    assert cart.where == "route=/api/cart" and cart.describe() == "checkout, route /api/cart"
    assert Incident(T0, 5.0).describe() == "all services"
    for dimension, value in (("route", ""), ("", "/api/cart"), ("a=b", "c")):
        with pytest.raises(ValueError, match="incident attribute must be a dimension and a value"):
            Incident(T0, 5.0, "*", dimension, value)


def test_commands_are_frozen_values() -> None:
    a = DemoCommands(incident=Incident(T0, 2.0), late_burst=LateBurstRequest(1, 2))
    assert a == DemoCommands(incident=Incident(T0, 2.0), late_burst=LateBurstRequest(1, 2))
    with pytest.raises(AttributeError):
        a.pause_until_ms = 1  # type: ignore[misc]
