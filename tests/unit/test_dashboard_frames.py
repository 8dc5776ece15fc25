"""The dashboard's panel numbers (dashboard/frames.py) and figures, against ground truth computed
here from raw values: no Redis, no Streamlit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboard import data, figures, frames
from sketches.tdigest import TDigest
from tidegauge.core.metrics import WindowAgg
from tidegauge.core.store import ArrivalRow, JobStatus, LatenessResult, WindowRow

pytestmark = pytest.mark.unit

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def built(make: Callable[..., figures.Figure], *args: Any, **kwargs: Any) -> go.Figure:
    """A figure function's dict as a validated `go.Figure`: a bad property name fails here."""
    return go.Figure(make(*args, **kwargs))


W = 10_000


def status(**kw: object) -> JobStatus:
    base = dict(
        batch_id=7,
        batch_time=T + 100_000,
        watermark=T + 50_000,
        input_rows=10,
        offsets={"0": 5},
        latest_offsets={"0": 9},
        batch_duration_ms=120,
        query_id="q",
        status_time=T + 100_000,
    )
    base.update(kw)
    return JobStatus(**base)  # type: ignore[arg-type]


def row(start: int, service: str, count: int, **kw: object) -> WindowRow:
    return WindowRow(start, start + W, service, count, count * 1000 / W, **kw)  # type: ignore[arg-type]


# --- staleness -------------------------------------------------------------------------------


def test_stale_after_prefers_the_flag_then_three_report_intervals_then_the_fallback() -> None:
    assert frames.stale_after_ms(status(report_interval_ms=2000), 9000, 5000) == 9000
    assert frames.stale_after_ms(status(report_interval_ms=2000), None, 5000) == 6000
    assert frames.stale_after_ms(status(), None, 5000) == 5000
    assert frames.stale_after_ms(None, None, 5000) == 5000
    # 3 intervals of 1 s: silent 3.0 s is not stale yet, 3.001 s is
    st = status(report_interval_ms=1000)
    limit = frames.stale_after_ms(st, None, 5000)
    assert not frames.status_view(st, st.status_time + 3000, limit).stale
    assert frames.status_view(st, st.status_time + 3001, limit).stale
    # a job falling behind its trigger (batches of 4.8 s) reports every ~4.8 s: not stale yet
    slow = status(report_interval_ms=1000, batch_duration_ms=4800)
    limit = frames.stale_after_ms(slow, None, 5000)
    assert limit == 14_400
    assert not frames.status_view(slow, slow.status_time + 6000, limit).stale
    assert frames.status_view(slow, slow.status_time + 14_401, limit).stale


# --- top row ---------------------------------------------------------------------------------


def test_headline_uses_the_newest_complete_window_and_range_totals() -> None:
    rows = [
        row(T, "*", 100, error_rate=0.01, p99=80.0, distinct_users=40, late=3, stragglers=1),
        row(T + W, "*", 200, error_rate=0.02, p99=90.0, distinct_users=50, late=2),
        row(T + 2 * W, "*", 20, error_rate=0.5, p99=999.0, distinct_users=5),  # still filling
        row(T + W, "api", 150, late=2),
    ]
    batches = [{"max_event_time": T + 2 * W + 3000}, {"max_event_time": None}]
    now = T + 100_000 + 2500
    h = {x.label: x.value for x in frames.headline(status(), rows, batches, now, 15 * 60_000)}
    assert h["Events/s"] == "20.0"  # window [T+10s, T+20s) ends before the max event time
    assert h["Error rate"] == "2.00 %"
    assert h["p99 latency"] == "90.0 ms"
    assert h["Distinct users"] == "50"
    assert h["Late events"] == "5"  # `*` rows only: the api row is part of them
    assert h["Stragglers"] == "1"
    assert h["Watermark delay"] == frames.format_age(now - (T + 50_000))
    assert h["Last batch age"] == "2.5s"


def test_headline_without_anything_yet_shows_dashes() -> None:
    h = {x.label: x.value for x in frames.headline(None, [], [], T, 60_000)}
    assert h["Events/s"] == "–" and h["Watermark delay"] == "–" and h["Last batch age"] == "–"
    assert h["Freshness p99"] == "–"
    assert h["Late events"] == "0"


