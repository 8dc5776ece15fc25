"""Live demo commands in Redis: what the dashboard's demo buttons ask the running pipeline to do.

Every command lives in one hash, `Keys(prefix).control` (`{prefix}:control`), one group of fields
per command. Each request is one HSET, so a reader never sees half a command:

| Field | Value | Who acts on it |
|---|---|---|
| `pause_until` | epoch ms | the job's Kafka source takes no new offsets until then |
| `incident_until` | epoch ms | `tidegauge produce --live-commands`: latencies of matching events |
| `incident_factor` | float > 0 | ... are multiplied by this while the wall clock is before |
| `incident_service` | a service or `*` | ... `incident_until` (`*`: every service) |
| `incident_where` | `dimension=value` or "" | ... and only those with it (`route=/api/cart`) |
| `late_burst` | JSON `{"id": ms, "span_ms": ms}` | the generator sends one late burst per new id |

Times are epoch milliseconds (UTC) of the *requester's* wall clock (`now_ms`, injected so tests
control it); the generator and the job compare them with their own wall clocks, so the machines
must agree on the time, as they do in `tidegauge demo`. Writers call the `request_*`/`start_*`
functions here; readers call `read_commands`. Nothing here runs in Spark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidegauge.core.store.annotations import Annotation, write_annotation
from tidegauge.core.store.keys import ALL_SERVICES, ControlFields

if TYPE_CHECKING:  # only names for annotations: importing this module stays cheap
    import redis

    from tidegauge.core.store import Keys

__all__ = [
    "ALL_SERVICES",
    "DemoCommands",
    "INCIDENT_DIMENSIONS",
    "Incident",
    "LateBurstRequest",
    "parse_commands",
    "read_commands",
    "request_late_burst",
    "request_pause",
    "start_incident",
]


# Field names of the control hash (docs/events.md, "Live commands"): the key layout owns them.
_PAUSE_UNTIL = ControlFields.PAUSE_UNTIL
_INCIDENT_UNTIL = ControlFields.INCIDENT_UNTIL
_INCIDENT_FACTOR = ControlFields.INCIDENT_FACTOR
_INCIDENT_SERVICE = ControlFields.INCIDENT_SERVICE
_INCIDENT_WHERE = ControlFields.INCIDENT_WHERE
_LATE_BURST = ControlFields.LATE_BURST


#: What an incident can be narrowed to: the attributes of the generator's requests
#: (`tidegauge.traffic.attributes.RequestAttributes`), as `--dimension` names them.
INCIDENT_DIMENSIONS = ("route", "method", "region", "version")


@dataclass(frozen=True)
class Incident:
    """Latencies of `service` (or of all, `*`) are `factor` times higher until `until_ms`.

    `until_ms` is epoch ms (UTC); `factor` is a plain multiplier (5.0: five times slower).
    `dimension` and `value` narrow it to the requests with that attribute (`route`,
    `/api/cart`): one endpoint or one region failing is what a breakdown is there to find.
    """

    until_ms: int
    factor: float
    service: str = ALL_SERVICES
    dimension: str = ""
    value: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.factor) or self.factor <= 0:
            raise ValueError(f"incident factor must be a positive number, got {self.factor}")
        if not self.service:
            raise ValueError("incident service must be a service name or '*', got ''")
        if bool(self.dimension) != bool(self.value) or "=" in self.dimension:
            raise ValueError(
                f"incident attribute must be a dimension and a value, got "
                f"{self.dimension!r} = {self.value!r}"
            )

    @property
    def where(self) -> str:
        """`dimension=value`, or "" when the incident is not narrowed to an attribute."""
        return f"{self.dimension}={self.value}" if self.dimension else ""

    def applies_to(self, service: str) -> bool:
        """True when events of `service` are slowed down (`matches` narrows it further)."""
        return self.service == ALL_SERVICES or self.service == service

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """True when these attributes hold `dimension=value` (always, when it names none)."""
        return not self.dimension or attributes.get(self.dimension) == self.value

    def describe(self) -> str:
        """`all services`, `checkout`, `route /api/cart`, `checkout, route /api/cart`."""
        who = [] if self.service == ALL_SERVICES else [self.service]
        if self.dimension:
            who.append(f"{self.dimension} {self.value}")
        return ", ".join(who) or "all services"

    def active_at(self, now_ms: int) -> bool:
        """True while `now_ms` (epoch ms) is before the end of the incident."""
        return now_ms < self.until_ms


@dataclass(frozen=True)
class LateBurstRequest:
    """One request for a late burst: `span_ms` of buffered events, sent at once.

    `id` is the request's epoch ms; the generator sends one burst per id it has not seen, so
    re-reading the same request never repeats the burst.
    """

    id: int
    span_ms: int

    def __post_init__(self) -> None:
        if self.span_ms <= 0:
            raise ValueError(f"late burst span must be positive ms, got {self.span_ms}")


@dataclass(frozen=True)
class DemoCommands:
    """Everything the control hash asks for right now; None where nothing was requested.

    A pause or incident whose end has passed is still reported (it is what the hash holds):
    use `Incident.active_at` / compare `pause_until_ms` with the clock to know if it is in force.
    """

    pause_until_ms: int | None = None
    incident: Incident | None = None
    late_burst: LateBurstRequest | None = None


def _positive_ms(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive whole number of ms, got {value!r}")


def _check_now(now_ms: int) -> None:
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise ValueError(f"now_ms must be epoch ms >= 0, got {now_ms!r}")


def request_pause(r: redis.Redis, keys: Keys, now_ms: int, pause_ms: int = 30_000) -> int:
    """Pause the job for `pause_ms` from `now_ms`, so a backlog builds up it then catches up on.

    Same field and meaning as `--scenario backlog`. Returns `pause_until` (epoch ms).
    """
    _check_now(now_ms)
    _positive_ms("pause_ms", pause_ms)
    until = now_ms + pause_ms
    r.hset(keys.control, _PAUSE_UNTIL, until)
    label = f"backlog: job paused {pause_ms // 1000:g} s"
    write_annotation(r, keys, Annotation("backlog", label, "processing", now_ms, until))
    return until


def start_incident(
    r: redis.Redis,
    keys: Keys,
    now_ms: int,
    duration_ms: int = 60_000,
    factor: float = 5.0,
    service: str = ALL_SERVICES,
    where: tuple[str, str] | None = None,
) -> Incident:
    """Make `service` (`*`: all) `factor` times slower for `duration_ms`, to show a latency spike.

    `where` = (dimension, value) narrows it to one route, region or version. Replaces any
    incident in progress. Its fields go in one HSET, so the generator never reads the end of one
    incident with the factor of another. Returns the incident written.
    """
    _check_now(now_ms)
    _positive_ms("duration_ms", duration_ms)
    dimension, value = where or ("", "")
    incident = Incident(now_ms + duration_ms, float(factor), service, dimension, value)
    r.hset(
        keys.control,
        mapping={
            _INCIDENT_UNTIL: incident.until_ms,
            _INCIDENT_FACTOR: repr(incident.factor),
            _INCIDENT_SERVICE: incident.service,
            _INCIDENT_WHERE: incident.where,
        },
    )
    label = f"incident: {incident.describe()} {incident.factor:g}x slower"
    write_annotation(
        r, keys, Annotation("incident", label, "event", now_ms, incident.until_ms, service)
    )
    return incident


def request_late_burst(
    r: redis.Redis, keys: Keys, now_ms: int, span_ms: int = 3_600_000
) -> LateBurstRequest:
    """Ask for one device to come back online with `span_ms` of buffered events (a late burst).

    The request's id is `now_ms`: a later request replaces this one, and the generator acts on
    each id once. Requests less than the generator's poll interval (about 1 s) apart may merge
    into one. Returns the request written.
    """
    _check_now(now_ms)
    _positive_ms("span_ms", span_ms)
    request = LateBurstRequest(id=now_ms, span_ms=span_ms)
    value = json.dumps({"id": request.id, "span_ms": request.span_ms}, separators=(",", ":"))
    r.hset(keys.control, _LATE_BURST, value)
    label = f"late burst sent ({span_ms // 60_000:g} min of buffered events)"
    write_annotation(r, keys, Annotation("late_burst", label, "processing", now_ms, now_ms))
    return request


def read_commands(r: redis.Redis, keys: Keys) -> DemoCommands:
    """The commands the control hash holds (one HGETALL); raises ValueError on garbage."""
    raw: Any = r.hgetall(keys.control)
    return parse_commands(raw)


def parse_commands(fields: Mapping[Any, Any]) -> DemoCommands:
    """The commands in the control hash's `fields` (bytes or str); raises ValueError on garbage.

    Missing fields mean "not requested". An incident needs `incident_until`; a missing factor or
    service falls back to `start_incident`'s defaults (5.0, `*`). Fields this module does not
    know are ignored, so other tools may keep their own fields in the hash.
    """
    f = {_text(k): _text(v) for k, v in fields.items()}
    pause = _int_field(f, _PAUSE_UNTIL)
    incident = None
    until = _int_field(f, _INCIDENT_UNTIL)
    if until is not None:
        factor_text = f.get(_INCIDENT_FACTOR, "5.0")
        try:
            factor = float(factor_text)
        except ValueError:
            raise ValueError(
                f"control field {_INCIDENT_FACTOR} is not a number: {factor_text!r}"
            ) from None
        dimension, _, value = f.get(_INCIDENT_WHERE, "").partition("=")
        try:
            incident = Incident(
                until, factor, f.get(_INCIDENT_SERVICE, ALL_SERVICES), dimension, value
            )
        except ValueError as e:
            raise ValueError(f"control fields incident_*: {e}") from None
    burst = None
    if _LATE_BURST in f:
        burst = _parse_burst(f[_LATE_BURST])
    return DemoCommands(pause_until_ms=pause, incident=incident, late_burst=burst)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"control hash holds bytes that are not UTF-8: {value!r}") from None
    return str(value)


def _int_field(f: Mapping[str, str], name: str) -> int | None:
    if name not in f:
        return None
    try:
        return int(f[name])
    except ValueError:
        raise ValueError(f"control field {name} is not epoch ms: {f[name]!r}") from None


def _parse_burst(text: str) -> LateBurstRequest:
    try:
        obj = json.loads(text)
    except ValueError:
        raise ValueError(f"control field late_burst is not JSON: {text!r}") from None
    ok = isinstance(obj, dict) and all(
        isinstance(obj.get(k), int) and not isinstance(obj[k], bool) for k in ("id", "span_ms")
    )
    if not ok:
        raise ValueError(
            f'control field late_burst wants {{"id": <epoch ms>, "span_ms": <ms>}}, got {text!r}'
        )
    try:
        return LateBurstRequest(id=obj["id"], span_ms=obj["span_ms"])
    except ValueError as e:
        raise ValueError(f"control field late_burst: {e}") from None
