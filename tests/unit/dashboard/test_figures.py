"""Pure tests of the dashboard's plotly figures (dashboard/figures.py), validated by plotly."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboard import chart, figures
from dashboard.health import health_frame
from dashboard.latency_range import cdf_frame
from dashboard.lateness import digest_histogram, lateness_frame, what_if_frame
from dashboard.time_domains import arrivals_frame, watermark_frame
from dashboard.windows import metrics_frame, users_band, windows_frame
from sketches.tdigest import TDigest
from tests.unit.dashboard.fixtures import T0, T, W, rows_for, sketched_row
from tests.unit.dashboard.fixtures import plain_row as row
from tidegauge.core.store import ArrivalRow, LatenessResult
from tidegauge.core.window_agg import WindowAgg

pytestmark = pytest.mark.unit


def built(make: Callable[..., figures.Figure], *args: Any, **kwargs: Any) -> go.Figure:
    """A figure function's dict as a validated `go.Figure`: a bad property name fails here."""
    return go.Figure(make(*args, **kwargs))


def test_one_trace_per_service_plus_dashed_thicker_total() -> None:
    frame = windows_frame(rows_for({"web": [10, 20, 30], "api": [1, 2, 3], "db": [4]}))
    fig = built(figures.events_per_second, frame, window_size_ms=W)
    names = [t.name for t in fig.data]
    assert names == [figures.TOTAL_NAME, "api", "db", "web"]
    total, web = fig.data[0], fig.data[3]
    assert total.line.dash == "dash"
    assert total.line.width > (web.line.width or 2)
    assert web.line.dash is None
    assert total.visible is True and web.visible is True
    assert list(web.y) == [1.0, 2.0, 3.0]
    assert list(total.y) == [1.5, 2.2, 3.3]
    assert list(fig.data[1].customdata[:, 0]) == [1, 2, 3]  # raw counts, for the hover


def test_total_is_hidden_not_removed_so_trace_indices_stay_put() -> None:
    frame = windows_frame(rows_for({"web": [10], "api": [1]}))
    fig = built(figures.events_per_second, frame, show_total=False)
    assert [t.name for t in fig.data] == [figures.TOTAL_NAME, "api", "web"]
    assert fig.data[0].visible is False


def test_trace_order_follows_the_given_order_and_keeps_absent_services() -> None:
    # plotly.js matches legend toggles to traces by index (Streamlit drops uids): a service
    # appearing or leaving the range must not shift the others
    frame = windows_frame(rows_for({"web": [1], "api": [2], "new": [3]}))
    fig = built(figures.events_per_second, frame, services=["web", "gone", "api"])
    assert [t.name for t in fig.data] == [figures.TOTAL_NAME, "web", "gone", "api", "new"]
    assert len(fig.data[2].x) == 0


def test_uirevision_is_constant_across_refreshes() -> None:
    a = built(figures.events_per_second, windows_frame(rows_for({"web": [1]})))
    b = built(figures.events_per_second, windows_frame(rows_for({"web": [1, 2], "api": [3]})))
    assert a.layout.uirevision == b.layout.uirevision == figures.UIREVISION
    # no explicit range: one that moved with each refresh would undo the user's zoom
    assert b.layout.xaxis.range is None


def test_time_axis_is_utc_dates() -> None:
    frame = windows_frame(rows_for({"web": [1, 2]}))
    fig = built(figures.events_per_second, frame, window_size_ms=W)
    assert fig.layout.xaxis.type == "date"
    assert "UTC" in fig.layout.xaxis.title.text
    assert "10s windows" in fig.layout.xaxis.title.text
    xs = list(pd.to_datetime(fig.data[0].x))
    assert xs == [pd.Timestamp("2026-11-18T11:06:40"), pd.Timestamp("2026-11-18T11:06:50")]
    # what reaches the browser: ISO strings without an offset (plotly.js has no time zones)
    sent = chart.figure_json(figures.events_per_second(frame, window_size_ms=W)).decode()
    assert '"2026-11-18T11:06:40' in sent
    assert "+00:00" not in sent
    assert json.loads(sent)["data"][0]["x"][0].startswith("2026-11-18T11:06:40")


@pytest.mark.parametrize("frame", [windows_frame([]), pd.DataFrame()])
def test_empty_input_gives_valid_figure_with_message(frame: pd.DataFrame) -> None:
    fig = built(figures.events_per_second, frame)
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 0
    assert fig.layout.uirevision == figures.UIREVISION
    assert len(fig.layout.annotations) == 1
    assert "No windows yet" in fig.layout.annotations[0].text
    go.Figure(fig.to_dict())  # round-trips: valid plotly