def test_headline_freshness_is_the_p99_of_the_latest_batch_with_records() -> None:
    commit = T + 99_000
    fresh = {
        "batch_id": 6,
        "commit_time": commit,
        "records": 3000,
        "p50_ms": 120,
        "p99_ms": 1_480,
        "max_ms": 62_250,
    }
    now = commit + 2_000
    # the job's last batch (#7) had no records: the figure is that of batch #6
    heads = frames.headline(status(freshness=fresh), [], [], now, 60_000)
    h = next(x for x in heads if x.label == "Freshness p99")
    assert h.value == "1.4s"  # 1,480 ms in the row's 0.1 s steps (rounded down, like the ages)
    assert "broker timestamp → committed to Redis" in h.help
    assert "batch #6 (3,000 records, committed 2.0s ago)" in h.help
    assert "p50 120ms, p99 1s480ms, max 1m2s250ms" in h.help
    # the job's three figures come last (the app puts them on a line of their own)
    assert [x.label for x in heads][-3:] == ["Watermark delay", "Freshness p99", "Last batch age"]
    assert len(heads) == 9


def test_headline_freshness_before_any_batch_with_records() -> None:
    h = next(x for x in frames.headline(status(), [], [], T, 60_000) if x.label == "Freshness p99")
    assert h.value == "–" and h.help == "no batch with records yet"


# --- series ------------------------------------------------------------------------------------


def test_arrivals_frame_takes_the_total_or_sums_the_chosen_services() -> None:
    arrivals = {
        "event": [
            ArrivalRow("event", T, T + W, "*", 30, 1, 2),
            ArrivalRow("event", T, T + W, "api", 10, 1, 0),
            ArrivalRow("event", T, T + W, "web", 20, 0, 2),
        ],
        "processing": [
            ArrivalRow("processing", T + W, T + 2 * W, "*", 30, 1, 2),
            ArrivalRow("processing", T + W, T + 2 * W, "api", 10, 1, 0),
            ArrivalRow("processing", T + W, T + 2 * W, "web", 20, 0, 2),
        ],
    }
    total = frames.arrivals_frame(arrivals)
    assert total[["domain", "events", "late", "stragglers"]].values.tolist() == [
        ["event", 30, 1, 2],
        ["processing", 30, 1, 2],
    ]
    assert total["events_per_s"].tolist() == [3.0, 3.0]
    assert total["window_start"].iloc[1] == pd.Timestamp("2026-01-01T00:00:10")
    web = frames.arrivals_frame(arrivals, ["web"])
    assert web["events"].tolist() == [20, 20]
    both = frames.arrivals_frame(arrivals, ["api", "web"])
    assert both["events"].tolist() == [30, 30] and both["late"].tolist() == [1, 1]


def test_watermark_frame_skips_batches_before_the_first_event() -> None:
    batches = [
        {"batch_time": T, "watermark": 0, "max_event_time": None},
        {"batch_time": T + 1000, "watermark": T - 30_000, "max_event_time": T},
        {"batch_time": T + 2000, "watermark": T - 25_000, "max_event_time": T + 5000},
    ]
    wm = frames.watermark_frame(batches)
    assert len(wm) == 2
    assert wm["watermark"].tolist() == [
        pd.Timestamp("2025-12-31T23:59:30"),
        pd.Timestamp("2025-12-31T23:59:35"),
    ]
    assert wm["max_event_time"].iloc[1] == pd.Timestamp("2026-01-01T00:00:05")


def test_health_frame_orders_batches_and_keeps_rates() -> None:
    batches = [
        {
            "batch_id": 2,
            "batch_time": T + 1000,
            "input_rows": 5,
            "input_rows_per_s": 5.0,
            "processed_rows_per_s": 50.0,
            "batch_duration_ms": 100,
        },
        {"batch_id": 1, "batch_time": T, "input_rows": 3, "batch_duration_ms": 90},
    ]
    h = frames.health_frame(batches)
    assert h["batch_id"].tolist() == [1, 2]
    assert h["processed_rows_per_s"].tolist() == [0.0, 50.0]
    assert h["batch_duration_ms"].tolist() == [90, 100]
    # history written before the job measured freshness: NaN, not a fake zero
    assert h[["freshness_p50_ms", "freshness_p99_ms", "freshness_max_ms"]].isna().all().all()


