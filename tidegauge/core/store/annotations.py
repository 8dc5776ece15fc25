"""Annotations: what happened to the pipeline, on the time axis it happened in.

A presenter's "latency incident" changes events by *event time* (the generator makes the
events of the next minute slow); a backlog pause and a job restart happen in *processing time*.
Each annotation keeps its time domain, so the page draws it on the charts of that domain, over
the span it affected: a click is visible on the chart it changed. Alert firings are kept apart,
with their own states (`tidegauge/alerts/store.py`), and drawn the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis

from tidegauge.core.store.keys import ALL_SERVICES, Keys

__all__ = [
    "ANNOTATIONS_KEPT",
    "Annotation",
    "read_annotations",
    "write_annotation",
    "write_annotations",
]

#: Annotations kept (the newest by start).
ANNOTATIONS_KEPT = 1_000

Domain = Literal["event", "processing"]


@dataclass(frozen=True)
class Annotation:
    """One marked span (`end` == `start` for an instant), epoch ms in its time domain."""

    kind: str
    label: str
    domain: Domain
    start: int
    end: int
    service: str = ALL_SERVICES

    def __post_init__(self) -> None:
        if self.domain not in ("event", "processing"):
            raise ValueError(f"annotation domain must be event or processing, not {self.domain!r}")
        if self.end < self.start:
            raise ValueError("an annotation ends before it starts")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON in Redis)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Annotation:
        """Inverse of `to_dict`."""
        return cls(
            kind=str(d["kind"]),
            label=str(d["label"]),
            domain=d["domain"],
            start=int(d["start"]),
            end=int(d["end"]),
            service=str(d.get("service", ALL_SERVICES)),
        )


def write_annotation(r: redis.Redis, keys: Keys, a: Annotation) -> None:
    """Add `a` (the same annotation twice is kept once); the oldest beyond the cap go."""
    write_annotations(r, keys, [a])


def write_annotations(r: redis.Redis, keys: Keys, items: Sequence[Annotation]) -> None:
    """`write_annotation` of each of `items`, in one round trip."""
    if not items:
        return
    pipe = r.pipeline(transaction=False)  # a reader sees them with or without
    pipe.zadd(keys.annotations, {json.dumps(a.to_dict(), sort_keys=True): a.start for a in items})
    pipe.zremrangebyrank(keys.annotations, 0, -ANNOTATIONS_KEPT - 1)
    pipe.execute()


def read_annotations(r: redis.Redis, keys: Keys, since_ms: int, until_ms: int) -> list[Annotation]:
    """Annotations overlapping [since_ms, until_ms] in their own domain, oldest first."""
    raw: Any = r.zrangebyscore(keys.annotations, "-inf", until_ms)
    out = [Annotation.from_dict(json.loads(v)) for v in raw]
    return [a for a in out if a.end >= since_ms]
