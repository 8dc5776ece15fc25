"""The Redis key layout and the read API. docs/redis.md is the human-readable twin.

The job's sink writes these keys (jobs/redis_sink.py); `tidegauge query`, the dashboard and the
tests read them only through the functions here, so there is one definition of what is stored.

All times are epoch milliseconds (UTC). Window metrics are stored as small JSON documents in a
hash per window, one field per service plus `*` (all services).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import redis

from tidegauge.config import RedisSettings

__all__ = [
    "ALL_SERVICES",
    "DeadLetter",
    "JobStatus",
    "Keys",
    "WindowRow",
    "connect",
    "read_batches",
    "read_dead_counts",
    "read_dead_letters",
    "read_services",
    "read_status",
    "read_window_sizes",
    "read_windows",
]

#: The pseudo-service that aggregates every service.
ALL_SERVICES = "*"


@dataclass(frozen=True)
class Keys:
    """Every Redis key Tidegauge uses, under one prefix (default `tg`)."""

    prefix: str = "tg"

    def window(self, size_ms: int, start_ms: int) -> str:
        """Hash: service -> JSON metrics of the window [start, start + size)."""
        return f"{self.prefix}:win:{size_ms}:{start_ms}"

    def window_index(self, size_ms: int) -> str:
        """Sorted set of window starts (member and score = start ms) for one window size."""
        return f"{self.prefix}:win:{size_ms}:idx"

    def window_late(self, size_ms: int, start_ms: int) -> str:
        """Hash: "service|batch_id" -> rows of that window that arrived late in that batch."""
        return f"{self.prefix}:late:{size_ms}:{start_ms}"

    def late_index(self, size_ms: int) -> str:
        """Sorted set of window starts that have late rows."""
        return f"{self.prefix}:late:{size_ms}:idx"

    @property
    def window_sizes(self) -> str:
        """Set of window sizes (ms) that have data."""
        return f"{self.prefix}:win:sizes"

    @property
    def services(self) -> str:
        """Set of every service seen."""
        return f"{self.prefix}:services"

    @property
    def status(self) -> str:
        """Hash: the job's status after its latest batch."""
        return f"{self.prefix}:status"

    @property
    def batches(self) -> str:
        """Sorted set: one JSON summary per batch, score = batch id (recent ones kept)."""
        return f"{self.prefix}:batches"

    @property
    def dead_letters(self) -> str:
        """Sorted set of dead letters (JSON members), score = Kafka timestamp (ms); capped."""
        return f"{self.prefix}:dead:letters"

    @property
    def dead_counts(self) -> str:
        """Hash: reason -> number of dead letters ever seen (exact, not capped)."""
        return f"{self.prefix}:dead:count"


def connect(settings: RedisSettings) -> redis.Redis:
    """A client for `settings.url`; connection errors surface on first use."""
    return redis.Redis.from_url(settings.url, socket_connect_timeout=3, socket_timeout=10)


@dataclass(frozen=True)
class WindowRow:
    """Metrics of one event-time window for one service (`*` = all services)."""

    window_start: int
    window_end: int
    service: str
    count: int
    events_per_s: float
    late: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


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


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def read_window_sizes(r: redis.Redis, keys: Keys) -> list[int]:
    """Window sizes (ms) that have stored results, ascending."""
    return sorted(int(_s(v)) for v in r.smembers(keys.window_sizes))


def read_services(r: redis.Redis, keys: Keys) -> list[str]:
    """Every service seen, sorted (without `*`)."""
    return sorted(_s(v) for v in r.smembers(keys.services))


def read_windows(
    r: redis.Redis,
    keys: Keys,
    size_ms: int | None = None,
    service: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[WindowRow]:
    """Stored windows, ordered by start then service.

    `size_ms` defaults to the smallest stored window size; `since_ms`/`until_ms` select windows
    that end after `since_ms` and start before `until_ms`; `service` = `*` selects the totals.
    """
    if size_ms is None:
        sizes = read_window_sizes(r, keys)
        if not sizes:
            return []
        size_ms = sizes[0]
    lo = "-inf" if since_ms is None else since_ms - size_ms + 1
    hi = "+inf" if until_ms is None else until_ms - 1
    found: set[int] = set()
    for idx in (keys.window_index(size_ms), keys.late_index(size_ms)):
        members: Any = r.zrangebyscore(idx, lo, hi)
        found.update(int(_s(v)) for v in members)
    starts = sorted(found)
    pipe = r.pipeline(transaction=False)
    for start in starts:
        pipe.hgetall(keys.window(size_ms, start))
        pipe.hgetall(keys.window_late(size_ms, start))
    got = pipe.execute()
    rows: list[WindowRow] = []
    for i, start in enumerate(starts):
        counts = {_s(k): int(json.loads(v)["count"]) for k, v in got[2 * i].items()}
        late: dict[str, int] = {}
        for k, v in got[2 * i + 1].items():
            svc = _s(k).rsplit("|", 1)[0]
            late[svc] = late.get(svc, 0) + int(v)
        if late:
            late[ALL_SERVICES] = sum(late.values())
        for svc in sorted(set(counts) | set(late)):
            if service is not None and svc != service:
                continue
            n = counts.get(svc, 0)
            rows.append(
                WindowRow(
                    window_start=start,
                    window_end=start + size_ms,
                    service=svc,
                    count=n,
                    events_per_s=n * 1000.0 / size_ms,
                    late=late.get(svc, 0),
                )
            )
    return rows


def read_status(r: redis.Redis, keys: Keys) -> JobStatus | None:
    """The job's latest status, or None before its first batch."""
    raw = r.hgetall(keys.status)
    if not raw:
        return None
    d = {_s(k): _s(v) for k, v in raw.items()}
    return JobStatus(
        batch_id=int(d["batch_id"]),
        batch_time=int(d["batch_time"]),
        watermark=int(d["watermark"]),
        input_rows=int(d["input_rows"]),
        offsets={k: int(v) for k, v in json.loads(d["offsets"]).items()},
        latest_offsets={k: int(v) for k, v in json.loads(d["latest_offsets"]).items()},
        batch_duration_ms=int(d["batch_duration_ms"]),
        query_id=d["query_id"],
        status_time=int(d.get("status_time", d["batch_time"])),
    )


def read_batches(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[dict[str, Any]]:
    """Per-batch summaries (oldest first): offsets before/after, rows, watermark, durations."""
    start = 0 if limit is None else -limit
    members: Any = r.zrange(keys.batches, start, -1)
    return [json.loads(v) for v in members]


def read_dead_counts(r: redis.Redis, keys: Keys) -> dict[str, int]:
    """Dead letters ever seen, by reason (exact even when old records were trimmed)."""
    return {_s(k): int(v) for k, v in r.hgetall(keys.dead_counts).items()}


def read_dead_letters(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[DeadLetter]:
    """Kept dead letters, newest first (`limit` of them, or all)."""
    end = -1 if limit is None else limit - 1
    members: Any = r.zrevrange(keys.dead_letters, 0, end)
    return [DeadLetter.from_json(v) for v in members]
