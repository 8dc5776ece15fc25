"""The headline: the top row's live figures, of the stream and of the job.

Each figure (`Headline`) has a label, the value shown and what it is (the hover help). Pure
functions of the job's status, the windows and batch summaries read and the wall clock (ms).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.times import format_age
from tidegauge.core.durations import format_duration
from tidegauge.core.store import ALL_SERVICES, JobStatus, WindowRow

__all__ = ["Headline", "busiest_headline", "headline"]


@dataclass(frozen=True)
class Headline:
    """One figure of the top row: label, display value, and what it is (hover help)."""

    label: str
    value: str
    help: str


def _ms(v: Any) -> str:
    """Latency for a figure: one decimal under 100 ms, whole ms above (fits a narrow column)."""
    if v is None:
        return "–"
    return f"{v:,.1f} ms" if v < 100 else f"{v:,.0f} ms"


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
