"""The dashboard's numbers and tables, as pure functions of what `dashboard.data` read.

No Redis and no Streamlit here, so all of it is unit-tested.

Times stay epoch ms until they become naive-UTC pandas timestamps for plotting (`to_utc`).
Series filtered to some services are sums of those services' rows; with no filter the stored
`*` rows are used, because `*` distinct users and percentiles come from merged sketches and
cannot be summed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sketches.hll import DEFAULT_P
from sketches.tdigest import TDigest
from tidegauge.core.durations import format_duration
from tidegauge.core.metrics import WindowAgg, added_result_fields
from tidegauge.core.store import (
    ALL_SERVICES,
    ArrivalRow,
    DeadLetter,
    JobStatus,
    LatenessResult,
    WindowRow,
)
from tidegauge.core.store.annotations import Annotation

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

#: How many characters of a dead letter's raw bytes the table shows.
RAW_PREVIEW_CHARS = 80

#: Relative standard error of the job's HyperLogLogs (1.04 / sqrt(2^p)).
HLL_RELATIVE_ERROR = 1.04 / math.sqrt(1 << DEFAULT_P)

#: A stale banner after this many report intervals without a word from the job.
STALE_INTERVALS = 3


def _ms(v: Any) -> str:
    """Latency for a figure: one decimal under 100 ms, whole ms above (fits a narrow column)."""
    if v is None:
        return "–"
    return f"{v:,.1f} ms" if v < 100 else f"{v:,.0f} ms"


def to_utc(ms: pd.Series | Sequence[int]) -> pd.Series:
    """Epoch ms to naive datetimes in UTC.

    Naive on purpose: plotly.js has no time zones and would shift or reject offsets, so the
    values are UTC wall-clock times and the axis says "UTC".
    """
    s = pd.Series(ms, dtype="int64")
    return pd.to_datetime(s, unit="ms", utc=True).dt.tz_localize(None)


def _columns(rows: Sequence[WindowRow], names: Sequence[str]) -> pd.DataFrame:
    """Rows' fields as columns, one list per field: ~5x faster than a dict per row."""
    own = WindowRow.__dataclass_fields__
    return pd.DataFrame(
        {
            n: [getattr(r, n) for r in rows] if n in own else [r.extra.get(n) for r in rows]
            for n in names
        },
        columns=list(names),
    )


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
    df = _columns(rows, WINDOW_COLUMNS)
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    df["count"] = df["count"].astype("int64")
    df["events_per_s"] = df["events_per_s"].astype("float64")
    return df.sort_values(["service", "window_start"], kind="stable").reset_index(drop=True)


def metrics_frame(rows: Sequence[WindowRow]) -> pd.DataFrame:
    """One row per (window, service) with latency percentiles (ms) and distinct users.

    Same times and order as `windows_frame`; a window without latencies has NaN percentiles,
    so its line has a gap rather than a fake zero. Result fields of metrics added by plugins
    follow as float columns (NaN where a window predates the metric).
    """
    added = list(added_result_fields())  # plugin metrics: one float column each
    df = _columns(rows, METRIC_COLUMNS + added)
    for name in added:
        df[name] = pd.to_numeric(df[name], errors="coerce").astype("float64")
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


@dataclass(frozen=True)
class Headline:
    """One figure of the top row: label, display value, and what it is (hover help)."""

    label: str
    value: str
    help: str


def _newest_complete(rows: Sequence[WindowRow], max_event_ms: int | None) -> WindowRow | None:
    """The newest `*` window whose end <= the max event time seen (else the newest one).

    Its counts are nearly final: events up to its end have arrived. The window being filled
    right now would read low and jump on every refresh.
    """
    totals = [w for w in rows if w.service == ALL_SERVICES]
    if not totals:
        return None
    done = [w for w in totals if max_event_ms is not None and w.window_end <= max_event_ms]
    return max(done or totals, key=lambda w: w.window_start)


