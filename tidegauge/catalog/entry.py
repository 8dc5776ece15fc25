"""One service's catalog entry: who owns it, how critical it is, what its owners promised.

The catalog is a Kafka topic keyed by service (tidegauge/catalog/topic.py); each record's value
is one entry as JSON, and a null value (a tombstone) removes the service. An entry holds from
its `effective_from` if it says one (a change prepared in git for a release, or recorded after
the fact), else from the record's broker timestamp: the job joins each event to the entry in
force at the event's time (tidegauge/catalog/history.py). The value, with every field optional
but at least one of team, tier or an SLO::

    {"team": "payments", "tier": "1", "tags": {"oncall": "#payments"},
     "slo": {"availability": 99.9, "latency_ms": 800, "latency_target": 99, "period": "30d"},
     "effective_from": "2026-11-27T10:02:00Z"}

Targets are percentages of events: availability counts the events without an error (status
< 500), the latency objective the events under `latency_ms`. Pure: no Kafka.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegauge.core.durations import format_duration, parse_duration, parse_instant, to_iso

__all__ = [
    "DEFAULT_PERIOD_MS",
    "CatalogEntry",
    "Slo",
    "entries_from_toml",
    "parse_effective_from",
]

#: The SLO period when an entry gives none: 30 days, the SRE workbook's usual window.
DEFAULT_PERIOD_MS = 30 * 86_400_000

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")


@dataclass(frozen=True)
class Slo:
    """A service's objectives over a rolling `period_ms`; targets in percent (0, 100)."""

    availability: float | None = None
    latency_ms: float | None = None
    latency_target: float | None = None
    period_ms: int = DEFAULT_PERIOD_MS

    def __post_init__(self) -> None:
        for name in ("availability", "latency_target"):
            target = getattr(self, name)
            if target is not None and not 0 < target < 100:
                raise ValueError(f"slo.{name} is a percentage between 0 and 100, got {target}")
        if (self.latency_ms is None) != (self.latency_target is None):
            raise ValueError("a latency objective needs both slo.latency_ms and slo.latency_target")
        if self.latency_ms is not None and not self.latency_ms > 0:
            raise ValueError(f"slo.latency_ms must be > 0, got {self.latency_ms}")
        if self.availability is None and self.latency_ms is None:
            raise ValueError("an slo needs an availability target or a latency objective")
        if self.period_ms <= 0:
            raise ValueError("slo.period must be > 0")

    def objectives(self) -> dict[str, float]:
        """Objective (`availability`, `latency`) -> its target, for those the SLO has."""
        out = {}
        if self.availability is not None:
            out["availability"] = self.availability
        if self.latency_target is not None:
            out["latency"] = self.latency_target
        return out

    def name(self, objective: str) -> str:
        """How an objective is called: "availability 99.9%", "latency 99% under 800 ms"."""
        target = self.objectives()[objective]
        if objective == "latency":
            return f"latency {target:g}% under {self.latency_ms:g} ms"
        return f"availability {target:g}%"

    def budget(self, target: float) -> float:
        """The error budget of a target: the share of events allowed to be bad (0.1 % -> 0.001)."""
        return 1 - target / 100

    def to_json(self) -> dict[str, Any]:
        """The `slo` member of an entry's JSON."""
        out: dict[str, Any] = {}
        if self.availability is not None:
            out["availability"] = self.availability
        if self.latency_ms is not None:
            out["latency_ms"] = self.latency_ms
            out["latency_target"] = self.latency_target
        out["period"] = format_duration(self.period_ms)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Slo:
        """Parse the `slo` member; ValueError naming the field that is wrong."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"slo must be an object, got {type(obj).__name__}")
        unknown = set(obj) - {"availability", "latency_ms", "latency_target", "period"}
        if unknown:
            raise ValueError(f"slo has unknown fields {sorted(unknown)}")
        period = obj.get("period", format_duration(DEFAULT_PERIOD_MS))
        if not isinstance(period, str):
            raise ValueError(f"slo.period is a duration such as 30d, got {period!r}")
        return cls(
            availability=_number(obj, "availability"),
            latency_ms=_number(obj, "latency_ms"),
            latency_target=_number(obj, "latency_target"),
            period_ms=parse_duration(period),
        )


@dataclass(frozen=True)
class CatalogEntry:
    """What the catalog says of one service from `effective_from_ms` on.

    `effective_from_ms` None: from the time the broker took the record.
    """

    team: str | None = None
    tier: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    slo: Slo | None = None
    effective_from_ms: int | None = None

    def __post_init__(self) -> None:
        for name in ("team", "tier"):
            value = getattr(self, name)
            if value is not None and not _NAME.fullmatch(value):
                raise ValueError(
                    f"{name} {value!r}: letters, digits and . _ : / @ + - only, "
                    "starting with a letter or digit"
                )
        if self.team is None and self.tier is None and self.slo is None:
            raise ValueError("a catalog entry needs a team, a tier or an slo")
        for k, v in self.tags.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError(f"tags are strings, got {k!r}: {v!r}")

    def to_bytes(self) -> bytes:
        """The record value (JSON, keys sorted, so the same entry is the same bytes)."""
        obj: dict[str, Any] = {}
        if self.team is not None:
            obj["team"] = self.team
        if self.tier is not None:
            obj["tier"] = self.tier
        if self.tags:
            obj["tags"] = dict(self.tags)
        if self.slo is not None:
            obj["slo"] = self.slo.to_json()
        if self.effective_from_ms is not None:
            obj["effective_from"] = to_iso(self.effective_from_ms)
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, obj: Any) -> CatalogEntry:
        """Parse one entry; ValueError naming the field that is wrong."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"a catalog entry is a JSON object, got {type(obj).__name__}")
        unknown = set(obj) - {"team", "tier", "tags", "slo", "effective_from"}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        tier = obj.get("tier")
        if isinstance(tier, int) and not isinstance(tier, bool):
            tier = str(tier)
        tags = obj.get("tags", {})
        if not isinstance(tags, Mapping):
            raise ValueError(f"tags must be an object of strings, got {tags!r}")
        effective = obj.get("effective_from")
        if effective is not None and not isinstance(effective, str | int):
            raise ValueError(f"effective_from is an ISO-8601 time or epoch ms, got {effective!r}")
        return cls(
            team=_string(obj, "team"),
            tier=_string({"tier": tier}, "tier"),
            tags={str(k): v for k, v in tags.items()},
            slo=Slo.from_json(obj["slo"]) if obj.get("slo") is not None else None,
            effective_from_ms=parse_effective_from(effective) if effective is not None else None,
        )

    @classmethod
    def from_bytes(cls, value: bytes) -> CatalogEntry:
        """Parse a record value; ValueError saying what is wrong with it."""
        try:
            obj = json.loads(value)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
        return cls.from_json(obj)


