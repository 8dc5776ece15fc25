"""The job's status as the page shows it: its age, whether it is stale, its Kafka offsets.

Pure functions of the `JobStatus` the job writes after every batch (and while idle) and the
wall clock (ms): how long ago it reported and ran its last batch, whether that silence is too
long, and its committed offsets and lag by Kafka partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tidegauge.core.store import JobStatus

__all__ = [
    "CATCH_UP_WINDOW_MS",
    "STALE_INTERVALS",
    "CatchUp",
    "StatusView",
    "catch_up",
    "offsets_frame",
    "offsets_summary",
    "stale_after_ms",
    "status_view",
]

#: A stale banner after this many report intervals without a word from the job.
STALE_INTERVALS = 3


@dataclass(frozen=True)
class StatusView:
    """The status strip's numbers, derived from `JobStatus` and the wall clock (ms)."""

    batch_id: int
    batch_age_ms: int
    stale: bool
    watermark_ms: int | None
    watermark_delay_ms: int | None
    input_rows: int
    batch_duration_ms: int


def status_view(status: JobStatus, now_ms: int, stale_after_ms: int) -> StatusView:
    """Ages relative to `now_ms`; stale when the job has not reported for `stale_after_ms`.

    The job reports after every batch and, while idle, every trigger interval (`status_time`),
    so a quiet stream is not mistaken for a dead job. A watermark of 0 or less means "none
    yet" (Spark's watermark starts at 0 before any event).
    Ages are not clamped: a negative age means the dashboard's clock is behind the job's.
    """
    age = now_ms - status.batch_time
    silent = now_ms - max(status.status_time, status.batch_time)
    has_wm = status.watermark > 0
    return StatusView(
        batch_id=status.batch_id,
        batch_age_ms=age,
        stale=silent > stale_after_ms,
        watermark_ms=status.watermark if has_wm else None,
        watermark_delay_ms=now_ms - status.watermark if has_wm else None,
        input_rows=status.input_rows,
        batch_duration_ms=status.batch_duration_ms,
    )


def stale_after_ms(status: JobStatus | None, configured_ms: int | None, fallback_ms: int) -> int:
    """How long the job may be silent before the page calls it stale.

    `configured_ms` (the `--stale-after` flag) wins; else 3 of the job's report intervals
    (it reports every trigger, and at least every second while idle), where an interval is at
    least as long as its last batch took: a job whose batches take 5 s on a busy machine is
    silent for 5 s at a time without being stuck. Else `fallback_ms`.
    """
    if configured_ms is not None:
        return configured_ms
    if status is not None and status.report_interval_ms:
        return STALE_INTERVALS * max(status.report_interval_ms, status.batch_duration_ms)
    return fallback_ms


def _partition_key(p: str) -> tuple[int, int | str]:
    return (0, int(p)) if p.lstrip("-").isdigit() else (1, p)


def offsets_frame(status: JobStatus) -> pd.DataFrame:
    """Per Kafka partition: the job's committed end offset, the latest offset seen, and the lag.

    Lag is blank when the job did not report a latest offset for that partition.
    """
    parts = sorted(set(status.offsets) | set(status.latest_offsets), key=_partition_key)
    rows = []
    for p in parts:
        off = status.offsets.get(p)
        latest = status.latest_offsets.get(p)
        lag = latest - off if off is not None and latest is not None else None
        rows.append({"partition": p, "offset": off, "latest": latest, "lag": lag})
    return pd.DataFrame(rows, columns=["partition", "offset", "latest", "lag"]).astype(
        {"offset": "Int64", "latest": "Int64", "lag": "Int64"}
    )


def offsets_summary(frame: pd.DataFrame) -> str:
    """One line from an `offsets_frame`: "p0 **1,234** · p1 **1,200** (lag 3)" (markdown).

    Lag is shown only when positive; partitions without a committed offset are left out.
    """
    parts = []
    for row in frame.itertuples(index=False):
        if pd.isna(row.offset):
            continue
        text = f"p{row.partition} **{int(row.offset):,}**"
        if not pd.isna(row.lag) and row.lag > 0:
            text += f" (lag {int(row.lag):,})"
        parts.append(text)
    return " · ".join(parts) if parts else "none yet"


#: How far back (ms of batch time) `catch_up` measures the job's pace and the topic's growth:
#: long enough for several batches and topic-end samples (every 5 s), short enough to follow
#: a fresh job's speed-up (its first batches run at about half speed: BENCHMARKS.md, catch-up).
CATCH_UP_WINDOW_MS = 20_000


@dataclass(frozen=True)
class CatchUp:
    """How far behind the topic's end the job is, and when it will have caught up."""

    #: Records in the topic that no committed batch has taken yet.
    backlog: int
    #: Records per second the job took, and the topic grew by, over `CATCH_UP_WINDOW_MS`.
    processed_per_s: float
    arriving_per_s: float
    #: Seconds until the backlog is gone at that pace; None while the job is not gaining.
    eta_s: float | None


def catch_up(batches: list[dict[str, Any]]) -> CatchUp | None:
    """The job's catch-up from its batch history (oldest first), or None when it is not behind.

    Behind: the topic's end (asked of Kafka by the job, `topic_end_offsets`) is more than one
    batch's records past the newest batch's end offsets. The pace: records the batches of the
    last `CATCH_UP_WINDOW_MS` took per second, and how fast the topic's end moved meanwhile;
    the backlog shrinks at their difference.
    """
    known = [b for b in batches if b.get("topic_end_offsets")]
    if not known:
        return None
    last = known[-1]
    ends, done = last["topic_end_offsets"], last.get("offsets") or {}
    backlog = sum(max(0, int(end) - int(done.get(p, 0))) for p, end in ends.items())
    if backlog <= max(int(last.get("input_rows") or 0), 1):
        return None
    recent = [b for b in batches if b["batch_time"] >= last["batch_time"] - CATCH_UP_WINDOW_MS]
    span_s = (recent[-1]["batch_time"] - recent[0]["batch_time"]) / 1000
    if len(recent) < 2 or span_s <= 0:
        return CatchUp(backlog, 0.0, 0.0, None)
    processed = sum(int(b.get("input_rows") or 0) for b in recent[1:]) / span_s
    first = next(b for b in known if b["batch_time"] >= recent[0]["batch_time"])
    grown_s = (last["topic_end_time"] - first["topic_end_time"]) / 1000
    grown = sum(last["topic_end_offsets"].values()) - sum(first["topic_end_offsets"].values())
    arriving = grown / grown_s if grown_s > 0 else 0.0
    gain = processed - arriving
    return CatchUp(backlog, processed, arriving, backlog / gain if gain > 0 else None)
