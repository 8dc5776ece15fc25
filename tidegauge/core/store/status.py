"""The job's status, its batch history, dead letters and watermarks."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from tidegauge.core.store.keys import Keys, _s
from tidegauge.core.store.records import DeadLetter, JobStatus


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
        report_interval_ms=int(d["report_interval_ms"]) if "report_interval_ms" in d else None,
        allowed_lateness_ms=int(d["allowed_lateness_ms"]) if "allowed_lateness_ms" in d else None,
        freshness=json.loads(d["freshness"]) if "freshness" in d else None,
        spark=json.loads(d["spark"]) if "spark" in d else None,
    )


def read_batches(r: redis.Redis, keys: Keys, limit: int | None = None) -> list[dict[str, Any]]:
    """Per-batch summaries (oldest first): offsets before/after, rows, watermark, durations.

    Each has `freshness` (see `JobStatus.freshness`), None for a batch without records.
    """
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


def read_watermarks(
    r: redis.Redis, keys: Keys, limit: int | None = None
) -> list[dict[str, int | None]]:
    """The watermark after each recent batch with the batch's processing time (oldest first).

    Each entry: batch_id, batch_time (ms, when the batch ran), watermark (ms, after the batch)
    and max_event_time (ms: the largest event time in that batch, None for a batch without
    rows): what the dashboard draws as lines.
    """
    return [
        {
            "batch_id": int(b["batch_id"]),
            "batch_time": int(b["batch_time"]),
            "watermark": int(b["watermark"]),
            "max_event_time": b.get("max_event_time"),
        }
        for b in read_batches(r, keys, limit)
    ]


def overflow_summary(batches: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The cardinality guard over batches of the history (oldest first).

    Names over `--max-services` in the newest batch and at most in one batch; their events.
    """
    per_batch = [b.get("overflow") or {} for b in batches]
    return {
        "batches": len(batches),
        "last_names": int(per_batch[-1].get("names", 0)) if per_batch else 0,
        "max_names": max((int(o.get("names", 0)) for o in per_batch), default=0),
        "events": sum(int(o.get("events", 0)) for o in per_batch),
    }
