"""What the dashboard shows, read from Redis and shaped for display. No Streamlit here.

`read_snapshot` gathers everything one refresh of the page needs through `tidegauge.store`'s
read functions (each a single round trip or one pipeline, never one per window). The rest are
pure functions from those typed rows to pandas frames and status numbers, tested without Redis
or Streamlit. Times are epoch ms (UTC) until they become naive-UTC pandas timestamps for plotting.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import redis

from jobs.windows import WindowSpec
from tidegauge.store import (
    ALL_SERVICES,
    DeadLetter,
    JobStatus,
    Keys,
    RangeResult,
    WindowRow,
    read_dead_counts,
    read_dead_letters,
    read_range,
    read_status,
    read_window_specs,
    read_windows,
)

__all__ = [
    "METRIC_COLUMNS",
    "RECENT_RANGE_MS",
    "WINDOW_COLUMNS",
    "Snapshot",
    "StatusView",
    "dead_counts_frame",
    "dead_letters_frame",
    "format_age",
    "metrics_frame",
    "offsets_frame",
    "offsets_summary",
    "range_figures",
    "read_newest_window_start",
    "read_recent",
    "read_snapshot",
    "services_in",
    "stable_order",
    "status_view",
    "to_utc",
    "windows_frame",
]

#: Columns of `windows_frame`, in order.
WINDOW_COLUMNS = ["window_start", "window_end", "service", "count", "events_per_s"]

#: Columns of `metrics_frame`, in order: latencies in ms (NaN for a window without latencies).
METRIC_COLUMNS = [
    "window_start",
    "window_end",
    "service",
    "count",
    "latency_count",
    "p50",
    "p95",
    "p99",
    "distinct_users",
]

#: The range (ms of event time, ending at the newest window) of the "last 15 minutes" figures.
RECENT_RANGE_MS = 15 * 60_000

#: How many characters of a dead letter's raw bytes the table shows.
RAW_PREVIEW_CHARS = 80


def read_newest_window_start(r: redis.Redis, keys: Keys, spec: WindowSpec) -> int | None:
    """Start (ms) of the newest stored window of `spec`, or None when there is none.

    One ZREVRANGE on the window index: the store's `read_windows` selects by time range, and
    the chart's range ends at the newest window, so this is read first.
    """
    got: Any = r.zrevrange(keys.window_index(spec.key), 0, 0)
    if not got:
        return None
    member = got[0]
    if not isinstance(member, (bytes, str)):  # only with withscores=True, not asked for here
        raise TypeError(f"unexpected ZREVRANGE member {member!r}")
    return int(member)


@dataclass(frozen=True)
class Snapshot:
    """Everything one refresh of the page shows, read at `read_at_ms` (wall clock, UTC)."""

    read_at_ms: int
    status: JobStatus | None
    window_size_ms: int | None
    windows: list[WindowRow] = field(default_factory=list)
    dead_counts: dict[str, int] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: The window spec `windows` are of, and the start (ms) of its newest stored window.
    spec: WindowSpec | None = None
    newest_start_ms: int | None = None

    @property
    def is_empty(self) -> bool:
        """True before the job's first batch: no status and no windows."""
        return self.status is None and not self.windows


def read_snapshot(
    r: redis.Redis,
    keys: Keys,
    window_range_ms: int,
    now_ms: int,
    dead_letter_limit: int = 5,
) -> Snapshot:
    """Read one refresh's worth: status, the last `window_range_ms` of windows, dead letters.

    Windows are those of the smallest stored size that end after `newest start + size -
    window_range_ms`, i.e. the chart's range ends at the newest window, not at the wall clock
    (event time may lag or lead it). About seven round trips, independent of the window count.
    """
    status = read_status(r, keys)
    specs = read_window_specs(r, keys)
    spec = specs[0] if specs else None
    size = spec.size_ms if spec else None
    windows: list[WindowRow] = []
    newest = None
    if spec is not None:
        newest = read_newest_window_start(r, keys, spec)
        if newest is not None:
            since = newest + spec.size_ms - window_range_ms
            windows = read_windows(r, keys, spec, since_ms=since)
    return Snapshot(
        read_at_ms=now_ms,
        status=status,
        window_size_ms=size,
        windows=windows,
        dead_counts=read_dead_counts(r, keys),
        dead_letters=read_dead_letters(r, keys, limit=dead_letter_limit),
        spec=spec,
        newest_start_ms=newest,
    )


def read_recent(
    r: redis.Redis,
    keys: Keys,
    snap: Snapshot,
    service: str = ALL_SERVICES,
    range_ms: int = RECENT_RANGE_MS,
) -> RangeResult | None:
    """Metrics of `service` over the last `range_ms` of event time, from merged window sketches.

    One `read_range` (one ZRANGEBYSCORE and one pipeline): the range ends at the end of the
    snapshot's newest window, like the charts, and its percentiles and distinct users come from
    the merged t-digests and HyperLogLogs, not from averaging window figures. Only a tumbling
    spec is merged (hopping windows overlap and would count events twice); None when the
    snapshot has no tumbling windows.
    """
    spec, newest = snap.spec, snap.newest_start_ms
    if spec is None or newest is None or spec.kind != "tumbling":
        return None
    until = newest + spec.size_ms
    return read_range(r, keys, until - range_ms, until, service=service, spec=spec)


