"""What the read API returns: a window's row, the job's status, a dead letter."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class WindowRow:
    """Metrics of one event-time window for one service (`*` = all services)."""

    window_start: int
    window_end: int
    service: str
    count: int
    events_per_s: float
    late: int = 0
    errors: int = 0
    error_rate: float = 0.0
    latency_count: int = 0
    latency_mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    distinct_users: int = 0
    spec: str = ""
    kind: str = "tumbling"
    #: Accepted after the window was emitted (its end <= the frontier), and the number of
    #: batches that brought such corrections (revision 0 = never corrected).
    stragglers: int = 0
    revision: int = 0
    #: Events dropped from the window as duplicates of an event already in it (same event_id).
    duplicates: int = 0
    #: Arrival (broker time) - event time of the accepted events, ms.
    lateness_p50: float | None = None
    lateness_p99: float | None = None
    lateness_max: float | None = None
    #: Sliding windows only (tidegauge/core/sliding.py): the busiest interval of the window's
    #: length ending inside its step, its events and start; the same for errors.
    peak_events: int | None = None
    peak_start: int | None = None
    peak_errors: int | None = None
    peak_errors_start: int | None = None
    #: The job's watermark has passed the window's end: no event can change it any more.
    closed: bool = False
    #: Result fields of metrics registered by plugins (None where a window predates them).
    extra: Mapping[str, Any] = field(default_factory=dict)

    def value(self, name: str) -> Any:
        """Result field `name`, built in or added by a plugin (None when absent)."""
        if name in _ROW_FIELDS:
            return getattr(self, name)
        return self.extra.get(name)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output: every result field at the top level."""
        d = dict(vars(self))
        d.update(d.pop("extra"))
        return d


_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(WindowRow))


@dataclass(frozen=True)
class JobStatus:
    """What the job reported after its latest batch."""

    batch_id: int
    batch_time: int
    watermark: int
    input_rows: int
    offsets: dict[str, int]
    latest_offsets: dict[str, int]
    batch_duration_ms: int
    query_id: str
    #: When the job last reported (also while idle); batch_time is when its last batch ran.
    status_time: int = 0
    #: How often the job promises to report (trigger interval, at least 1 s); None if unknown.
    report_interval_ms: int | None = None
    #: The job's --allowed-lateness; None if unknown (status written by an older job).
    allowed_lateness_ms: int | None = None
    #: Freshness of the latest batch that had records (`tidegauge.core.freshness.Freshness` as a
    #: dict: batch_id, commit_time, records, p50_ms, p99_ms, max_ms); None before any.
    freshness: dict[str, int] | None = None
    #: Where the latest batch ran: master, executors (0 in local mode) and cores (Spark's
    #: default parallelism: on a cluster the cores it started with, at least 2); None if
    #: unknown (status written by an older job).
    spark: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


@dataclass(frozen=True)
class DeadLetter:
    """A record that broke the event contract, kept with its reason and (capped) raw bytes."""

    partition: int
    offset: int
    kafka_timestamp: int
    reason: str
    detail: str
    raw: bytes
    raw_size: int
    batch_id: int

    @property
    def ref(self) -> str:
        """Its identity in the store: where it sits in Kafka."""
        return f"{self.partition}:{self.offset}"

    def to_json(self) -> str:
        """Stored form; raw bytes as latin-1 text so every byte survives JSON."""
        d = asdict(self)
        d["raw"] = self.raw.decode("latin-1")
        return json.dumps(d, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> DeadLetter:
        """Inverse of `to_json`."""
        d = json.loads(text)
        d["raw"] = d["raw"].encode("latin-1")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output; raw shown as text with undecodable bytes escaped."""
        d = asdict(self)
        d["raw"] = self.raw.decode("utf-8", errors="backslashreplace")
        return d
