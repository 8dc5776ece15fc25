"""JSON access logs read as they are: a field map from a log's own fields to the event contract.

nginx, Envoy and most proxies can write one JSON object per request; Vector, Fluent Bit or
kcat ship those lines to Kafka unchanged. `tidegauge job --format access-log --field ...`
reads them with a map of `TARGET=SOURCE[:UNIT]` entries:

* TARGET is a contract field (`event_time`, `service`, `latency_ms`, `status`, `user_id`,
  `event_id`, `sent_time`, or a registered plugin field);
* SOURCE is the log's key, or a dotted path into nested objects (`timings.total`); a key that
  itself holds dots is found first;
* UNIT says what the log's number means: epoch `s`, `ms`, `us` or `ns` for times (or `iso8601`
  for a string with a zone), a duration in `s`, `ms`, `us` or `ns` for `latency_ms` and other
  float fields. Numbers written as strings (`"request_time":"0.003"`) are read as numbers.

Each record becomes exactly one event or one dead letter, as with the contract's own format:
the mapped values are judged by the contract (tidegauge/core/events.py), and every rejection
names the log field it came from. Without an `event_id` entry each record's id is its Kafka
position (`partition/offset`), and so is that of a line without one: de-duplication then only
drops a record read twice, which is all a log without request ids can promise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tidegauge.core.events import (
    MAX_RECORD_BYTES,
    MAX_TIME_MS,
    MIN_TIME_MS,
    ContractError,
    EventField,
    EventValues,
    Reason,
    Rejected,
    check_values,
    event_fields,
)

__all__ = ["NGINX_FIELDS", "FieldMap", "MapEntry", "UNITS"]

#: The field map of nginx's JSON access log written with the README's `log_format tidegauge`
#: (`$msec`, `$host`, `$request_time`, `$status`, `$remote_user`, `$request_id`).
NGINX_FIELDS = (
    "event_time=msec:s",
    "service=host",
    "latency_ms=request_time:s",
    "status=status",
    "user_id=remote_user",
    "event_id=request_id",
)

#: A unit's factor to milliseconds, for times (epoch) and durations alike.
_TO_MS = {"s": 1_000.0, "ms": 1.0, "us": 1e-3, "ns": 1e-6}

#: Units each contract type takes (the first is what an entry without one means).
UNITS: dict[str, tuple[str, ...]] = {
    "time": ("ms", "s", "us", "ns", "iso8601"),
    "float": ("ms", "s", "us", "ns"),
    "int": ("",),
    "string": ("",),
}

#: Fields a map must give (the contract requires them; event_id has a default).
_REQUIRED = ("event_time", "service")


@dataclass(frozen=True)
class MapEntry:
    """One `TARGET=SOURCE[:UNIT]`: where a contract field comes from and what its unit is."""

    target: str
    source: str
    unit: str = ""

    def text(self) -> str:
        """The entry as written on the command line."""
        return f"{self.target}={self.source}" + (f":{self.unit}" if self.unit else "")


class FieldMapError(ValueError):
    """A field map that cannot work: the message says which entry and why."""


@dataclass(frozen=True)
class FieldMap:
    """A whole map: one entry per mapped contract field, in the order given."""

    entries: tuple[MapEntry, ...]

    @classmethod
    def parse(cls, specs: Sequence[str], fields: Sequence[EventField] | None = None) -> FieldMap:
        """Entries from `TARGET=SOURCE[:UNIT]` texts; FieldMapError on anything unusable."""
        by_name = {f.name: f for f in (event_fields() if fields is None else fields)}
        entries: list[MapEntry] = []
        for spec in specs:
            target, sep, rest = spec.partition("=")
            target = target.strip()
            if not sep or not target or not rest.strip():
                raise FieldMapError(f"--field {spec!r}: expected TARGET=SOURCE[:UNIT]")
            f = by_name.get(target)
            if f is None:
                raise FieldMapError(
                    f"--field {spec!r}: {target!r} is not a contract field "
                    f"(one of {', '.join(by_name)})"
                )
            source, unit = rest, ""
            if ":" in rest:
                source, unit = rest.rsplit(":", 1)
            source, unit = source.strip(), unit.strip()
            if not source:
                raise FieldMapError(f"--field {spec!r}: no source field")
            allowed = UNITS[f.type]
            if unit and unit not in allowed:
                hint = ", ".join(u for u in allowed if u) or "none"
                raise FieldMapError(
                    f"--field {spec!r}: {target} takes the units {hint}, not {unit!r}"
                )
            if any(e.target == target for e in entries):
                raise FieldMapError(f"--field {spec!r}: {target} is mapped twice")
            entries.append(MapEntry(target, source, unit))
        mapped = {e.target for e in entries}
        for name in _REQUIRED:
            if name not in mapped:
                raise FieldMapError(
                    f"--format access-log needs --field {name}=SOURCE (the contract requires "
                    f"{name}; e.g. {_EXAMPLES[name]})"
                )
        return cls(tuple(entries))

    def texts(self) -> list[str]:
        """The entries as `parse` reads them (for the executors, and for messages)."""
        return [e.text() for e in self.entries]

    def to_json(self) -> str:
        """The map as one option string (executors rebuild it with `from_json`)."""
        return json.dumps(self.texts())

    @classmethod
    def from_json(cls, text: str) -> FieldMap:
        """Inverse of `to_json`."""
        return cls.parse(json.loads(text))

    def judge(self) -> Callable[[bytes | None, int, int], EventValues | Rejected]:
        """A function from (record value, partition, offset) to the event's checked values.

        The values are those `parse_values` gives for the contract's own format (check order),
        or a `Rejected` whose detail names the log field at fault.
        """
        by_name = {f.name: f for f in event_fields()}
        plan = [
            (e.target, _path(e.source), _convert(by_name[e.target], e), e.source)
            for e in self.entries
        ]
        source_of = {e.target: e.source for e in self.entries}

        def judge(value: bytes | None, partition: int, offset: int) -> EventValues | Rejected:
            if not value:
                return Rejected(Reason.EMPTY, "record has no value")
            if len(value) > MAX_RECORD_BYTES:
                return Rejected(
                    Reason.TOO_LARGE,
                    f"record is {len(value):,} bytes; the limit is {MAX_RECORD_BYTES:,}",
                )
            try:
                obj = orjson.loads(value)
            except orjson.JSONDecodeError as e:
                return Rejected(Reason.INVALID_JSON, f"not a JSON log line: {e.msg}")
            if type(obj) is not dict:
                return Rejected(
                    Reason.NOT_AN_OBJECT, f"a log line must be a JSON object, got {_kind(obj)}"
                )
            mapped: dict[str, Any] = {}
            try:
                for target, path, convert, source in plan:
                    raw = _lookup(obj, source, path)
                    if raw is not None:
                        mapped[target] = convert(raw)
            except ContractError as e:
                return Rejected(e.reason, e.detail)
            if mapped.get("event_id") is None:  # not mapped, or not in this line
                mapped["event_id"] = f"{partition}/{offset}"
            got = check_values(mapped)
            if isinstance(got, Rejected):
                return Rejected(got.reason, _named(got.detail, source_of))
            return got

        return judge


_EXAMPLES = {
    "event_time": "--field event_time=msec:s for nginx's $msec",
    "service": "--field service=host",
}


def _path(source: str) -> tuple[str, ...]:
    return tuple(source.split("."))


def _lookup(obj: dict[str, Any], source: str, path: tuple[str, ...]) -> Any:
    """The value at `source` (a key, or else a dotted path); None when absent."""
    if source in obj:
        return obj[source]
    if len(path) == 1:
        return None
    node: Any = obj
    for part in path:
        if type(node) is not dict or part not in node:
            return None
        node = node[part]
    return node


def _short(n: float) -> str:
    text = repr(n)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def _kind(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, int | float) else type(v).__name__
    )


def _number(v: Any, target: str, source: str) -> float | int:
    """A JSON number, or a string holding one (many log formats quote every value)."""
    if type(v) is bool or not isinstance(v, int | float | str):
        raise ContractError(
            Reason.WRONG_TYPE, f"{target} (log field {source!r}) must be a number, got {_kind(v)}"
        )
    if isinstance(v, str):
        text = v.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            raise ContractError(
                Reason.WRONG_TYPE,
                f"{target} (log field {source!r}) must be a number, got {v[:64]!r}",
            ) from None
        if not math.isfinite(number):
            raise ContractError(
                Reason.INVALID_VALUE, f"{target} (log field {source!r}) must be finite"
            )
        return number
    return v


def _convert(f: EventField, e: MapEntry) -> Callable[[Any], Any]:
    """The function from a log's value to the value the contract's checker expects."""
    target, source = e.target, e.source
    if f.type == "time":
        if e.unit == "iso8601":

            def iso(v: Any) -> Any:
                if type(v) is not str:
                    raise ContractError(
                        Reason.WRONG_TYPE,
                        f"{target} (log field {source!r}) must be an ISO-8601 string, "
                        f"got {_kind(v)}",
                    )
                return v

            return iso
        factor = _TO_MS[e.unit or "ms"]
        whole = {"us": 1_000, "ns": 1_000_000}.get(e.unit, 0)

        def epoch(v: Any) -> Any:
            if type(v) is str and not e.unit:
                return v  # the contract's own rule: epoch ms or ISO-8601
            n = _number(v, target, source)
            if factor != 1.0 and not MIN_TIME_MS <= n * factor < MAX_TIME_MS:
                raise ContractError(
                    Reason.INVALID_TIME,
                    f"{target} (log field {source!r}) is {_short(n)} {e.unit or 'ms'} since the "
                    "epoch: outside 2000..2100",
                )
            if factor == 1.0:
                return n  # the contract checks whole milliseconds
            if whole and type(n) is int:
                return n // whole  # exact beyond 2**53
            # floored, as the contract floors ISO times (1.2345 s is in 1.234 s's window),
            # after rounding away the float error of the product (1.123 * 1000)
            return math.floor(round(n * factor, 6))

        return epoch
    if f.type == "float":
        factor = _TO_MS[e.unit or "ms"]

        def duration(v: Any) -> Any:
            n = _number(v, target, source)
            # rounded to the ns: a unit's factor adds no digits the log did not have
            return n if factor == 1.0 else round(n * factor, 6)

        return duration
    if f.type == "int":

        def integer(v: Any) -> Any:
            if type(v) is str:
                try:
                    return int(v.strip())
                except ValueError:
                    raise ContractError(
                        Reason.WRONG_TYPE,
                        f"{target} (log field {source!r}) must be an integer, got {v[:64]!r}",
                    ) from None
            return v

        return integer

    def string(v: Any) -> Any:
        # ids and names logged as numbers (a numeric user id) are their decimal text; an empty
        # string is what proxies log for a value they do not have (no user): absent
        return str(v) if type(v) is int else (None if v == "" else v)

    return string


def _named(detail: str, source_of: dict[str, str]) -> str:
    """The contract's detail with the log field it is about: "latency_ms (log field 'x') ..."."""
    for target, source in source_of.items():
        if detail.startswith(target + " ") or detail.startswith(target + ":"):
            return f"{target} (log field {source!r}){detail[len(target) :]}"
        if detail.startswith(target + "="):
            return f"{detail} (log field {source!r})"
    return detail
