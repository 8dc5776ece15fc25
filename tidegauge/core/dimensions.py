"""Dimensions: the attributes an event's metrics are sliced by besides its service.

`tidegauge job --dimension route --dimension region --dimension status_class` (or a combination,
`route+method`) makes every window hold, for each dimension, the aggregates of each of its values
inside each service and across all services (`*`): the same counts, percentiles, distinct
users, late rows, stragglers and duplicates that services have, under the same time rules.

How a value reaches a slice (docs/dimensions.md):

* A dimension's parts are event fields: an optional string field of the contract named like the
  part (`{"route": "/cart"}`), an OpenTelemetry attribute (`http.route`, or one of the aliases
  below), or a log field mapped with `--field route=uri`. `status_class` is derived from
  `status` ("2xx" ... "5xx"). An event without a value for a dimension is not in its slices.
* The job keeps a slice as a group of its own, named `service SEP dimension SEP value`
  (`*` for all services): each is summarised, de-duplicated and windowed exactly like a service.
* Cardinality is bounded per (service, dimension): a Space-Saving summary (`SpaceSaving`) of the
  values seen keeps the busiest `values` of them in slices of their own, and the rest go to
  the value `(other)`, so a flood of unique URLs cannot grow state or Redis. Every event of a
  service is in exactly one of its values (or has none), so the values add up to the service.
* The sink writes a dimension's slices to a store of their own (`Keys.by(dimension)`), where
  each member is `service SEP value`: every reader of services reads values the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tidegauge.core.events import ALL_SERVICES, EventField, event_fields, register_field

__all__ = [
    "ATTRIBUTE_ALIASES",
    "DEFAULT_VALUES",
    "DERIVED",
    "OTHER_VALUE",
    "SEP",
    "Dimension",
    "SpaceSaving",
    "dimension_values",
    "member",
    "parse_dimensions",
    "register_dimension_fields",
    "slice_group",
    "split_group",
    "split_member",
]

#: Separates a slice group's parts (service, dimension, value) and a store member's (service,
#: value): a control character no name of the contract holds.
SEP = "\x1f"
#: The value the events of a (service, dimension) beyond its busiest values count under.
OTHER_VALUE = "(other)"
#: Values kept in slices of their own per (service, dimension) by default (`--dimension-values`).
DEFAULT_VALUES = 20
#: Dimension parts computed from the contract's own fields, not read from the event.
DERIVED = ("status_class",)
#: OpenTelemetry attributes a part also reads (semantic conventions; newest name first). Any
#: other part reads the attribute of its own name (`--dimension http.route` works too).
ATTRIBUTE_ALIASES: Mapping[str, tuple[str, ...]] = {
    "route": ("http.route",),
    "method": ("http.request.method", "http.method"),
    "region": ("cloud.region",),
    "zone": ("cloud.availability_zone",),
    "version": ("service.version",),
    "environment": ("deployment.environment.name", "deployment.environment"),
    "host": ("host.name",),
    "namespace": ("service.namespace",),
}
_PART = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")
#: The longest value kept; longer ones are cut (values become Redis fields and chart labels).
MAX_VALUE = 256


@dataclass(frozen=True)
class Dimension:
    """One `--dimension`: its name and the event fields (parts) its value is made of."""

    name: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Dimension:
        """`route`, `status_class`, `route+method`; ValueError with the rule broken."""
        parts = tuple(p.strip() for p in text.strip().split("+"))
        for p in parts:
            if not _PART.match(p):
                raise ValueError(
                    f"--dimension {text!r}: {p!r} is not a field name (lower case letters, "
                    "digits, '_' and '.', starting with a letter; join several with '+')"
                )
        if len(set(parts)) != len(parts):
            raise ValueError(f"--dimension {text!r} names a field twice")
        for p in parts:
            if p in _CONTRACT_NAMES:
                raise ValueError(
                    f"--dimension {text!r}: {p!r} is a field metrics are computed from, not a "
                    "dimension (status_class slices by status)"
                )
        return cls("+".join(parts), parts)

    def fields(self) -> tuple[str, ...]:
        """The event fields it reads (its parts, less the derived ones)."""
        return tuple(p for p in self.parts if p not in DERIVED)


#: Fields of the contract itself: they are not dimensions.
_CONTRACT_NAMES = frozenset(
    ("event_id", "event_time", "service", "user_id", "sent_time", "latency_ms", "status")
)


def parse_dimensions(texts: Sequence[str]) -> tuple[Dimension, ...]:
    """Every `--dimension`, in order; ValueError for a bad or repeated one."""
    dims = tuple(Dimension.parse(t) for t in texts)
    names = [d.name for d in dims]
    for n in names:
        if names.count(n) > 1:
            raise ValueError(f"--dimension {n} is given twice")
    return dims


def field_column(part: str) -> str:
    """The parsed rows' column of a dimension part's event field."""
    return "dim_" + re.sub(r"[^a-z0-9_]", "_", part)


def register_dimension_fields(dims: Iterable[Dimension]) -> list[EventField]:
    """Make every part of `dims` an optional string field of the contract (once per process).

    A part that already is a field (a plugin's) is read as it is. Returns the fields.
    """
    have = {f.name: f for f in event_fields()}
    out: list[EventField] = []
    for d in dims:
        for part in d.fields():
            f = have.get(part)
            if f is None:
                f = register_field(
                    EventField(
                        part,
                        "string",
                        column=field_column(part),
                        max_length=MAX_VALUE,
                        doc=f"a dimension's value (--dimension {d.name})",
                    )
                )
                have[part] = f
            elif f.type != "string":
                raise ValueError(
                    f"--dimension {d.name}: field {part!r} is a {f.type}, not a string"
                )
            out.append(f)
    return out


def attribute_keys(part: str) -> tuple[str, ...]:
    """The OpenTelemetry attributes a part reads, in order of preference."""
    return (*ATTRIBUTE_ALIASES.get(part, ()), part)


def status_classes(status: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """Each status's class, "2xx" to "5xx" (None without one, or outside 100-599)."""
    out = np.full(len(status), None, dtype=object)
    known = (status >= 100) & (status < 600)
    for c in range(1, 6):
        out[known & (status // 100 == c)] = f"{c}xx"
    return out


def dimension_values(
    dim: Dimension, strings: Mapping[str, npt.NDArray[Any]], status: npt.NDArray[np.int64]
) -> npt.NDArray[Any]:
    """Each event's value of `dim` (None: the event has none), from its fields' columns.

    `strings`: the event field columns by field name (object arrays, None = absent). A
    combination's value joins its parts' values with " " and needs every one of them.
    """
    cols = [
        status_classes(status) if p in DERIVED else np.asarray(strings[p], dtype=object)
        for p in dim.parts
    ]
    if len(cols) == 1:
        return _clean(cols[0])
    out = np.full(len(status), None, dtype=object)
    have = np.ones(len(status), dtype=bool)
    for c in cols:
        have &= _present(c)
    if have.any():
        out[have] = [" ".join(vs) for vs in zip(*(c[have] for c in cols), strict=True)]
    return out


def _present(col: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    return np.array([isinstance(v, str) and v != "" for v in col], dtype=bool)


def _clean(col: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Empty strings and non-strings (NaN of a missing column) are no value."""
    ok = _present(col)
    if ok.all():
        return col
    out = np.full(len(col), None, dtype=object)
    out[ok] = col[ok]
    return out


def slice_group(service: str, dim: str, value: str) -> str:
    """The job's group of one (service or `*`, dimension, value)."""
    return f"{service}{SEP}{dim}{SEP}{value}"


def split_group(name: str) -> tuple[str, str, str] | None:
    """(service, dimension, value) of a slice group; None for a service's own name."""
    if SEP not in name:
        return None
    service, dim, value = name.split(SEP, 2)
    return service, dim, value


def member(service: str, value: str) -> str:
    """A slice's member name in its dimension's store."""
    return f"{service}{SEP}{value}"


def split_member(name: str) -> tuple[str, str]:
    """(service or `*`, value) of a member of a dimension's store."""
    service, _, value = name.partition(SEP)
    return service, value


def is_total(name: str) -> bool:
    """Whether a dimension store's member is a value across all services."""
    return name.startswith(ALL_SERVICES + SEP)


@dataclass
class SpaceSaving:
    """The Space-Saving summary (Metwally, Agrawal, El Abbadi 2005) of weighted values.

    At most `capacity` counters. A value seen that has none takes a free one, or the smallest
    one, inheriting its count as its `error`. For a stream of total weight N, every value whose
    weight exceeds N / capacity holds a counter, and each counter's count overestimates its
    value's weight by at most its `error` <= N / capacity (tests/unit/test_dimensions.py).
    `top(k)` ranks by the guaranteed weight (count - error), so values that only inherited a
    count (a flood of one-off values) rank last. Deterministic: ties break by value.
    """

    capacity: int
    counts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, weights: Mapping[str, int]) -> None:
        """Count each value's weight (in the order given: a batch's values, sorted)."""
        for value, w in weights.items():
            if value in self.counts:
                self.counts[value] += w
            elif len(self.counts) < self.capacity:
                self.counts[value] = w
                self.errors[value] = 0
            else:
                low = min(self.counts, key=lambda v: (self.counts[v], v))
                floor = self.counts.pop(low)
                self.errors.pop(low)
                self.counts[value] = floor + w
                self.errors[value] = floor

    def top(self, k: int) -> list[str]:
        """The `k` values of the largest guaranteed weight (at least 1)."""
        ranked = sorted(
            ((c - self.errors[v], v) for v, c in self.counts.items() if c > self.errors[v]),
            key=lambda t: (-t[0], t[1]),
        )
        return [v for _, v in ranked[:k]]

    def halve(self) -> None:
        """Age the summary: every count and error halved (values at 0 let go)."""
        for v in list(self.counts):
            self.counts[v] //= 2
            self.errors[v] //= 2
            if not self.counts[v]:
                del self.counts[v], self.errors[v]

    def to_json(self) -> list[list[Any]]:
        """[[value, count, error], ...] in value order."""
        return [[v, self.counts[v], self.errors[v]] for v in sorted(self.counts)]

    @classmethod
    def from_json(cls, capacity: int, rows: Sequence[Sequence[Any]]) -> SpaceSaving:
        """Inverse of `to_json`."""
        out = cls(capacity)
        for v, c, e in rows:
            out.counts[str(v)] = int(c)
            out.errors[str(v)] = int(e)
        return out
