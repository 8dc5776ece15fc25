"""What the records on the topic are: the contract's own JSON, access logs or OTLP spans.

`tidegauge job --format` picks one; `RecordFormat` holds it with its settings (an access log's
field map, the span kinds of OTLP), travels to the executors as one option string, and gives
the parser its decoder (jobs/parse/parser.py). The contract's own records keep the parser's
bulk path; every other format is decoded record by record into the contract's values, so the
same rules judge every event whatever it arrived as (docs/events.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidegauge.core.events import EventValues, Rejected
from tidegauge.core.field_map import FieldMap
from tidegauge.core.otlp import DEFAULT_SPAN_KINDS, SPAN_KINDS
from tidegauge.core.otlp import decoder as otlp_decoder

__all__ = ["DEFAULT_SPAN_KINDS", "FORMATS", "Decoder", "RecordFormat", "SPAN_KINDS"]

#: The formats `tidegauge job --format` reads.
FORMATS = ("tidegauge", "access-log", "otlp_proto", "otlp_json")

#: A record's value and Kafka position -> its events' checked values and its dead letters, in
#: order (an access log line gives one; an OTLP message one per span of the kinds asked for).
Decoder = Callable[[bytes | None, int, int], list[EventValues | Rejected]]


@dataclass(frozen=True)
class RecordFormat:
    """A format and its settings."""

    name: str = "tidegauge"
    field_map: FieldMap | None = None
    span_kinds: tuple[str, ...] = DEFAULT_SPAN_KINDS

    @classmethod
    def parse(
        cls, name: str, fields: Sequence[str] = (), span_kinds: Sequence[str] = ()
    ) -> RecordFormat:
        """From the job's flags; ValueError naming the flag when they do not fit together."""
        if name not in FORMATS:
            raise ValueError(f"--format {name!r}: one of {', '.join(FORMATS)}")
        if fields and name != "access-log":
            raise ValueError("--field maps a log's fields: it needs --format access-log")
        if span_kinds and not name.startswith("otlp"):
            raise ValueError("--span-kind picks OTLP spans: it needs --format otlp_proto|otlp_json")
        for kind in span_kinds:
            if kind not in SPAN_KINDS:
                raise ValueError(f"--span-kind {kind!r}: one of {', '.join(SPAN_KINDS)}")
        field_map = FieldMap.parse(fields) if name == "access-log" else None
        kinds = tuple(dict.fromkeys(span_kinds)) or DEFAULT_SPAN_KINDS
        return cls(name, field_map, kinds if name.startswith("otlp") else DEFAULT_SPAN_KINDS)

    @property
    def own(self) -> bool:
        """The contract's own records (the parser's bulk path)."""
        return self.name == "tidegauge"

    def describe(self) -> str:
        """For the job's start line: '' for the contract's own records."""
        if self.field_map is not None:
            return f"access log: {' '.join(self.field_map.texts())}"
        if self.name.startswith("otlp"):
            return f"{self.name} spans of kind {', '.join(self.span_kinds)}"
        return ""

    def to_json(self) -> str:
        """One option string for the executors (`from_json` reads it)."""
        return json.dumps(
            {
                "name": self.name,
                "fields": self.field_map.texts() if self.field_map else [],
                "spanKinds": list(self.span_kinds) if self.name.startswith("otlp") else [],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> RecordFormat:
        """Inverse of `to_json`."""
        obj = json.loads(text)
        return cls.parse(obj["name"], obj["fields"], obj["spanKinds"])

    def decoder(self) -> Decoder:
        """The record decoder of a format other than the contract's own."""
        if self.field_map is not None:
            judge = self.field_map.judge()
            return lambda value, partition, offset: [judge(value, partition, offset)]
        if self.name.startswith("otlp"):
            return otlp_decoder(self.name, self.span_kinds)
        raise ValueError("the contract's own records have no decoder: the parser reads them")
