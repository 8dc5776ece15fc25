"""Pure tests of the dashboard's frames (dashboard/frames.py) and figures (dashboard/figures.py)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboard import chart, figures, frames
from dashboard.run import (
    PLOTLY_JS,
    app_settings,
    install_plotly_js,
    plotly_js_source,
    streamlit_command,
)
from sketches.tdigest import TDigest
from tidegauge.core.config import DashboardSettings, RedisSettings
from tidegauge.core.metrics import WindowAgg
from tidegauge.core.store import DeadLetter, JobStatus, WindowRow
from tidegauge.core.windows import WindowSpec

T0 = 1_795_000_000_000  # 2026-11-18T11:06:40Z, a multiple of 10 s
W = 10_000


def built(make: Callable[..., figures.Figure], *args: Any, **kwargs: Any) -> go.Figure:
    """A figure function's dict as a validated `go.Figure`: a bad property name fails here."""
    return go.Figure(make(*args, **kwargs))


def row(start: int, service: str, count: int, size: int = W) -> WindowRow:
    """A row as `read_windows` returns it: every metric of a WindowAgg of `count` events."""
    spec = WindowSpec.tumbling(size)
    rng = np.random.default_rng([start % 1_000_003, count, len(service)])
    agg = WindowAgg()
    agg.add(
        rng.lognormal(np.log(30.0), 0.5, count),
        rng.choice(np.array([200, 404, 503]), count, p=[0.9, 0.08, 0.02]),
        np.array([f"{service}-{u}" for u in rng.integers(0, 50, count)], dtype=object),
    )
    metrics = agg.metrics(size)
    names = {f.name for f in fields(WindowRow)}
    return WindowRow(
        window_start=start,
        window_end=start + size,
        service=service,
        spec=spec.key,
        kind=spec.kind,
        **{k: v for k, v in metrics.items() if k in names},
    )


def rows_for(services: dict[str, list[int]], t0: int = T0) -> list[WindowRow]:
    """Windows of W starting at t0, one list of counts per service, plus the `*` totals."""
    out = []
    n = max(len(v) for v in services.values())
    for i in range(n):
        start = t0 + i * W
        total = 0
        for svc, counts in services.items():
            if i < len(counts):
                out.append(row(start, svc, counts[i]))
                total += counts[i]
        out.append(row(start, "*", total))
    return out


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


# --- frames.py ----------------------------------------------------------------------------


def test_windows_frame_columns_types_and_order() -> None:
    rows = rows_for({"web": [10, 20], "api": [5, 0]})
    df = frames.windows_frame(list(reversed(rows)))
    assert list(df.columns) == frames.WINDOW_COLUMNS
    assert list(df["service"]) == ["*", "*", "api", "api", "web", "web"]
    assert df["window_start"].dt.tz is None  # naive, meaning UTC
    assert df.loc[0, "window_start"] == pd.Timestamp("2026-11-18T11:06:40")
    assert df.loc[0, "window_end"] == pd.Timestamp("2026-11-18T11:06:50")
    assert list(df[df["service"] == "web"]["events_per_s"]) == [1.0, 2.0]
    assert df["count"].dtype == "int64"


def test_windows_frame_leaves_out_the_other_metrics() -> None:
    rows = rows_for({"web": [10, 20]})
    assert rows[0].p99 is not None and rows[0].spec == "10000"  # the rows carry them...
    df = frames.windows_frame(rows)
    assert list(df.columns) == frames.WINDOW_COLUMNS  # ...the chart's frame does not
    assert list(df["count"]) == [10, 20, 10, 20]  # `*` then web


def test_windows_frame_empty_keeps_columns() -> None:
    df = frames.windows_frame([])
    assert df.empty
    assert list(df.columns) == frames.WINDOW_COLUMNS


def test_to_utc_is_utc_wall_clock_not_local_time() -> None:
    # 0 ms is midnight UTC whatever the machine's time zone
    assert frames.to_utc([0]).iloc[0] == pd.Timestamp("1970-01-01T00:00:00")


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
    view = frames.status_view(st, st.batch_time + age_ms, stale_after_ms)
    assert view.stale is stale
    assert view.batch_age_ms == age_ms