def test_open_windows_are_shaded_from_the_watermark() -> None:
    frame = windows_frame(rows_for({"web": [1, 2, 3, 4]}))  # starts T0 .. T0+30s
    wm = datetime(2026, 11, 18, 11, 7, 5)  # T0 + 25s: windows from T0+20s on are open
    fig = built(figures.events_per_second, frame, window_size_ms=W, watermark=wm)
    (shape,) = fig.layout.shapes
    assert pd.Timestamp(shape.x0) == pd.Timestamp("2026-11-18T11:06:55")  # wm - 10s
    assert pd.Timestamp(shape.x1) == pd.Timestamp("2026-11-18T11:07:10")  # newest start
    # every window final: nothing shaded
    late_wm = datetime(2026, 11, 18, 11, 8, 0)
    assert not built(
        figures.events_per_second, frame, window_size_ms=W, watermark=late_wm
    ).layout.shapes


def test_latency_users_and_cdf_figures_carry_the_rows_values() -> None:
    rows = rows_for({"web": [40, 50, 60], "api": [5, 0, 7]})
    metrics = metrics_frame(rows)
    lat = built(figures.latency_percentiles, metrics, "web", window_size_ms=W)
    assert [t.name for t in lat.data] == list(figures.LATENCY_PERCENTILES)
    web = [r for r in rows if r.service == "web"]
    assert list(lat.data[2].y) == pytest.approx([r.p99 for r in web])
    assert [int(c[0]) for c in lat.data[0].customdata] == [r.latency_count for r in web]
    # api's middle window has no latencies: a gap (NaN), not a zero
    api = built(figures.latency_percentiles, metrics, "api")
    assert np.isnan(api.data[0].y[1]) and api.data[0].y[0] > 0

    band = users_band(metrics)
    users = built(figures.distinct_users, band, services=["web", "api"])
    fills = [t for t in users.data if t.fill == "toself"]
    lines = [t for t in users.data if t.fill != "toself"]
    assert len(fills) == 3  # *, web, api: the band under each shown line
    assert [t.name for t in lines] == [figures.TOTAL_NAME, "web", "api"]
    assert list(lines[1].y) == [r.distinct_users for r in web]
    hi, lo = band[band["service"] == "web"]["users_hi"], band[band["service"] == "web"]["users_lo"]
    assert list(fills[1].y) == pytest.approx([*hi, *lo[::-1]])  # a closed polygon

    aggs = {"*": WindowAgg(), "web": WindowAgg()}
    for a in aggs.values():
        a.add(np.array([10.0, 20.0, 30.0, 1000.0]), np.array([200] * 4), np.array(["u"] * 4))
    cdf = built(figures.latency_cdf, cdf_frame(aggs, ["*", "web"]), ["web"])
    assert [t.name for t in cdf.data] == [figures.TOTAL_NAME, "web"]
    assert cdf.data[0].x[0] == pytest.approx(10.0) and cdf.data[0].x[-1] == pytest.approx(1000.0)
    assert cdf.layout.xaxis.type == "log"


def test_lateness_histogram_is_in_seconds_with_log_counts() -> None:
    digest = TDigest()
    digest.update(np.array([0.0, 500.0, 1000.0, 60_000.0]))
    fig = built(figures.lateness_histogram, digest_histogram(digest, bins=4))
    (bars,) = fig.data
    assert sum(bars.y) == 4
    assert bars.x[0] == pytest.approx(7.5) and bars.width[0] == pytest.approx(15.0)
    assert fig.layout.yaxis.type == "log"


def test_stacked_figures_share_the_time_axis() -> None:
    health = health_frame(
        [{"batch_id": i, "batch_time": T0 + i * 1000, "batch_duration_ms": 90} for i in range(3)]
    )
    wm = watermark_frame(
        [{"batch_time": T0 + 60_000, "watermark": T0 + 20_000, "max_event_time": T0 + 50_000}]
    )
    for fig, rows in (
        (built(figures.pipeline_health, health), 3),
        (built(figures.time_domains, arrivals_frame({}), wm), 2),
    ):
        suffixes = ["", *(str(i) for i in range(2, rows + 1))]  # x, x2, x3: top down
        for a in suffixes[:-1]:  # zooming one row zooms the others; labels only at the bottom
            assert fig.layout[f"xaxis{a}"].matches == f"x{rows}"
            assert fig.layout[f"xaxis{a}"].showticklabels is False
        assert fig.layout[f"xaxis{rows}"].title.text
        domains = [fig.layout[f"yaxis{a}"].domain for a in suffixes]
        assert domains[0][1] == 1 and domains[-1][0] == 0
        for upper, lower in itertools.pairwise(domains):
            assert lower[1] < upper[0]


def fresh(batch_id: int, records: int, p50: int, p99: int, top: int) -> dict[str, int]:
    """A batch's freshness as the job stores it (Freshness.to_dict())."""
    return {
        "batch_id": batch_id,
        "commit_time": T0 + batch_id * 1000 + 400,
        "records": records,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": top,
    }