def test_health_frame_freshness_per_batch_nan_without_records() -> None:
    def fresh(batch_id: int, p50: int, p99: int, top: int) -> dict[str, int]:
        return {
            "batch_id": batch_id,
            "commit_time": T + batch_id * 1000 + 300,
            "records": 10,
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": top,
        }

    batches: list[dict[str, object]] = [
        {"batch_id": 3, "batch_time": T + 3000, "freshness": fresh(3, 900, 1700, 1750)},
        {"batch_id": 1, "batch_time": T + 1000, "freshness": fresh(1, 400, 650, 700)},
        {"batch_id": 2, "batch_time": T + 2000, "freshness": None},  # no records
        {"batch_id": 4, "batch_time": T + 4000},  # written by an older job: no key at all
    ]
    h = frames.health_frame(batches)
    assert h["batch_id"].tolist() == [1, 2, 3, 4]
    for col in ("freshness_p50_ms", "freshness_p99_ms", "freshness_max_ms"):
        assert h[col].dtype == np.float64
        assert h[col].isna().tolist() == [False, True, False, True]
    got = h.loc[[0, 2], ["freshness_p50_ms", "freshness_p99_ms", "freshness_max_ms"]]
    assert got.values.tolist() == [[400, 650, 700], [900, 1700, 1750]]


def test_users_band_is_two_standard_errors_of_the_hll() -> None:
    frame = frames.metrics_frame([row(T, "*", 10, distinct_users=10_000)])
    band = frames.users_band(frame)
    se = 1.04 / np.sqrt(2**14)
    assert band["users_hi"].iloc[0] == pytest.approx(10_000 * (1 + 2 * se))
    assert band["users_lo"].iloc[0] == pytest.approx(10_000 * (1 - 2 * se))


def test_lateness_frame_sums_counts_and_keeps_the_highest_revision() -> None:
    rows = [
        row(T, "*", 10, late=4, stragglers=3, duplicates=2, revision=2),
        row(T, "api", 5, late=1, stragglers=3, duplicates=2, revision=2),
        row(T, "web", 5, late=3, stragglers=0, revision=0),
        row(T + W, "*", 10),
    ]
    cols = ["late", "stragglers", "duplicates", "revision"]
    assert frames.lateness_frame(rows)[cols].values.tolist() == [[4, 3, 2, 2], [0, 0, 0, 0]]
    picked = frames.lateness_frame(rows, ["api", "web"])
    assert picked[cols].values.tolist() == [[4, 3, 2, 2]]


# --- sketches into tables ------------------------------------------------------------------------


def test_digest_histogram_matches_a_histogram_of_the_raw_values() -> None:
    rng = np.random.default_rng(5)
    values = rng.exponential(2000.0, 50_000)
    digest = TDigest()
    digest.update(values)
    hist = frames.digest_histogram(digest, bins=20)
    assert hist["count"].sum() == pytest.approx(len(values))
    truth, _ = np.histogram(values, bins=20, range=(values.min(), values.max()))
    # centroid means stand in for their values: each bin within 2 % of all values of the truth
    assert np.abs(hist["count"].to_numpy() - truth).max() <= 0.02 * len(values)
    assert frames.digest_histogram(TDigest()).empty


def test_what_if_frame_falls_to_zero_past_the_largest_overdue() -> None:
    overdue = TDigest()
    overdue.update(np.array([0.0] * 50 + [4000.0] * 30 + [9000.0] * 20))
    res = LatenessResult("*", "10000", T, T + W, 1, 200, 20, 50, TDigest(), overdue)
    f = frames.what_if_frame(res)
    assert f["fraction_late"].iloc[0] == pytest.approx(100 / 200)
    assert f["fraction_late"].iloc[-1] == 0.0
    assert (np.diff(f["fraction_late"]) <= 1e-12).all()  # more lateness allowed, fewer late
    mid = f.loc[(f["allowed_lateness_ms"] - 6500).abs().idxmin()]
    assert mid["fraction_late"] == pytest.approx(20 / 200, abs=0.01)  # only the 9 s ones


def test_cdf_frame_and_range_table_come_from_the_merged_sketches() -> None:
    rng = np.random.default_rng(9)
    lat = {s: rng.lognormal(np.log(m), 0.5, 5000) for s, m in (("api", 30.0), ("web", 90.0))}
    aggs = {}
    for s, v in lat.items():
        agg = WindowAgg()
        agg.add(
            v,
            np.where(rng.random(5000) < 0.1, 503, 200),
            np.array([f"{s}{i % 700}" for i in range(5000)], dtype=object),
        )
        aggs[s] = agg
    aggs["*"] = WindowAgg.merged([aggs["api"], aggs["web"]])
    cdf = frames.cdf_frame(aggs, ["*", "api", "web", "nobody"])
    assert set(cdf["service"]) == {"*", "api", "web"}
    for s, v in (
        ("api", lat["api"]),
        ("web", lat["web"]),
        ("*", np.concatenate(list(lat.values()))),
    ):
        part = cdf[cdf["service"] == s]
        median = np.interp(0.5, part["fraction"], part["latency_ms"])
        assert median == pytest.approx(np.median(v), rel=0.02)
    table = frames.range_table(aggs, ["*", "api", "web"], 60_000).set_index("service")
    assert table.loc["*", "events"] == 10_000
    assert table.loc["*", "p99 ms"] == pytest.approx(
        np.quantile(np.concatenate(list(lat.values())), 0.99), rel=0.03
    )
    assert table.loc["api", "distinct users"] == pytest.approx(700, rel=0.03)
    assert table.loc["*", "distinct users"] == pytest.approx(1400, rel=0.03)