def test_status_view_watermark_delay_and_none_yet() -> None:
    st = status()
    view = frames.status_view(st, st.watermark + 45_000, 5000)
    assert view.watermark_ms == st.watermark
    assert view.watermark_delay_ms == 45_000
    assert view.batch_id == 7 and view.input_rows == 1234

    view0 = frames.status_view(status(watermark=0), T0, 5000)
    assert view0.watermark_ms is None and view0.watermark_delay_ms is None


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0.0s"),
        (450, "0.4s"),
        (59_999, "59.9s"),
        (60_000, "1m00s"),
        (185_000, "3m05s"),
        (7_800_000, "2h10m"),
        (3 * 86_400_000 + 4 * 3_600_000, "3d4h"),
        (-1500, "-1.5s"),
    ],
)
def test_format_age(ms: int, text: str) -> None:
    assert frames.format_age(ms) == text


def test_offsets_frame_lag_and_numeric_partition_order() -> None:
    st = status(offsets={"10": 5, "2": 7}, latest_offsets={"2": 9, "10": 5, "3": 1})
    df = frames.offsets_frame(st)
    assert list(df["partition"]) == ["2", "3", "10"]
    assert list(df["lag"].astype(object).where(df["lag"].notna(), None)) == [2, None, 0]
    assert frames.offsets_summary(df) == "p2 **7** (lag 2) · p10 **5**"


def test_offsets_summary_when_nothing_committed() -> None:
    df = frames.offsets_frame(status(offsets={}, latest_offsets={}))
    assert frames.offsets_summary(df) == "none yet"


def test_dead_frames() -> None:
    counts = frames.dead_counts_frame({"invalid_json": 3, "empty": 9, "wrong_type": 3})
    assert counts.to_dict("records") == [
        {"reason": "empty", "count": 9},
        {"reason": "invalid_json", "count": 3},
        {"reason": "wrong_type", "count": 3},
    ]
    letters = [
        DeadLetter(1, 42, T0, "invalid_utf8", "byte 0xff", b"\xff{" + b"x" * 200, 202, 3),
        DeadLetter(0, 7, T0 - 1000, "empty", "no bytes", b"", 0, 2),
    ]
    df = frames.dead_letters_frame(letters)
    assert list(df.columns) == ["Kafka time (UTC)", "reason", "detail", "partition:offset", "raw"]
    assert list(df["partition:offset"]) == ["1:42", "0:7"]
    assert df.loc[0, "raw"].startswith("\\xff{x")
    assert len(df.loc[0, "raw"]) == frames.RAW_PREVIEW_CHARS
    assert df.loc[0, "raw"].endswith("…")
    assert df.loc[1, "raw"] == "(empty)"
    assert df.loc[0, "Kafka time (UTC)"] == pd.Timestamp("2026-11-18T11:06:40")
    assert frames.dead_letters_frame([]).empty


# --- figures.py ---------------------------------------------------------------------------------


def test_one_trace_per_service_plus_dashed_thicker_total() -> None:
    frame = frames.windows_frame(rows_for({"web": [10, 20, 30], "api": [1, 2, 3], "db": [4]}))
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
    frame = frames.windows_frame(rows_for({"web": [10], "api": [1]}))
    fig = built(figures.events_per_second, frame, show_total=False)
    assert [t.name for t in fig.data] == [figures.TOTAL_NAME, "api", "web"]
    assert fig.data[0].visible is False


def test_trace_order_follows_the_given_order_and_keeps_absent_services() -> None:
    # plotly.js matches legend toggles to traces by index (Streamlit drops uids): a service
    # appearing or leaving the range must not shift the others
    frame = frames.windows_frame(rows_for({"web": [1], "api": [2], "new": [3]}))
    fig = built(figures.events_per_second, frame, services=["web", "gone", "api"])
    assert [t.name for t in fig.data] == [figures.TOTAL_NAME, "web", "gone", "api", "new"]
    assert len(fig.data[2].x) == 0


def test_stable_order_appends_newcomers_sorted() -> None:
    assert frames.stable_order([], ["web", "api"]) == ["api", "web"]
    assert frames.stable_order(["web", "api"], ["db", "api", "auth"]) == [
        "web",
        "api",
        "auth",
        "db",
    ]
    assert frames.stable_order(["web"], []) == ["web"]