def test_pipeline_health_draws_freshness_per_batch_below_the_duration() -> None:
    b4, b6 = fresh(4, 50, 800, 1900, 2400), fresh(6, 9, 700, 1200, 1300)
    freshness = {4: b4, 5: None, 6: b6}
    batches = [
        {"batch_id": b, "batch_time": T0 + b * 1000, "batch_duration_ms": 300, "freshness": f}
        for b, f in freshness.items()
    ]
    fig = built(figures.pipeline_health, health_frame(batches))
    assert [t.name for t in fig.data] == [
        "input rows/s",
        "processed rows/s",
        "batch duration (ms)",
        "freshness p50",
        "freshness p99",
        "freshness max",
    ]
    by_name = {t.name: t for t in fig.data}
    for name, key in (("freshness p50", "p50_ms"), ("freshness p99", "p99_ms")):
        y = list(by_name[name].y)
        assert [y[0], y[2]] == [b4[key], b6[key]]
        assert np.isnan(y[1])  # the batch without records is a gap, not a zero
    assert list(by_name["freshness max"].y)[::2] == [b4["max_ms"], b6["max_ms"]]
    for name in ("freshness p50", "freshness p99", "freshness max"):
        t = by_name[name]
        assert t.xaxis == "x3" and t.yaxis == "y3" and t.connectgaps is False
        assert list(t.customdata[:, 0]) == [4, 5, 6]  # the batch id, for the hover
    assert fig.layout.yaxis3.title.text == "freshness (ms)"
    assert by_name["batch duration (ms)"].yaxis == "y2"


@pytest.mark.parametrize(("revisions", "step"), [([0, 1, 1], 1), ([0, 3], 1), ([2, 12], 3)])
def test_the_revision_axis_labels_whole_numbers_only(revisions: list[int], step: int) -> None:
    frame = pd.DataFrame(
        {
            "window_start": pd.to_datetime([10_000 * i for i in range(len(revisions))], unit="ms"),
            "late": 0,
            "stragglers": 0,
            "duplicates": 0,
            "revision": revisions,
        }
    )
    axis = built(figures.lateness_windows, frame).layout.yaxis2
    assert (axis.tick0, axis.dtick) == (0, step)  # 0, 1, 2 ... (or 0, 3, 6 ...): no 0.25 steps


def _arrivals() -> pd.DataFrame:
    return arrivals_frame(
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
    wm = watermark_frame(
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
    health = health_frame(
        [{"batch_id": 1, "batch_time": T, "input_rows": 3, "batch_duration_ms": 90}]
    )
    assert len(built(figures.pipeline_health, health).data) == 6  # 2 rates, duration, 3 freshness
    late = lateness_frame([row(T, "*", 10, late=4, stragglers=3, duplicates=5, revision=2)])
    fig = built(figures.lateness_windows, late, window_size_ms=W)
    assert [list(t.y) for t in fig.data] == [[4], [3], [5], [2]]
    overdue = TDigest()
    overdue.update(np.array([0.0, 5000.0]))
    res = LatenessResult("*", "10000", T, T + W, 1, 2, 1, 1, TDigest(), overdue)
    wi = built(figures.what_if, what_if_frame(res), chosen_ms=0, job_ms=5000)
    assert wi.data[1].y[0] == pytest.approx(1.0)
    for empty in (
        built(figures.pipeline_health, health_frame([])),
        built(figures.lateness_histogram, digest_histogram(TDigest())),
        built(figures.latency_cdf, cdf_frame({}, ["*"])),
    ):
        assert not empty.data and empty.layout.annotations


def test_the_rolling_p99_stops_at_the_newest_data_not_a_window_later() -> None:
    """Sliding 60 s windows every 10 s: those holding the newest event (at T0 + 95 s) end up to
    a minute later. The dashed line is drawn at window ends: only up to the newest window's
    end (T0 + 100 s), where the other lines end too."""
    rows = rows_for({"web": [40] * 10})  # tumbling windows T0 .. T0 + 100 s
    sliding = [
        sketched_row(start, "web", 60, size=60_000) for start in range(T0 - 50_000, T0 + 100_000, W)
    ]
    fig = built(
        figures.latency_percentiles,
        metrics_frame(rows),
        "web",
        window_size_ms=W,
        rolling=metrics_frame(sliding),
        rolling_size_ms=60_000,
    )
    rolling = fig.data[3]
    ends = [pd.Timestamp(x).value // 1_000_000 for x in rolling.x]
    newest_end = T0 + 100_000
    assert max(ends) == newest_end  # the last rolling point: the minute before the newest end
    assert ends == [
        s + 60_000 for s in range(T0 - 50_000, T0 + 100_000, W) if s + 60_000 <= newest_end
    ]