def entries_from_toml(text: str) -> dict[str, CatalogEntry]:
    """The entries of a catalog file (what a team keeps in git), one table per service.

    ::

        [services.checkout]
        team = "payments"
        tier = 1
        slo = { availability = 99.9, latency_ms = 800, latency_target = 99, period = "30d" }

    ValueError naming the service and the field that is wrong.
    """
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not TOML: {e}") from None
    services = doc.get("services")
    if not isinstance(services, Mapping) or not services:
        raise ValueError("a catalog file has one [services.NAME] table per service")
    out = {}
    for name, table in services.items():
        if not _NAME.fullmatch(name):
            raise ValueError(f"service name {name!r} is not valid")
        try:
            out[name] = CatalogEntry.from_json(table)
        except ValueError as e:
            raise ValueError(f"[services.{name}]: {e}") from None
    return out


def _string(obj: Mapping[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _number(obj: Mapping[str, Any], name: str) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"slo.{name} must be a number, got {value!r}")
    return float(value)


def parse_effective_from(value: str | int) -> int:
    """An entry's `effective_from` (ISO-8601 with a zone, or epoch ms) in epoch ms."""
    if isinstance(value, int):
        return value
    if "T" not in value:  # not a duration ago: an entry's time does not move with the clock
        raise ValueError(f"effective_from {value!r}: an ISO-8601 time with a zone, or epoch ms")
    return parse_instant(value, 0)