def test_uirevision_is_constant_across_refreshes() -> None:
    a = built(figures.events_per_second, frames.windows_frame(rows_for({"web": [1]})))
    b = built(
        figures.events_per_second, frames.windows_frame(rows_for({"web": [1, 2], "api": [3]}))
    )
    assert a.layout.uirevision == b.layout.uirevision == figures.UIREVISION
    # no explicit range: one that moved with each refresh would undo the user's zoom
    assert b.layout.xaxis.range is None


def test_time_axis_is_utc_dates() -> None:
    frame = frames.windows_frame(rows_for({"web": [1, 2]}))
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


@pytest.mark.parametrize("frame", [frames.windows_frame([]), pd.DataFrame()])
def test_empty_input_gives_valid_figure_with_message(frame: pd.DataFrame) -> None:
    fig = built(figures.events_per_second, frame)
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 0
    assert fig.layout.uirevision == figures.UIREVISION
    assert len(fig.layout.annotations) == 1
    assert "No windows yet" in fig.layout.annotations[0].text
    go.Figure(fig.to_dict())  # round-trips: valid plotly


def test_open_windows_are_shaded_from_the_watermark() -> None:
    frame = frames.windows_frame(rows_for({"web": [1, 2, 3, 4]}))  # starts T0 .. T0+30s
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
    metrics = frames.metrics_frame(rows)
    lat = built(figures.latency_percentiles, metrics, "web", window_size_ms=W)
    assert [t.name for t in lat.data] == list(figures.LATENCY_PERCENTILES)
    web = [r for r in rows if r.service == "web"]
    assert list(lat.data[2].y) == pytest.approx([r.p99 for r in web])
    assert [int(c[0]) for c in lat.data[0].customdata] == [r.latency_count for r in web]
    # api's middle window has no latencies: a gap (NaN), not a zero
    api = built(figures.latency_percentiles, metrics, "api")
    assert np.isnan(api.data[0].y[1]) and api.data[0].y[0] > 0

    band = frames.users_band(metrics)
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
    cdf = built(figures.latency_cdf, frames.cdf_frame(aggs, ["*", "web"]), ["web"])
    assert [t.name for t in cdf.data] == [figures.TOTAL_NAME, "web"]
    assert cdf.data[0].x[0] == pytest.approx(10.0) and cdf.data[0].x[-1] == pytest.approx(1000.0)
    assert cdf.layout.xaxis.type == "log"


def test_lateness_histogram_is_in_seconds_with_log_counts() -> None:
    digest = TDigest()
    digest.update(np.array([0.0, 500.0, 1000.0, 60_000.0]))
    fig = built(figures.lateness_histogram, frames.digest_histogram(digest, bins=4))
    (bars,) = fig.data
    assert sum(bars.y) == 4
    assert bars.x[0] == pytest.approx(7.5) and bars.width[0] == pytest.approx(15.0)
    assert fig.layout.yaxis.type == "log"


