"""Arrivals: events counted by event, processing and broker time."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import redis

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.store.index import _stamped, _sync
from tidegauge.core.store.keys import ALL_SERVICES, Keys, _s, split_batch_field
from tidegauge.core.store.records import WindowRow
from tidegauge.core.store.windows import read_window_specs, read_windows
from tidegauge.core.windows import TIME_DOMAINS, WindowSpec


@dataclass(frozen=True)
class ArrivalRow:
    """Events of one service (`*` = all) in one window of a time domain, classified."""

    domain: str
    window_start: int
    window_end: int
    service: str
    events: int
    late: int
    stragglers: int

    @property
    def events_per_s(self) -> float:
        """Events per second of the window."""
        return self.events * 1000.0 / (self.window_end - self.window_start)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {**asdict(self), "events_per_s": self.events_per_s}


def event_arrivals(windows: Sequence[WindowRow]) -> list[ArrivalRow]:
    """The event-time series of tumbling windows: every event once, late ones included."""
    return [
        ArrivalRow(
            "event",
            w.window_start,
            w.window_end,
            w.service,
            w.count + w.late,
            w.late,
            w.stragglers,
        )
        for w in windows
    ]


def read_arrival_size(r: redis.Redis, keys: Keys) -> int | None:
    """Window size (ms) of the processing- and broker-time series, or None before any.

    The smallest stored size: every size holds every event once, the smallest is the finest.
    """
    sizes: Any = r.smembers(keys.arrival_sizes)
    return min((int(_s(v)) for v in sizes), default=None)


def event_spec(specs: Sequence[WindowSpec], arrival_size: int | None) -> WindowSpec | None:
    """The tumbling spec whose windows make the event-time series (same size as the others)."""
    tumbling = [s for s in specs if s.kind == "tumbling"]
    return next(
        (s for s in tumbling if s.size_ms == arrival_size), tumbling[0] if tumbling else None
    )


def read_arrivals(
    r: redis.Redis,
    keys: Keys,
    domain: str,
    since_ms: int | None = None,
    until_ms: int | None = None,
    service: str | None = None,
    cache: ClosedWindows | None = None,
    *,
    services: Sequence[str] | None = None,
) -> list[ArrivalRow]:
    """Events per window by event time, processing time or broker time, ordered by start.

    All three count every event once (late ones included) in tumbling windows of the job's
    primary size, so the series can be drawn on one axis. "event" is read from the windows
    (count + late of the primary tumbling spec); the other two from the arrival series.
    `service` keeps one service's rows (`*`: the totals), `services` those of several.
    With `cache`, a window is re-read only when its number of fields changed: each batch adds
    its own field and a replayed batch rewrites its field unchanged, so the count is a version
    stamp (broker-time windows can still grow long after their end).
    """
    if domain not in TIME_DOMAINS:
        raise ValueError(f"domain must be one of {', '.join(TIME_DOMAINS)}, got {domain!r}")
    size = read_arrival_size(r, keys)
    if domain == "event":
        spec = event_spec(read_window_specs(r, keys), size)
        if spec is None:
            return []
        return event_arrivals(
            read_windows(r, keys, spec, service, since_ms, until_ms, cache, services=services)
        )
    if size is None:
        return []
    if cache is not None:
        _sync(r, keys, cache)
    lo = "-inf" if since_ms is None else since_ms - size + 1
    hi = "+inf" if until_ms is None else until_ms - 1
    members: Any = r.zrangebyscore(keys.arrivals_index(domain, size), lo, hi)
    starts = sorted(int(_s(v)) for v in members)
    wanted = {service} if service is not None else None if services is None else set(services)
    subset = "" if wanted is None else "|" + "\x1f".join(sorted(wanted))
    per_window = _stamped(
        r,
        cache,
        f"arrivals:{domain}{subset}",
        str(size),
        starts,
        lambda s: keys.arrivals(domain, size, s),
        lambda s, fields: _arrival_rows(domain, s, size, fields, wanted),
    )
    if wanted is None:
        return [row for rows in per_window for row in rows]
    return [row for rows in per_window for row in rows if row.service in wanted]


def batch_arrivals(counts: Mapping[str, tuple[int, int, int]]) -> str:
    """A batch's field of one arrival window: service -> [events, late, stragglers], as JSON.

    One field per batch holds every service's counts (the field is the batch id, so a replayed
    batch rewrites it): a busy window then costs a few bytes per service and batch, not a field.
    `*` holds the batch's totals, so a reader of the totals looks up one entry.
    """
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    doc = {ALL_SERVICES: total, **{svc: counts[svc] for svc in sorted(counts)}}  # tuples: lists
    return json.dumps(doc, separators=(",", ":"))


def arrival_counts(
    field_name: bytes | str, value: bytes | str
) -> tuple[int, dict[str, list[int]], list[int]]:
    """(batch id, service -> [events, late, stragglers], the totals) of one arrival field.

    Reads both layouts: a batch's field (`batch_arrivals`) and, in stores written before,
    one field per service and batch ("service|batch" -> {"events", "late", "stragglers", ...}).
    """
    name = _s(field_name)
    doc = orjson.loads(value)
    if "|" not in name:
        total = doc.pop(ALL_SERVICES, None)
        if total is None:
            total = [sum(c[i] for c in doc.values()) for i in range(3)]
        return int(name), doc, total
    svc, batch = split_batch_field(name)
    counts = [int(doc["events"]), int(doc["late"]), int(doc["stragglers"])]
    return batch, {svc: counts}, counts


#: How a batch's arrival field begins (`batch_arrivals` writes the totals first).
_TOTALS_HEAD = b'{"' + ALL_SERVICES.encode() + b'":['


def arrival_totals(field_name: bytes | str, value: bytes) -> list[int]:
    """The totals [events, late, stragglers] of one arrival field (`arrival_counts`' third).

    Read from the head of a batch's field, where the totals are, not from every service's
    entry after them: a reader of the `*` series at 1,000 services parses 1/1000 of it.
    """
    if value.startswith(_TOTALS_HEAD):
        end = value.find(b"]", len(_TOTALS_HEAD))
        cells = value[len(_TOTALS_HEAD) : end].split(b",")
        if end > 0 and len(cells) == 3 and all(c.isdigit() for c in cells):
            return [int(c) for c in cells]
    return arrival_counts(field_name, value)[2]


def _arrival_rows(
    domain: str, start: int, size: int, fields: dict[Any, Any], wanted: set[str] | None
) -> list[ArrivalRow]:
    """One window's batch fields summed per service (of `wanted`; None: all) and as `*`."""
    if not fields:
        return []
    if wanted is not None and wanted <= {ALL_SERVICES}:  # the totals only
        each = [arrival_totals(k, v) for k, v in fields.items()]
        total = [sum(c) for c in zip(*each, strict=True)]
        return [ArrivalRow(domain, start, start + size, ALL_SERVICES, *total)]
    sums: dict[str, list[int]] = {ALL_SERVICES: [0, 0, 0]}
    for k, v in fields.items():
        _, counts, total = arrival_counts(k, v)
        acc = sums[ALL_SERVICES]
        acc[0], acc[1], acc[2] = acc[0] + total[0], acc[1] + total[1], acc[2] + total[2]
        mine = counts.keys() if wanted is None else wanted & counts.keys()
        for svc in mine:
            c = counts[svc]
            acc = sums.setdefault(svc, [0, 0, 0])
            acc[0], acc[1], acc[2] = acc[0] + c[0], acc[1] + c[1], acc[2] + c[2]
    return [ArrivalRow(domain, start, start + size, svc, *sums[svc]) for svc in sorted(sums)]


def read_newest_arrival_start(r: redis.Redis, keys: Keys, domain: str, size: int) -> int | None:
    """Start (ms) of the newest stored window of one arrival series, or None when empty."""
    got: Any = r.zrevrange(keys.arrivals_index(domain, size), 0, 0)
    return int(got[0]) if got else None