def headline(
    status: JobStatus | None,
    windows: Sequence[WindowRow],
    batches: Sequence[Mapping[str, Any]],
    now_ms: int,
    range_ms: int,
    sliding: Sequence[WindowRow] = (),
) -> list[Headline]:
    """The live figures of the top row: six of the stream, then three of the job.

    Events/s, error rate, p99 and users are those of the newest complete window (all
    services); late events and stragglers are totals over the shown range; then the
    watermark delay, the freshness p99 of the latest batch with records and the age of the
    job's last batch. With a sliding window's rows (`sliding`), its busiest interval in the
    range comes before the job's figures (`busiest_headline`).
    """
    max_event = next(
        (int(b["max_event_time"]) for b in reversed(batches) if b.get("max_event_time")), None
    )
    w = _newest_complete(windows, max_event)
    where = "—" if w is None else f"window starting {_hms(w.window_start)} UTC, all services"
    totals = [x for x in windows if x.service == ALL_SERVICES]
    rng = format_duration(range_ms)
    out = [
        Headline("Events/s", "–" if w is None else f"{w.events_per_s:,.1f}", where),
        Headline("Error rate", "–" if w is None else f"{100 * w.error_rate:.2f} %", where),
        Headline("p99 latency", _ms(None if w is None else w.p99), where),
        Headline("Distinct users", "–" if w is None else f"{w.distinct_users:,}", where),
        Headline(
            "Late events",
            f"{sum(x.late for x in totals):,}",
            f"events behind the watermark (dropped from windows) in the last {rng} of event time",
        ),
        Headline(
            "Stragglers",
            f"{sum(x.stragglers for x in totals):,}",
            f"events accepted after their window was emitted, last {rng} of event time",
        ),
    ]
    if sliding:
        out.append(busiest_headline(sliding, rng))
    if status is None or status.watermark <= 0:
        out.append(Headline("Watermark delay", "–", "no watermark yet"))
    else:
        out.append(
            Headline(
                "Watermark delay",
                format_age(now_ms - status.watermark),
                "now − watermark: the allowed lateness plus how far event time lags the clock",
            )
        )
    out.append(_freshness_headline(status, now_ms))
    out.append(
        Headline(
            "Last batch age",
            "–" if status is None else format_age(now_ms - status.batch_time),
            "now − when the job's last micro-batch ran"
            + ("" if status is None else f" (batch #{status.batch_id})"),
        )
    )
    return out


def busiest_headline(rows: Sequence[WindowRow], range_text: str) -> Headline:
    """The "Busiest 60s" figure of a sliding window's rows.

    The most events (all services) in any interval of the window's length ending inside the
    shown range, and when it was (the earliest of ties); its help adds the most errors.
    """
    totals = [w for w in rows if w.service == ALL_SERVICES and w.peak_events is not None]
    size = rows[0].window_end - rows[0].window_start
    label = f"Busiest {format_duration(size)}"
    if not totals:
        return Headline(label, "–", "no sliding window rows in the range yet")
    best = max(totals, key=lambda w: (w.peak_events, -(w.peak_start or 0)))
    errors = max(totals, key=lambda w: (w.peak_errors or 0, -(w.peak_errors_start or 0)))
    assert best.peak_events is not None and best.peak_start is not None
    return Headline(
        label,
        f"{best.peak_events:,}",
        f"the most events (all services) in any {format_duration(size)} of event time ending "
        f"in the last {range_text}: {best.peak_events * 1000 / size:,.1f}/s from "
        f"{_hms_ms(best.peak_start)} UTC (sliding window); the most errors: "
        f"{errors.peak_errors or 0:,}"
        + (
            f" from {_hms_ms(errors.peak_errors_start)} UTC"
            if errors.peak_errors and errors.peak_errors_start is not None
            else ""
        ),
    )