def test_stacked_figures_share_the_time_axis() -> None:
    health = frames.health_frame(
        [{"batch_id": i, "batch_time": T0 + i * 1000, "batch_duration_ms": 90} for i in range(3)]
    )
    wm = frames.watermark_frame(
        [{"batch_time": T0 + 60_000, "watermark": T0 + 20_000, "max_event_time": T0 + 50_000}]
    )
    for fig, rows in (
        (built(figures.pipeline_health, health), 3),
        (built(figures.time_domains, frames.arrivals_frame({}), wm), 2),
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
    fig = built(figures.pipeline_health, frames.health_frame(batches))
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


# --- run.py: settings and the child's command line ---------------------------------------------


def test_app_settings_from_argv_then_env() -> None:
    env = {"TIDEGAUGE_REDIS_URL": "redis://:secret@h:1/2"}
    s = app_settings(["--refresh", "2s", "--window-range=5m", "--prefix", "x"], env)
    assert s.redis.url == "redis://:secret@h:1/2" and s.redis.prefix == "x"
    assert (s.refresh_ms, s.window_range_ms, s.stale_after_ms) == (2000, 300_000, None)
    assert not s.demo_controls
    assert app_settings(["--stale-after", "4s", "--demo-controls"], env).stale_after_ms == 4000
    assert app_settings(["--demo-controls"], env).demo_controls
    assert app_settings(["--redis", "redis://o:3/0"], env).redis.url == "redis://o:3/0"
    assert app_settings([], {}).redis.url == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    "argv", [["--refresh", "soon"], ["--refresh", "10ms"], ["--bogus"], ["--redis", "http://x"]]
)
def test_app_settings_bad_flags_raise_value_error(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        app_settings(argv, {})


def test_streamlit_command_keeps_password_off_the_command_line() -> None:
    s = DashboardSettings(RedisSettings(url="redis://:secret@h:1/0", prefix="p"), 1500)
    cmd = streamlit_command(s, 8600, "0.0.0.0")
    assert "secret" not in " ".join(cmd)
    assert cmd[1:4] == ["-m", "streamlit", "run"]
    assert "--server.port=8600" in cmd and "--server.address=0.0.0.0" in cmd
    assert "--server.headless=true" in cmd and "--browser.gatherUsageStats=false" in cmd
    assert "--server.enableStaticServing=true" in cmd  # dashboard/chart.py loads plotly.js
    # served, not developed: no source watching, no full GC after every session's rerun
    assert "--server.fileWatcherType=none" in cmd and "--runner.postScriptGC=false" in cmd
    app_args = cmd[cmd.index("--") + 1 :]
    assert app_settings(app_args, {"TIDEGAUGE_REDIS_URL": s.redis.url}) == s


def test_install_plotly_js_copies_the_bundle_once(tmp_path: Path) -> None:
    dest = install_plotly_js(tmp_path / "static")
    assert dest.read_bytes() == plotly_js_source().read_bytes()
    assert dest.name == PLOTLY_JS
    stamp = dest.stat().st_mtime_ns
    assert install_plotly_js(tmp_path / "static") == dest
    assert dest.stat().st_mtime_ns == stamp  # identical: left alone
    dest.write_bytes(b"stale")
    install_plotly_js(tmp_path / "static")
    assert dest.read_bytes() == plotly_js_source().read_bytes()  # replaced when it differs


def test_firings_are_drawn_as_spans_without_changing_the_shared_figure() -> None:
    from tidegauge.core.alerts import Firing

    t0 = 1_795_341_600_000
    starts = pd.to_datetime([t0, t0 + 10_000, t0 + 20_000], unit="ms")
    frame = pd.DataFrame({"service": ["api"] * 3, "window_start": starts, "latency_count": [5] * 3})
    for p in ("p50", "p95", "p99"):
        frame[p] = [1.0, 2.0, 3.0]
    base = figures.latency_percentiles(frame, "api")
    before = json.dumps(base, default=str)
    fs = [
        Firing("k", "slow", "api", t0, t0 + 20_000, "confirmed", 3.0, 2, 2, id="a"),
        Firing("k", "slow", "api", t0 + 30_000, t0 + 40_000, "retracted", 3.0, 1, 0, id="b"),
    ]
    marked = figures.mark_firings(base, fs)
    assert json.dumps(base, default=str) == before  # the shared input is untouched
    spans = marked["layout"]["shapes"]
    assert [s["x0"] for s in spans] == ["2026-11-22T10:00:00", "2026-11-22T10:00:30"]
    assert spans[0]["fillcolor"] == "#d62728" and spans[1]["line"]["dash"] == "dot"
    assert [a["text"] for a in marked["layout"]["annotations"]] == [
        "slow (api): confirmed",
        "slow (api): retracted",
    ]
    assert figures.mark_firings(base, []) is base


def test_marks_are_clipped_to_the_chart_and_instants_are_lines() -> None:
    from tidegauge.core.store.annotations import Annotation

    marks = figures.annotation_marks(
        [
            Annotation("incident", "incident: api 5x slower", "event", 100, 400, "api"),
            Annotation("job_start", "job restarted (batch 9)", "processing", 250, 250),
            Annotation("backlog", "backlog", "processing", 900, 950),
        ]
    )
    kept = figures.clip(marks, 200, 800)
    assert [(m.start, m.end, m.style) for m in kept] == [(200, 400, "event"), (250, 250, "instant")]
    fig = figures.mark({"data": [{"x": [1]}], "layout": {}}, kept)
    assert [s["type"] for s in fig["layout"]["shapes"]] == ["rect", "line"]


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
