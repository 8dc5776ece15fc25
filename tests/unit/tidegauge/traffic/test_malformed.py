"""Malformed records (tidegauge/traffic/malformed.py): every kind gets the reason it is built for.

The generator's stream of them, and the fuzz rotation, are in test_generator.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.tidegauge.traffic.fixtures import T0
from tidegauge.core.events import Event, Reason, Rejected, parse_record
from tidegauge.traffic.malformed import MALFORMED_KINDS

SAMPLE = {
    "event_id": "0-000000001",
    "event_time": T0,
    "service": "api",
    "user_id": "u000001",
    "latency_ms": 0.0,
    "status": 200,
    "sent_time": T0,
}


@pytest.mark.parametrize(
    ("name", "reason", "build"), MALFORMED_KINDS, ids=[k[0] for k in MALFORMED_KINDS]
)
@pytest.mark.parametrize("service", ["api", "café-☕"])
def test_malformed_kind_gets_its_reason(
    name: str, reason: Reason, build: Any, service: str
) -> None:
    assert parse_record(json.dumps({**SAMPLE, "service": service}).encode()) == Event(
        "0-000000001", T0, service, "u000001", 0.0, 200, T0
    )
    result = parse_record(build({**SAMPLE, "service": service}))
    assert isinstance(result, Rejected)
    assert result.reason is reason, result.detail


def test_malformed_kinds_cover_every_reason() -> None:
    assert {reason for _, reason, _ in MALFORMED_KINDS} == set(Reason)