def _hms_ms(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms").strftime("%H:%M:%S.%f")[:-3]


def _freshness_headline(status: JobStatus | None, now_ms: int) -> Headline:
    """Freshness p99 of the latest batch with records (broker timestamp -> committed to Redis).

    Shown like the row's other ages (`format_age`, 0.1 s steps); the help has the exact figures
    and says which batch: in a quiet stream it is older than the job's last batch.
    """
    f = None if status is None else status.freshness
    if f is None:
        return Headline("Freshness p99", "–", "no batch with records yet")
    return Headline(
        "Freshness p99",
        format_age(f["p99_ms"]),
        "broker timestamp → committed to Redis, per record; "
        f"batch #{f['batch_id']} ({f['records']:,} records, committed "
        f"{format_age(now_ms - f['commit_time'])} ago): p50 {format_duration(f['p50_ms'])}, "
        f"p99 {format_duration(f['p99_ms'])}, max {format_duration(f['max_ms'])}",
    )


def _hms(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms").strftime("%H:%M:%S")


def _pick_services(rows: Iterable[Any], services: Sequence[str] | None) -> tuple[list[Any], bool]:
    """Rows of `*` when `services` is None, else the rows of those services (to be summed)."""
    if services is None:
        return [r for r in rows if r.service == ALL_SERVICES], False
    chosen = set(services)
    return [r for r in rows if r.service in chosen], True


def arrivals_frame(
    arrivals: Mapping[str, Sequence[ArrivalRow]], services: Sequence[str] | None = None
) -> pd.DataFrame:
    """Events/s per window in each time domain (event, processing, broker), one row each.

    `services` None: all services (the `*` rows); else the sum over those services.
    """
    rows = []
    for domain, series in arrivals.items():
        picked, _ = _pick_services(series, services)
        for r in picked:
            rows.append((domain, r.window_start, r.window_end, r.events, r.late, r.stragglers))
    df = pd.DataFrame(
        rows, columns=["domain", "window_start", "window_end", "events", "late", "stragglers"]
    )
    df = df.groupby(["domain", "window_start", "window_end"], as_index=False).sum()
    df["events_per_s"] = df["events"] * 1000.0 / (df["window_end"] - df["window_start"])
    df["window_start"] = to_utc(df["window_start"])
    df["window_end"] = to_utc(df["window_end"])
    return df.sort_values(["domain", "window_start"], kind="stable").reset_index(drop=True)


def watermark_frame(batches: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per batch: when it ran (processing time), the watermark after it, the max event time.

    Batches before the first event (watermark <= 0) are left out: there is nothing to draw.
    """
    rows = [
        (int(b["batch_time"]), int(b["watermark"]), b.get("max_event_time"))
        for b in batches
        if int(b.get("watermark") or 0) > 0
    ]
    df = pd.DataFrame(rows, columns=["batch_time", "watermark", "max_event_time"])
    out = pd.DataFrame(
        {
            "batch_time": to_utc(df["batch_time"]),
            "watermark": to_utc(df["watermark"]),
            "max_event_time": pd.to_datetime(pd.to_numeric(df["max_event_time"]), unit="ms"),
        }
    )
    return out.sort_values("batch_time", kind="stable").reset_index(drop=True)


#: Freshness fields of a batch summary and their `health_frame` columns (ms).
FRESHNESS_COLUMNS = {
    "p50_ms": "freshness_p50_ms",
    "p99_ms": "freshness_p99_ms",
    "max_ms": "freshness_max_ms",
}


def health_frame(batches: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per batch: time, id, rows, input and processed rows/s, batch duration and freshness (ms).

    Freshness (committed to Redis − broker timestamp, per record: p50, p99, max) is NaN for a
    batch without records, and for history written before the job measured it.
    """
    df = pd.DataFrame(
        [
            {
                "batch_id": int(b["batch_id"]),
                "batch_time": int(b["batch_time"]),
                "input_rows": int(b.get("input_rows") or 0),
                "input_rows_per_s": float(b.get("input_rows_per_s") or 0.0),
                "processed_rows_per_s": float(b.get("processed_rows_per_s") or 0.0),
                "batch_duration_ms": int(b.get("batch_duration_ms") or 0),
                **_freshness_cells(b.get("freshness")),
            }
            for b in batches
        ],
        columns=[
            "batch_id",
            "batch_time",
            "input_rows",
            "input_rows_per_s",
            "processed_rows_per_s",
            "batch_duration_ms",
            *FRESHNESS_COLUMNS.values(),
        ],
    )
    df["batch_time"] = to_utc(df["batch_time"])
    df = df.astype({c: "float64" for c in FRESHNESS_COLUMNS.values()})
    return df.sort_values("batch_id", kind="stable").reset_index(drop=True)


def _freshness_cells(freshness: Mapping[str, int] | None) -> dict[str, float]:
    if not freshness:
        return dict.fromkeys(FRESHNESS_COLUMNS.values(), math.nan)
    return {col: float(freshness[key]) for key, col in FRESHNESS_COLUMNS.items()}


def users_band(frame: pd.DataFrame, sigmas: float = 2.0) -> pd.DataFrame:
    """A `metrics_frame` plus `users_lo`/`users_hi`: estimate ± `sigmas` HLL standard errors.

    The HyperLogLog's relative standard error is 1.04 / sqrt(m) (0.81 % at the job's p = 14);
    at small counts its linear-counting estimate is better than that, so the band is a safe
    upper bound on the error.
    """
    out = frame.copy()
    err = out["distinct_users"].astype("float64") * HLL_RELATIVE_ERROR * sigmas
    out["users_lo"] = (out["distinct_users"] - err).clip(lower=0)
    out["users_hi"] = out["distinct_users"] + err
    return out


def lateness_frame(
    rows: Sequence[WindowRow], services: Sequence[str] | None = None
) -> pd.DataFrame:
    """Per window: late events, stragglers, duplicates and the revision (highest of the services).

    `services` None: the `*` rows; else summed over those services.
    """
    picked, _ = _pick_services(rows, services)
    df = pd.DataFrame(
        [(w.window_start, w.late, w.stragglers, w.duplicates, w.revision) for w in picked],
        columns=["window_start", "late", "stragglers", "duplicates", "revision"],
    )
    df = df.groupby("window_start", as_index=False).agg(
        {"late": "sum", "stragglers": "sum", "duplicates": "sum", "revision": "max"}
    )
    df["window_start"] = to_utc(df["window_start"])
    return df.sort_values("window_start").reset_index(drop=True)


def digest_histogram(digest: TDigest, bins: int = 40) -> pd.DataFrame:
    """A histogram (lo, hi, count) of the values a t-digest summarises, from its centroids.

    Each centroid's weight goes to the bin holding its mean: exact for the digest's small
    centroids at the tails, approximate in the middle, which is what a histogram shows anyway.
    """
    means, weights = digest.centroids
    if not len(means):
        return pd.DataFrame({"lo": [], "hi": [], "count": []})
    lo, hi = float(digest.min), float(digest.max)
    if hi <= lo:
        hi = lo + 1.0
    counts, edges = np.histogram(means, bins=bins, range=(lo, hi), weights=weights)
    return pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": counts})


def what_if_frame(result: LatenessResult, points: int = 60) -> pd.DataFrame:
    """Allowed lateness (ms) -> share of events that would have been late, over a grid.

    The grid runs from 0 to just past the largest overdue seen (after which nothing is late).
    """
    top = float(result.overdue.max) if result.overdue.count else 0.0
    grid = np.unique(np.linspace(0.0, max(top * 1.05, 1000.0), points).round().astype(np.int64))
    return pd.DataFrame(
        {
            "allowed_lateness_ms": grid,
            "fraction_late": [result.fraction_late(int(v)) for v in grid],
        }
    )


def cdf_frame(
    aggs: Mapping[str, WindowAgg], services: Sequence[str], points: int = 101
) -> pd.DataFrame:
    """Latency CDF (service, latency_ms, fraction <= it) of each merged aggregate, from its digest.

    Services without latencies are left out.
    """
    q = np.linspace(0.0, 1.0, points)
    parts = []
    for svc in services:
        agg = aggs.get(svc)
        if agg is None or not agg.latency.count:
            continue
        parts.append(
            pd.DataFrame({"service": svc, "latency_ms": agg.latency.quantile(q), "fraction": q})
        )
    if not parts:
        return pd.DataFrame({"service": [], "latency_ms": [], "fraction": []})
    return pd.concat(parts, ignore_index=True)


def range_table(
    aggs: Mapping[str, WindowAgg], services: Sequence[str], range_ms: int
) -> pd.DataFrame:
    """One row per service: events, error rate, p50/p95/p99 and distinct users of the range.

    From the merged sketches, so `*` users count a user of two services once.
    """
    rows = []
    for svc in services:
        agg = aggs.get(svc)
        if agg is None:
            continue
        m = agg.metrics(range_ms)
        rows.append(
            {
                "service": svc,
                "events": int(m["count"]),
                "error rate %": round(100.0 * float(m["error_rate"]), 2),
                "p50 ms": _round(m.get("p50")),
                "p95 ms": _round(m.get("p95")),
                "p99 ms": _round(m.get("p99")),
                "distinct users": int(m["distinct_users"]),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "service",
            "events",
            "error rate %",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "distinct users",
        ],
    )


def _round(v: float | None) -> float | None:
    return None if v is None else round(float(v), 1)


def late_events_frame(events: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Kept late events as a table: broker time, service, event time, how far behind, where."""
    return pd.DataFrame(
        {
            "broker time (UTC)": to_utc([int(e.get("kafka_timestamp") or 0) for e in events]),
            "service": [e.get("service") for e in events],
            "event time (UTC)": to_utc([int(e["event_time"]) for e in events]),
            "behind watermark": [format_age(int(e.get("behind_ms") or 0)) for e in events],
            "partition:offset": [f"{e.get('partition')}:{e.get('offset')}" for e in events],
        }
    )


def job_starts(batches: Sequence[Mapping[str, Any]]) -> list[Annotation]:
    """Where the job was started or restarted, from its batch history (processing time).

    A start is the first batch of a run: Spark gives every start of a query a new run id (a
    restart from the checkpoint keeps the query id). The first batch kept counts only when it
    is the query's batch 0; before it the history was trimmed.
    """
    out: list[Annotation] = []
    previous: str | None = None
    for b in batches:
        run = b.get("run_id")
        if run is None:
            continue
        if (previous is None and int(b.get("batch_id", -1)) == 0) or (
            previous is not None and run != previous
        ):
            label = "job started" if int(b.get("batch_id", -1)) == 0 else "job restarted"
            t = int(b["batch_time"])
            out.append(
                Annotation("job_start", f"{label} (batch {b['batch_id']})", "processing", t, t)
            )
        previous = run
    return out
