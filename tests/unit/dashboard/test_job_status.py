"""The job's status as the page shows it (dashboard/job_status.py): staleness and offsets."""

from __future__ import annotations

import pytest

from dashboard.job_status import (
    catch_up,
    offsets_frame,
    offsets_summary,
    stale_after_ms,
    status_view,
)
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


def _history(
    batches: int, per_batch: int, arriving_per_s: float, backlog0: int, every_ms: int = 2_000
) -> list[dict]:
    """Batches every `every_ms` taking `per_batch` records from a topic that grows at a rate."""
    out, done, end0 = [], 0, backlog0
    for i in range(batches):
        t = T0 + i * every_ms
        done += per_batch
        end = end0 + round(arriving_per_s * i * every_ms / 1000)
        out.append(
            {
                "batch_id": i,
                "batch_time": t,
                "input_rows": per_batch,
                "offsets": {"0": done // 2, "1": done - done // 2},
                "topic_end_time": t,
                "topic_end_offsets": {"0": end // 2, "1": end - end // 2},
            }
        )
    return out


def test_catch_up_estimates_when_the_backlog_is_gone_at_the_current_pace() -> None:
    # 50,000 records per 2 s batch (25,000/s taken) against 5,000/s arriving: 20,000/s gained.
    history = _history(20, 50_000, 5_000, 3_000_000)
    behind = catch_up(history)
    assert behind is not None
    last = history[-1]
    backlog = sum(last["topic_end_offsets"].values()) - sum(last["offsets"].values())
    assert behind.backlog == backlog
    assert behind.processed_per_s == pytest.approx(25_000)
    assert behind.arriving_per_s == pytest.approx(5_000, rel=1e-3)
    assert behind.eta_s == pytest.approx(backlog / 20_000, rel=1e-3)


def test_catch_up_follows_a_fresh_job_that_speeds_up() -> None:
    # a fresh JVM: 2 s batches of 50,000 records (25,000/s) for 20 s, then of 100,000 (50,000/s)
    history = _history(20, 50_000, 5_000, 9_000_000)
    for b in history[10:]:
        b["input_rows"] = 100_000
    behind = catch_up(history)
    assert behind is not None
    assert behind.processed_per_s == pytest.approx(50_000)  # the pace now, not the average


def test_catch_up_says_when_the_job_is_not_gaining_and_when_it_is_not_behind() -> None:
    losing = catch_up(_history(10, 10_000, 8_000, 1_000_000))  # 5,000/s taken, 8,000 arriving
    assert losing is not None and losing.eta_s is None
    caught_up = _history(10, 10_000, 0, 0)
    for b in caught_up:  # the topic ends where the job is
        b["topic_end_offsets"] = dict(b["offsets"])
    assert catch_up(caught_up) is None
    assert (
        catch_up([{k: v for k, v in b.items() if not k.startswith("topic_end")} for b in caught_up])
        is None
    )