def test_filters_pick_known_services_or_all() -> None:
    f = data.Filters(services=("api", "gone"))
    assert f.selected(["api", "web"]) == ["api"]
    assert data.Filters().selected(["api", "web"]) == ["api", "web"]
    with pytest.raises(ValueError):
        data.Filters(kind="rolling")  # not a window kind


# --- figures -------------------------------------------------------------------------------------


def _arrivals() -> pd.DataFrame:
    return frames.arrivals_frame(
        {
            "event": [
                ArrivalRow("event", T + i * W, T + (i + 1) * W, "*", 100, 0, 0) for i in range(6)
            ],
            "processing": [ArrivalRow("processing", T + 5 * W, T + 6 * W, "*", 600, 0, 0)],
            "broker": [
                ArrivalRow("broker", T + i * W, T + (i + 1) * W, "*", 100, 0, 0) for i in range(6)
            ],
        }
    )


def test_time_domains_keeps_its_traces_whatever_the_toggle() -> None:
    wm = frames.watermark_frame(
        [{"batch_time": T + 60_000, "watermark": T + 20_000, "max_event_time": T + 50_000}]
    )
    off = built(figures.time_domains, _arrivals(), wm, show_broker=False)
    on = built(figures.time_domains, _arrivals(), wm, show_broker=True)
    names = [t.name for t in off.data]
    assert names == [t.name for t in on.data]
    assert names[:3] == ["by event time", "by processing time", "by broker time"]
    assert "watermark" in names
    assert off.data[2].visible is False and on.data[2].visible is True
    assert list(off.data[1].y) == [60.0]  # the catch-up spike: 600 events in one 10 s window
    assert off.layout.uirevision == figures.UIREVISION


def test_panel_figures_render_data_and_say_when_there_is_none() -> None:
    health = frames.health_frame(
        [{"batch_id": 1, "batch_time": T, "input_rows": 3, "batch_duration_ms": 90}]
    )
    assert len(built(figures.pipeline_health, health).data) == 6  # 2 rates, duration, 3 freshness
    late = frames.lateness_frame([row(T, "*", 10, late=4, stragglers=3, duplicates=5, revision=2)])
    fig = built(figures.lateness_windows, late, window_size_ms=W)
    assert [list(t.y) for t in fig.data] == [[4], [3], [5], [2]]
    overdue = TDigest()
    overdue.update(np.array([0.0, 5000.0]))
    res = LatenessResult("*", "10000", T, T + W, 1, 2, 1, 1, TDigest(), overdue)
    wi = built(figures.what_if, frames.what_if_frame(res), chosen_ms=0, job_ms=5000)
    assert wi.data[1].y[0] == pytest.approx(1.0)
    for empty in (
        built(figures.pipeline_health, frames.health_frame([])),
        built(figures.lateness_histogram, frames.digest_histogram(TDigest())),
        built(figures.latency_cdf, frames.cdf_frame({}, ["*"])),
    ):
        assert not empty.data and empty.layout.annotations


def test_job_starts_are_the_first_batch_of_each_run() -> None:
    def b(i: int, run: str | None) -> dict[str, object]:
        return {"batch_id": i, "batch_time": 1_000 * i, "run_id": run}

    starts = frames.job_starts([b(0, "r1"), b(1, "r1"), b(2, "r2"), b(3, "r2"), b(4, None)])
    assert [(a.start, a.label, a.domain) for a in starts] == [
        (0, "job started (batch 0)", "processing"),
        (2_000, "job restarted (batch 2)", "processing"),
    ]
    # a history trimmed before the first batch does not invent a start
    assert frames.job_starts([b(7, "r1"), b(8, "r1")]) == []
