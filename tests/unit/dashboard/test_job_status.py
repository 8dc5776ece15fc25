"""The job's status as the page shows it (dashboard/job_status.py): staleness and offsets."""

from __future__ import annotations

import pytest

from dashboard.job_status import offsets_frame, offsets_summary, stale_after_ms, status_view
from tests.unit.dashboard.fixtures import T0, reporting_status
from tidegauge.core.store import JobStatus

pytestmark = pytest.mark.unit


def status(**kw: object) -> JobStatus:
    base: dict[str, object] = dict(
        batch_id=7,
        batch_time=T0 + 60_000,
        watermark=T0 + 30_000,
        input_rows=1234,
        offsets={"0": 100, "1": 90, "2": 80},
        latest_offsets={"0": 100, "1": 95, "2": 80},
        batch_duration_ms=321,
        query_id="q",
    )
    base.update(kw)
    return JobStatus(**base)  # type: ignore[arg-type]


def test_stale_after_prefers_the_flag_then_three_report_intervals_then_the_fallback() -> None:
    assert stale_after_ms(reporting_status(report_interval_ms=2000), 9000, 5000) == 9000
    assert stale_after_ms(reporting_status(report_interval_ms=2000), None, 5000) == 6000
    assert stale_after_ms(reporting_status(), None, 5000) == 5000
    assert stale_after_ms(None, None, 5000) == 5000
    # 3 intervals of 1 s: silent 3.0 s is not stale yet, 3.001 s is
    st = reporting_status(report_interval_ms=1000)
    limit = stale_after_ms(st, None, 5000)
    assert not status_view(st, st.status_time + 3000, limit).stale
    assert status_view(st, st.status_time + 3001, limit).stale
    # a job falling behind its trigger (batches of 4.8 s) reports every ~4.8 s: not stale yet
    slow = reporting_status(report_interval_ms=1000, batch_duration_ms=4800)
    limit = stale_after_ms(slow, None, 5000)
    assert limit == 14_400
    assert not status_view(slow, slow.status_time + 6000, limit).stale
    assert status_view(slow, slow.status_time + 14_401, limit).stale


@pytest.mark.parametrize(
    ("age_ms", "stale_after_ms", "stale"),
    [
        (0, 5000, False),
        (5000, 5000, False),  # exactly at the threshold: not yet stale
        (5001, 5000, True),
        (-200, 5000, False),  # dashboard clock behind the job's
    ],
)
def test_status_view_staleness(age_ms: int, stale_after_ms: int, stale: bool) -> None:
    st = status()
    view = status_view(st, st.batch_time + age_ms, stale_after_ms)
    assert view.stale is stale
    assert view.batch_age_ms == age_ms


def test_status_view_watermark_delay_and_none_yet() -> None:
    st = status()
    view = status_view(st, st.watermark + 45_000, 5000)
    assert view.watermark_ms == st.watermark
    assert view.watermark_delay_ms == 45_000
    assert view.batch_id == 7 and view.input_rows == 1234

    view0 = status_view(status(watermark=0), T0, 5000)
    assert view0.watermark_ms is None and view0.watermark_delay_ms is None


def test_offsets_frame_lag_and_numeric_partition_order() -> None:
    st = status(offsets={"10": 5, "2": 7}, latest_offsets={"2": 9, "10": 5, "3": 1})
    df = offsets_frame(st)
    assert list(df["partition"]) == ["2", "3", "10"]
    assert list(df["lag"].astype(object).where(df["lag"].notna(), None)) == [2, None, 0]
    assert offsets_summary(df) == "p2 **7** (lag 2) · p10 **5**"


def test_offsets_summary_when_nothing_committed() -> None:
    df = offsets_frame(status(offsets={}, latest_offsets={}))
    assert offsets_summary(df) == "none yet"