def _ms(v: Any) -> str:
    return "–" if v is None else f"{v:,.1f} ms"


def range_figures(result: RangeResult) -> dict[str, str]:
    """The "last 15 minutes" row as label -> display text: count, error rate, p50, p99, users.

    Latencies in ms with one decimal ("–" when the range holds no latency), the error rate
    (status >= 500) in percent with two decimals, distinct users as the HyperLogLog estimate.
    """
    m = result.metrics
    return {
        "Events": f"{int(m['count']):,}",
        "Error rate": f"{100.0 * float(m['error_rate']):.2f} %",
        "p50 latency": _ms(m.get("p50")),
        "p99 latency": _ms(m.get("p99")),
        "Distinct users": f"{int(m['distinct_users']):,}",
    }


def to_utc(ms: pd.Series | Sequence[int]) -> pd.Series:
    """Epoch ms to naive datetimes in UTC.

    Naive on purpose: plotly.js has no time zones and would shift or reject offsets, so the
    values are UTC wall-clock times and the axis says "UTC".
    """
    s = pd.Series(ms, dtype="int64")
    return pd.to_datetime(s, unit="ms", utc=True).dt.tz_localize(None)


def windows_frame(rows: Sequence[WindowRow]) -> pd.DataFrame:
    """One row per (window, service): start/end as naive-UTC datetimes, count, events_per_s.

    Sorted by service (`*` first) then window start, so each service's line is drawn in order.
    """
    if not rows:
        return pd.DataFrame(
            {
                "window_start": pd.Series(dtype="datetime64[ms]"),
                "window_end": pd.Series(dtype="datetime64[ms]"),
                "service": pd.Series(dtype="object"),
                "count": pd.Series(dtype="int64"),
                "events_per_s": pd.Series(dtype="float64"),
            }
        )
    df = pd.DataFrame([r.to_dict() for r in rows], columns=WINDOW_COLUMNS)
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    df["count"] = df["count"].astype("int64")
    df["events_per_s"] = df["events_per_s"].astype("float64")
    return df.sort_values(["service", "window_start"], kind="stable").reset_index(drop=True)


def metrics_frame(rows: Sequence[WindowRow]) -> pd.DataFrame:
    """One row per (window, service) with latency percentiles (ms) and distinct users.

    Same times and order as `windows_frame`; a window without latencies has NaN percentiles,
    so its line has a gap rather than a fake zero.
    """
    df = pd.DataFrame([r.to_dict() for r in rows], columns=METRIC_COLUMNS)
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    df = df.astype(
        {
            "service": "object",
            "count": "int64",
            "latency_count": "int64",
            "p50": "float64",
            "p95": "float64",
            "p99": "float64",
            "distinct_users": "int64",
        }
    )
    return df.sort_values(["service", "window_start"], kind="stable").reset_index(drop=True)


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


def format_age(ms: int) -> str:
    """A duration for humans at a glance: "0.4s", "12.3s", "3m05s", "2h10m", "3d4h".

    Coarser than `format_duration` on purpose: ages tick every refresh, and "1m30s250ms"
    would jitter. Negative ages (clock skew between job and dashboard) keep their sign.
    """
    if ms < 0:
        return "-" + format_age(-ms)
    if ms < 60_000:
        return f"{ms // 100 / 10:.1f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600}h"


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


def dead_counts_frame(counts: dict[str, int]) -> pd.DataFrame:
    """Dead letters ever seen by reason, most frequent first."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return pd.DataFrame(items, columns=["reason", "count"]).astype({"count": "int64"})


def _preview(raw: bytes, limit: int = RAW_PREVIEW_CHARS) -> str:
    if not raw:
        return "(empty)"
    text = raw.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dead_letters_frame(letters: Sequence[DeadLetter]) -> pd.DataFrame:
    r"""The given dead letters as a table: Kafka time (UTC), reason, detail, position, raw preview.

    `raw` shows undecodable bytes escaped (`\xff`), is cut to `RAW_PREVIEW_CHARS` and reads
    "(empty)" for a record without bytes.
    """
    return pd.DataFrame(
        {
            "Kafka time (UTC)": to_utc([d.kafka_timestamp for d in letters]),
            "reason": [d.reason for d in letters],
            "detail": [d.detail for d in letters],
            "partition:offset": [d.ref for d in letters],
            "raw": [_preview(d.raw) for d in letters],
        }
    )


def services_in(frame: pd.DataFrame) -> list[str]:
    """Services present in a `windows_frame`, sorted, without the `*` total."""
    return sorted(s for s in frame["service"].unique() if s != ALL_SERVICES)


def stable_order(previous: Sequence[str], current: Iterable[str]) -> list[str]:
    """`previous` unchanged, then the services of `current` not in it yet, sorted.

    The chart's trace order must not move when a service appears (see `figures`), so the app
    keeps the order it has shown and only appends newcomers.
    """
    known = set(previous)
    return [*previous, *sorted(set(current) - known)]
