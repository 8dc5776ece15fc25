"""The Streamlit app against a real redis-server (AppTest); `tidegauge dashboard` as a server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import redis
from streamlit.testing.v1 import AppTest

from cli.local.services import free_port
from dashboard import data
from jobs.sink.redis_sink import SinkBatch, write_batch
from jobs.sink.status import write_progress
from jobs.state.rows import WindowUpdate
from tests import procs
from tests.integration.helpers import tidegauge, trace, values
from tests.integration.seed import PANELS, seed_live
from tidegauge.core.config import ENV_REDIS_URL, RedisSettings
from tidegauge.core.control import read_commands
from tidegauge.core.dimensions import member
from tidegauge.core.durations import to_iso
from tidegauge.core.store import DeadLetter, Keys
from tidegauge.core.store.annotations import read_annotations
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
W = 10_000
SPEC = WindowSpec.tumbling(W)
KEYS = Keys()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def window(
    start: int, service: str, count: int, spec: WindowSpec = SPEC, seed: int = 0
) -> WindowUpdate:
    """What the job sends for `count` events of one service in one window: lognormal latencies
    (a few absent), ~2 % 5xx, users from a pool of 200, and the metrics computed from them."""
    rng = np.random.default_rng([start % 1_000_003, len(service), count, seed])
    latency = rng.lognormal(np.log(40.0), 0.7, count)
    latency[rng.random(count) < 0.03] = np.nan
    status = rng.choice(np.array([200, 201, 404, 500, 503]), count, p=[0.8, 0.1, 0.08, 0.01, 0.01])
    users = np.array([f"{service}-user-{u}" for u in rng.integers(0, 200, count)], dtype=object)
    agg = WindowAgg()
    agg.add(latency, status, users)
    return WindowUpdate(spec.key, start, service, agg.to_bytes())


def seed(r: redis.Redis, batch_time: int) -> dict[str, int]:
    """Two batches of 10 s windows for three services, a status, and three dead letters."""
    newest = batch_time - batch_time % W - W
    starts = [newest - i * W for i in range(6)]
    counts = {"checkout": 120, "search": 340, "auth": 55}
    write_batch(
        r, KEYS, SinkBatch(1, [window(s, svc, c) for s in starts[3:] for svc, c in counts.items()])
    )
    letters = [
        DeadLetter(0, 17, batch_time - 3000, "invalid_json", "Expecting value", b"{oops", 5, 2),
        DeadLetter(2, 5, batch_time - 2000, "missing_field", "no 'service'", b'{"a":1}', 7, 2),
        DeadLetter(1, 9, batch_time - 1000, "invalid_json", "Unterminated", b'{"x', 3, 2),
    ]
    write_batch(
        r,
        KEYS,
        SinkBatch(
            2,
            [window(s, svc, c) for s in starts[:3] for svc, c in counts.items()],
            dead=letters,
            dead_counts={"invalid_json": 2, "missing_field": 1},
        ),
    )
    watermark = newest - 20_000
    write_progress(
        r,
        KEYS,
        {
            "batch_id": 2,
            "batch_time": batch_time,
            "watermark": watermark,
            "input_rows": 1545,
            "offsets": {"0": 1000, "1": 990, "2": 1010},
            "start_offsets": {"0": 500, "1": 480, "2": 505},
            "latest_offsets": {"0": 1000, "1": 995, "2": 1010},
            "batch_duration_ms": 412,
            "query_id": "q-1",
        },
    )
    return {"watermark": watermark, "newest": newest}


def run_app(monkeypatch: pytest.MonkeyPatch, url: str) -> AppTest:
    monkeypatch.setenv(ENV_REDIS_URL, url)
    return AppTest.from_file(str(APP), default_timeout=30).run(timeout=30)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def chart(at: AppTest, key: str) -> dict:
    """The plotly figure JSON of the chart with this Streamlit key (dashboard/chart.py)."""
    for c in charts(at):
        if c.proto.id.endswith(f"-{key}"):
            return json.loads(c.proto.bytes)
    raise AssertionError(f"no chart {key!r}")


def charts(at: AppTest) -> list[Any]:
    """Every chart element of the page: our plotly component's instances."""
    return [c for c in at.get("bidi_component") if c.proto.component_name == "tidegauge_plot"]


def test_seeded_redis_shows_status_chart_and_dead_letters(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seeded = seed(redis_client, now_ms())
    at = run_app(monkeypatch, redis_settings.url)

    assert not at.exception
    assert not at.error
    assert not at.warning  # fresh status: not stale
    m = metrics(at)
    assert m["Events/s"] == f"{(120 + 340 + 55) / 10:.1f}"
    assert m["Watermark delay"].endswith("s")
    captions = " ".join(c.value for c in at.caption)
    assert to_iso(seeded["watermark"]) in captions
    assert "p1 **990** (lag 5)" in captions

    spec = chart(at, "events_per_s")
    assert {t["name"] for t in spec["data"]} == {"auth", "checkout", "search", "all services (*)"}
    total = spec["data"][0]
    assert total["name"] == "all services (*)"
    assert values(total["y"])[-1] == pytest.approx((120 + 340 + 55) / 10)
    assert spec["layout"]["uirevision"] == "tidegauge"

    counts = next(df.value for df in at.dataframe if "reason" in df.value and "count" in df.value)
    assert counts.to_dict("records") == [
        {"reason": "invalid_json", "count": 2},
        {"reason": "missing_field", "count": 1},
    ]
    latest = next(df.value for df in at.dataframe if "raw" in df.value)
    assert list(latest["partition:offset"]) == ["1:9", "2:5", "0:17"]
    assert list(latest["raw"]) == ['{"x', '{"a":1}', "{oops"]


def test_every_panel_shows_the_seeded_backlog_story(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, KEYS, now_ms())
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception and not at.error
    assert [h.value for h in at.subheader] == PANELS
    m = metrics(at)
    assert m["Late events"] == f"{truth.late:,}" and m["Stragglers"] == f"{truth.stragglers:,}"
    # Event time vs processing time: the catch-up spike, a flat event-time line
    fig = chart(at, "time_domains")
    event = values(trace(fig, "by event time")["y"])
    processing = values(trace(fig, "by processing time")["y"])
    steady = truth.events[truth.starts[0]] / 10
    assert max(processing) == pytest.approx(max(truth.processing.values()) / 10)
    assert max(processing) >= 3 * steady
    # every event once by event time, late ones included: flat but for the late few
    assert event == [(truth.events[s] + truth.late_at.get(s, 0)) / 10 for s in truth.starts]
    assert trace(fig, "by broker time")["visible"] is False
    assert len(values(trace(fig, "watermark")["x"])) > 10
    # Latency: the merged 15-minute range equals the raw values' percentiles
    table = next(df.value for df in at.dataframe if "p99 ms" in df.value).set_index("service")
    recent = truth.latencies  # 15 minutes seeded, 15 minutes merged
    assert table.loc["*", "events"] == sum(truth.events[s] for s in truth.starts[-90:])
    assert table.loc["*", "p50 ms"] == pytest.approx(np.quantile(recent, 0.5), rel=0.05)
    # the range picker re-reads through merged sketches: 5 minutes = 30 windows
    at.radio(key="latency_range").set_value("5 min").run(timeout=30)
    table = next(df.value for df in at.dataframe if "p99 ms" in df.value).set_index("service")
    assert table.loc["*", "events"] == sum(truth.events[s] for s in truth.starts[-30:])
    # Lateness: what-if at the job's allowed lateness, and the late events kept
    assert float(metrics(at)["Would have been late"].rstrip(" %")) > 0
    at.slider(key="what_if").set_value(50).run(timeout=30)  # beyond every overdue: none late
    assert metrics(at)["Would have been late"] == "0.00 %"
    assert any("late events kept" in c.value for c in at.caption)
    assert not at.exception and not at.error


def test_a_sliding_window_shows_its_busiest_interval_and_rolling_p99(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, KEYS, now_ms())
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception and not at.error
    busiest = next(m for m in at.metric if m.label == "Busiest 30s")
    events, start = truth.busiest
    assert busiest.value == f"{events:,}"
    when = pd.Timestamp(start, unit="ms").strftime("%H:%M:%S.%f")[:-3]
    assert f"{events * 1000 / 30_000:,.1f}/s from {when} UTC" in busiest.proto.help
    # the latency chart carries the rolling p99 of the 30 s before each primary window's end
    rolling = trace(chart(at, "latency_ts"), "p99, last 30s")
    assert len(values(rolling["y"])) == truth.sliding_rows
    ends = [round(pd.Timestamp(x).timestamp() * 1000) for x in rolling["x"]]
    assert ends == [s + 10_000 for s in truth.starts]
    # a service's latency chart carries its own rolling p99 (its sliding rows are read then)
    at.selectbox(key="latency_service").set_value("svc-01").run(timeout=30)
    assert not at.exception and not at.error
    own = trace(chart(at, "latency_ts"), "p99, last 30s")
    assert len(values(own["y"])) == truth.sliding_rows and values(own["y"]) != values(rolling["y"])
    # chosen as the window kind, every chart shows the sliding rows (one per primary window)
    at.sidebar.radio(key="kind").set_value("sliding").run(timeout=30)
    assert not at.exception and not at.error
    total = trace(chart(at, "events_per_s"), "all services (*)")
    assert len(values(total["y"])) == truth.sliding_rows
    three = [sum(truth.events[s] for s in truth.starts[i - 2 : i + 1]) for i in range(2, 10)]
    assert values(total["y"])[2:10] == pytest.approx([n / 30 for n in three])


def test_filters_choose_services_and_window_kind(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, KEYS, now_ms(), services=4, minutes=5)
    at = run_app(monkeypatch, redis_settings.url)
    at.sidebar.multiselect(key="services").set_value(["svc-01", "svc-03"]).run(timeout=30)
    assert not at.exception
    names = [t["name"] for t in chart(at, "events_per_s")["data"]]
    assert names == ["all services (*)", "svc-01", "svc-03"]
    event = values(trace(chart(at, "time_domains"), "by event time")["y"])
    per_service = truth.events[truth.starts[0]] / 4 / 10
    late = truth.late_by_service(["svc-01", "svc-03"])
    assert event == [2 * per_service + late.get(s, 0) / 10 for s in truth.starts]
    # a kind the job did not write falls back to what there is, without an error
    at.sidebar.radio(key="kind").set_value("session").run(timeout=30)
    assert not at.exception and not at.error


def test_demo_controls_send_commands_through_redis(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seed_live(redis_client, KEYS, now_ms(), minutes=2)
    monkeypatch.setattr(sys, "argv", [str(APP), "--demo-controls"])
    at = run_app(monkeypatch, redis_settings.url)
    before = now_ms()
    at.sidebar.button(key="demo_pause").click().run(timeout=30)
    assert not at.exception
    pause_until = int(redis_client.hget(KEYS.control, "pause_until"))
    assert before + 30_000 <= pause_until <= now_ms() + 30_000
    at.sidebar.button(key="demo_incident").click().run(timeout=30)
    incident = read_commands(redis_client, KEYS).incident
    assert incident is not None and incident.until_ms >= before + 60_000
    assert (incident.factor, incident.service) == (5.0, "*")
    at.sidebar.button(key="demo_burst").click().run(timeout=30)
    burst = read_commands(redis_client, KEYS).late_burst
    assert burst is not None and burst.span_ms == 3_600_000 and burst.id >= before


def test_demo_controls_are_off_by_default(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seed_live(redis_client, KEYS, now_ms(), minutes=2)
    at = run_app(monkeypatch, redis_settings.url)
    assert not [b for b in at.sidebar.button if b.key and b.key.startswith("demo_")]
    assert redis_client.hgetall(KEYS.control) == {}


def test_snapshot_keeps_to_the_smallest_tumbling_spec(redis_client: redis.Redis) -> None:
    now = now_ms()
    newest = seed(redis_client, now)["newest"]
    # the job also writes 60 s and 30 s/10 s windows: the chart keeps to the 10 s ones
    write_batch(
        redis_client,
        KEYS,
        SinkBatch(
            3,
            [
                window(newest, "search", 999, WindowSpec(30_000, 10_000)),
                window(newest - newest % 60_000, "search", 2000, WindowSpec.tumbling(60_000)),
            ],
        ),
    )
    snap = data.read_snapshot(redis_client, KEYS, window_range_ms=60_000, now_ms=now)
    assert snap.window_size_ms == W
    assert {(r.spec, r.kind) for r in snap.windows} == {("10000", "tumbling")}
    assert [r.count for r in snap.windows if r.service == "*"] == [120 + 340 + 55] * 6
    assert all(r.p99 is not None and r.distinct_users > 0 for r in snap.windows)


def test_with_many_services_the_page_reads_the_top_ones_and_star_only(
    redis_client: redis.Redis,
) -> None:
    now = now_ms()
    newest = now - now % W - W
    starts = [newest - i * W for i in range(6)]
    counts = {f"svc-{i:02d}": 10 + (i * 37) % 60 for i in range(40)}  # distinct sums
    updates = [window(s, svc, n + k) for k, s in enumerate(starts) for svc, n in counts.items()]
    write_batch(redis_client, KEYS, SinkBatch(1, updates))
    sums = {svc: sum(n + k for k in range(6)) for svc, n in counts.items()}
    errors = {svc: 0 for svc in counts}
    for u in updates:
        errors[u.service] += WindowAgg.from_bytes(u.agg).errors
    for by, truth in (("events", sums), ("errors", errors)):
        f = data.Filters(range_ms=60_000, top=5, rank_by=by)
        snap = data.read_snapshot(redis_client, KEYS, 60_000, now, filters=f)
        top = sorted(truth, key=lambda s: (-truth[s], s))[:5]
        assert snap.drawn == top
        assert {r.service for r in snap.windows} == {"*", *top}  # nothing else read
        assert set(snap.range_aggs) == {"*", *top}
        assert len(snap.others) == 35 and snap.totals[top[0]].value(by) == truth[top[0]]
        total = {r.window_start: r.count for r in snap.windows if r.service == "*"}
        assert total == {s: sum(counts.values()) + k * 40 for k, s in enumerate(starts)}
    f = data.Filters(range_ms=60_000, top=5, rank_by="p99")
    snap = data.read_snapshot(redis_client, KEYS, 60_000, now, filters=f)
    p99 = {s: t.p99 for s, t in snap.totals.items()}
    assert None not in p99.values() and snap.drawn == sorted(p99, key=lambda s: -(p99[s] or 0))[:5]
    every = data.read_snapshot(redis_client, KEYS, 60_000, now, filters=data.Filters(top=0))
    assert len({r.service for r in every.windows}) == 41 and every.others == []
    chosen = data.Filters(services=("svc-03", "nope"), range_ms=60_000)
    picked = data.read_snapshot(redis_client, KEYS, 60_000, now, filters=chosen)
    assert picked.drawn == ["svc-03"] and {r.service for r in picked.windows} == {"*", "svc-03"}


def test_a_dashboard_process_ranks_a_view_again_every_ten_seconds(
    redis_client: redis.Redis,
) -> None:
    from tidegauge.core.closed_windows import ClosedWindows

    now = now_ms()
    newest = now - now % W - W
    counts = {f"svc-{i:02d}": 10 + i for i in range(12)}
    write_batch(redis_client, KEYS, SinkBatch(1, [window(newest, s, n) for s, n in counts.items()]))
    f, memo = data.Filters(range_ms=60_000, top=3), ClosedWindows()
    first = data.read_snapshot(redis_client, KEYS, 60_000, now, filters=f, cache=memo)
    assert first.drawn == ["svc-11", "svc-10", "svc-09"]
    write_batch(redis_client, KEYS, SinkBatch(2, [window(newest, "svc-00", 500)]))
    soon = data.read_snapshot(redis_client, KEYS, 60_000, now + 9_000, filters=f, cache=memo)
    assert soon.drawn == first.drawn  # ranked 9 s ago: kept
    later = data.read_snapshot(redis_client, KEYS, 60_000, now + 10_000, filters=f, cache=memo)
    assert later.drawn == ["svc-00", "svc-11", "svc-10"]
    assert {r.service for r in later.windows} == {"*", *later.drawn}


def test_total_line_can_be_switched_off(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seed(redis_client, now_ms())
    at = run_app(monkeypatch, redis_settings.url)
    at.toggle(key="show_total").set_value(False).run(timeout=30)
    assert not at.exception
    spec = chart(at, "events_per_s")
    assert spec["data"][0]["name"] == "all services (*)"
    assert spec["data"][0]["visible"] is False
    assert [t["name"] for t in spec["data"][1:]] == ["auth", "checkout", "search"]


def test_stale_status_shows_a_warning(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seed(redis_client, now_ms() - 90_000)
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception
    (warning,) = at.warning
    assert "Stale" in warning.value and "1m3" in warning.value  # 1m30s and a bit
    assert "#2" in warning.value


def test_empty_redis_says_it_is_waiting_for_the_first_batch(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings
) -> None:
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception
    assert not at.error
    (info,) = at.info
    assert "waiting for the job's first batch" in info.value
    assert at.code[0].value.startswith("tidegauge job --redis redis://127.0.0.1:")
    assert not charts(at)


def test_flags_after_double_dash_are_read_prefix_included(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seed(redis_client, now_ms())  # under the default prefix `tg`
    # as `streamlit run dashboard/app.py -- FLAGS` leaves it
    monkeypatch.setattr(sys, "argv", [str(APP), "--prefix", "other", "--refresh", "2s"])
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception
    assert "waiting for the job's first batch" in at.info[0].value
    assert "--redis-prefix other" in at.code[0].value
    assert "refresh every 2s" in at.caption[0].value


def test_bad_flags_are_an_error_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(APP), "--window-range", "forever"])
    at = run_app(monkeypatch, "redis://127.0.0.1:1/0")
    assert not at.exception
    (error,) = at.error
    assert "Bad dashboard settings" in error.value and "forever" in error.value


def test_unreachable_redis_is_an_error_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"  # nothing listens there
    at = run_app(monkeypatch, url)
    assert not at.exception
    (error,) = at.error
    assert "Cannot read Redis" in error.value
    assert "redis://:***@127.0.0.1:" in error.value
    assert "hunter2" not in error.value
    assert "hunter2" not in " ".join(c.value for c in at.caption)


# --- `tidegauge dashboard` as a real server ------------------------------------------------------


@pytest.fixture
def dashboard_process(redis_settings: RedisSettings) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "dashboard", "--port", str(port)]
        + ["--redis", redis_settings.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    yield proc, port
    if proc.poll() is None:
        for pid in procs.children(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_dashboard_command_serves_health_and_stops_on_sigint(
    dashboard_process: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = dashboard_process
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == f"Tidegauge dashboard: http://127.0.0.1:{port}"

    deadline = time.monotonic() + 20
    status = None
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{port}/_stcore/health"
            with urllib.request.urlopen(url, timeout=1) as resp:
                status = resp.status
                break
        time.sleep(0.2)
    assert status == 200, f"no health 200 within 20 s (exit code {proc.poll()})"

    children = procs.children(proc.pid)
    assert children, "the launcher should run Streamlit as a child process"
    os.kill(proc.pid, signal.SIGINT)  # to the launcher alone, as `kill -INT PID` would
    proc.wait(timeout=20)
    assert proc.returncode in (0, 130)
    assert not [pid for pid in children if procs.alive(pid)]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)


def test_long_ranges_are_drawn_from_the_retention_roll_ups(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    """Three hours written with short tiers (30m raw, 1m roll-ups for 2h, 10m for a day): the
    24 h range draws the old part from 10 m roll-ups, then 1 m ones, and says so; the total
    line's events/s of each roll-up is its events over its length (counts exact)."""
    from tests.integration.fixtures import TIERS, _stream, _write

    batches, truth = _stream(seed=5)
    for b in batches:
        _write(redis_client, b, TIERS)
    at = run_app(monkeypatch, redis_settings.url)
    at.sidebar.selectbox(key="range").set_value("24 h").run(timeout=30)
    assert not at.exception and not at.error
    captions = " ".join(c.value for c in at.caption)
    assert "Resolution: 10m roll-ups to " in captions and "then 1m roll-ups" in captions
    total = trace(chart(at, "events_per_s"), "all services (*)")
    rates = values(total["y"])
    starts = [int(np.datetime64(x, "ms").astype(np.int64)) for x in total["x"]]
    first = starts[0]
    want = sum(len(v) for (s, _), v in truth.latency.items() if first <= s < first + 600_000)
    assert first == batches[0].windows[0].start_ms  # the stream's first 10 minutes
    assert rates[0] == pytest.approx(want / 600)
    assert len(starts) < 200  # not 1,080 windows of 10 s


def test_alert_firings_show_as_a_banner_and_on_the_event_time_charts(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seeded = seed(redis_client, now_ms())
    # the real evaluator: checkout breaches in all six windows, three of them closed
    tidegauge(
        "alerts", "--once", "--redis", redis_settings.url,
        "--rule", "events/s > 5 for 2 on checkout",   # 3 closed windows >= 2: confirmed
        "--rule", "events/s > 20 for 5 on search",    # only 3 of 6 closed: provisional
        "--rule", "events/s > 1000",                  # never: no firing
    )  # fmt: skip
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception
    (confirmed,) = at.error
    assert "events/s > 5 for 2 on checkout" in confirmed.value and "confirmed" in confirmed.value
    (provisional,) = [w for w in at.warning if "search" in w.value]
    assert "provisional" in provisional.value and "stragglers may withdraw" in provisional.value
    fig = chart(at, "events_per_s")
    marks = [a["text"] for a in fig["layout"]["annotations"] if "events/s" in a["text"]]
    assert sorted(marks) == [
        "events/s > 20 for 5 on search (search): provisional",
        "events/s > 5 for 2 on checkout (checkout): confirmed",
    ]
    spans = [s for s in fig["layout"]["shapes"] if s["fillcolor"] in ("#d62728", "#ff7f0e")]
    starts = sorted(s["x0"] for s in spans)
    oldest = to_iso(seeded["newest"] - 5 * W).rstrip("Z")  # both runs start at the first window
    assert all(x.startswith(oldest[:19]) for x in starts), starts


def test_a_link_restores_the_view_and_the_url_follows_the_widgets(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    seed(redis_client, now_ms())
    monkeypatch.setenv(ENV_REDIS_URL, redis_settings.url)
    at = AppTest.from_file(str(APP), default_timeout=30)
    link = {"svc": "checkout,gone", "range": "1h", "lrange": "5m", "lsvc": "checkout",
            "total": "0", "broker": "1", "kind": "rolling"}  # fmt: skip
    for k, v in link.items():
        at.query_params[k] = v
    at.run(timeout=30)
    assert not at.exception
    assert at.multiselect(key="services").value == ["checkout"]  # "gone" is not in the store
    assert at.selectbox(key="range").value == "1 h"
    assert at.radio(key="latency_range").value == "5 min"
    assert at.selectbox(key="latency_service").value == "checkout"
    assert at.toggle(key="show_total").value is False and at.toggle(key="show_broker").value
    (ignored,) = [w for w in at.warning if "ignored" in w.value]
    assert "kind=rolling" in ignored.value
    total = trace(chart(at, "events_per_s"), "all services (*)")
    assert total["visible"] is False  # the total line is hidden, as the link asked
    # the URL now says what the page shows (the unreadable parts are gone)
    assert dict(at.query_params) == {
        "svc": "checkout", "range": "1h", "lrange": "5m", "lsvc": "checkout",
        "total": "0", "broker": "1",
    }  # fmt: skip
    at.toggle(key="wall").set_value(True).run(timeout=30)
    assert at.query_params["wall"] == "1"
    assert any("stSidebar" in m.value for m in at.markdown)  # the wall style hides the sidebar
    share = next(c for c in at.code if "svc=checkout" in c.value)
    assert "range=1h" in share.value and "wall=1" in share.value


def test_demo_commands_and_job_starts_are_marked_on_the_charts_of_their_time_domain(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    truth = seed_live(redis_client, KEYS, now_ms(), minutes=2)
    monkeypatch.setattr(sys, "argv", [str(APP), "--demo-controls"])
    at = run_app(monkeypatch, redis_settings.url)
    before = now_ms()
    at.sidebar.button(key="demo_pause").click().run(timeout=30)
    at.sidebar.button(key="demo_incident").click().run(timeout=30)
    notes = {a.kind: a for a in read_annotations(redis_client, KEYS, 0, now_ms() + 120_000)}
    pause, incident = notes["backlog"], notes["incident"]
    assert pause.domain == "processing" and pause.end - pause.start == 30_000
    assert incident.domain == "event" and incident.end - incident.start == 60_000
    assert before <= incident.start <= now_ms() and "all services 5x slower" in incident.label
    # the backlog pause is processing time: drawn on the event-vs-processing chart (one
    # refresh interval later: sessions share a snapshot for that long)
    time.sleep(1.0)
    at.run(timeout=30)
    labels = [a["text"] for a in chart(at, "time_domains")["layout"]["annotations"]]
    assert "backlog: job paused 30 s" in labels
    # the incident is event time: drawn once the job has windows of that time
    later = incident.start - incident.start % W
    write_batch(redis_client, KEYS, SinkBatch(500, [window(later, s, 50) for s in truth.services]))
    time.sleep(1.0)
    at.run(timeout=30)
    fig = chart(at, "events_per_s")
    (span,) = [s for s in fig["layout"]["shapes"] if s.get("fillcolor") == "#9467bd"]
    assert span["x0"].startswith(to_iso(incident.start)[:19])  # from the click, in event time
    assert any("incident" in a["text"] for a in fig["layout"]["annotations"])


def test_a_job_behind_the_topic_shows_when_it_will_have_caught_up(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    now = now_ms()
    seed(redis_client, now - 200_000)  # its batch is older than the span the pace is taken over
    # A capped job catching up: 100,000 records per 2 s batch against 10,000/s arriving.
    for i in range(3, 13):
        t = now - (13 - i) * 2_000
        done = 1_000_000 + (i - 3) * 100_000
        end = 4_000_000 + (i - 3) * 20_000
        write_progress(
            redis_client,
            KEYS,
            {
                "batch_id": i,
                "batch_time": t,
                "watermark": 0,
                "input_rows": 100_000,
                "offsets": {"0": done},
                "latest_offsets": {"0": done},
                "batch_duration_ms": 1_900,
                "query_id": "q-1",
                "topic_end_time": t,
                "topic_end_offsets": {"0": end},
            },
        )
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception
    [info] = [i.value for i in at.info if "Catching up" in i.value]
    # 2,280,000 behind, gaining 40,000/s: ~57 s
    assert "2,280,000 records behind" in info and "~57s" in info, info


def seed_routes(r: redis.Redis, routes: dict[str, dict[str, int]]) -> dict[str, int]:
    """Six 10 s windows of each service and of its routes (events per window), as the job
    writes a dimension's slices (`*`'s values: the sums over services); returns those sums."""
    newest = now_ms() // W * W - W
    starts = [newest - i * W for i in range(6)]
    totals: dict[str, int] = {}
    for per_service in routes.values():
        for route, n in per_service.items():
            totals[route] = totals.get(route, 0) + n
    services = [window(s, svc, sum(x.values())) for s in starts for svc, x in routes.items()]
    slices = [
        window(s, member(svc, route), n, seed=1)
        for s in starts
        for svc, per_service in [*routes.items(), ("*", totals)]
        for route, n in per_service.items()
    ]
    write_batch(r, KEYS, SinkBatch(1, services), dimensions={"route": SinkBatch(1, slices)})
    return totals


def test_the_breakdown_ranks_a_dimensions_values_and_drills_into_a_service_and_back(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    """Routes of services as the job stores them (one store per dimension, docs/dimensions.md)."""
    routes = {
        "checkout": {"/cart": 80, "/pay": 30, "/login": 10},
        "search": {"/q": 200, "/cart": 5},
    }
    totals = seed_routes(redis_client, routes)
    at = run_app(monkeypatch, redis_settings.url)
    assert not at.exception
    assert at.selectbox(key="dim").value == "route"

    def table() -> dict[str, int]:
        frame = next(df.value for df in at.dataframe if "p99 ms" in df.value)
        return dict(zip(frame.iloc[:, 0], frame["events"], strict=True))

    # all services' routes, busiest first, over the whole range
    assert list(table().items()) == sorted(
        ((r, 6 * n) for r, n in totals.items()), key=lambda kv: -kv[1]
    )
    trend = chart(at, "breakdown_trend")
    assert [t["name"] for t in trend["data"]] == ["/q", "/cart", "/pay", "/login"]
    assert values(trend["data"][0]["y"]) == [20.0] * 6  # /q: 200 a window of 10 s
    # into one service, ranked by errors: checkout's routes; the URL follows
    at.selectbox(key="dim_of").set_value("checkout").run(timeout=30)
    assert table() == {r: 6 * n for r, n in routes["checkout"].items()}
    assert at.query_params["dof"] == "checkout" and at.query_params["dim"] == "route"
    # one value: the services it comes from, and from there into another service
    at.selectbox(key="dim_pick").set_value("/cart").run(timeout=30)
    assert table() == {"checkout": 6 * 80, "search": 6 * 5}
    assert at.query_params["dval"] == "/cart"
    at.selectbox(key="dim_into").set_value("search").run(timeout=30)
    assert table() == {"/q": 6 * 200, "/cart": 6 * 5}
    at.button(key="dim_out").click().run(timeout=30)
    assert set(table()) == set(totals)
    assert not at.exception and not at.error


def test_only_the_events_with_one_value_on_the_per_window_charts(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    """ "Only events with route = /cart": each service's line is its /cart events, `*` all of
    them; the link keeps the filter, and "(every event)" goes back to the services' own."""
    routes = {"checkout": {"/cart": 80, "/pay": 30}, "search": {"/q": 200, "/cart": 5}}
    assert seed_routes(redis_client, routes) == {"/cart": 85, "/pay": 30, "/q": 200}
    monkeypatch.setenv(ENV_REDIS_URL, redis_settings.url)
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.query_params["only"] = "route:/cart"
    at.run(timeout=30)
    assert not at.exception and not at.error
    assert at.sidebar.selectbox(key="only_value").value == "/cart"
    lines = {t["name"]: values(t["y"]) for t in chart(at, "events_per_s")["data"]}
    assert lines == {"all services (*)": [8.5] * 6, "checkout": [8.0] * 6, "search": [0.5] * 6}
    assert at.query_params["only"] == "route:/cart"
    at.sidebar.selectbox(key="only_dim").select_index(0).run(timeout=30)  # "(every event)"
    lines = {t["name"]: values(t["y"]) for t in chart(at, "events_per_s")["data"]}
    assert lines["all services (*)"] == [31.5] * 6 and lines["checkout"] == [11.0] * 6
    assert "only" not in at.query_params


def test_a_demo_incident_can_hit_one_route_of_the_breakdown(
    monkeypatch: pytest.MonkeyPatch, redis_settings: RedisSettings, redis_client: redis.Redis
) -> None:
    """With the job slicing by route, the demo's incident offers each route the store holds
    (not `(other)`); the command narrows the generator's incident to it."""
    seed_routes(redis_client, {"checkout": {"/cart": 80, "(other)": 3}, "search": {"/q": 20}})
    monkeypatch.setattr(sys, "argv", [str(APP), "--demo-controls"])
    at = run_app(monkeypatch, redis_settings.url)
    where = at.sidebar.selectbox(key="demo_where")
    assert where.options == ["(every request)", "route = /cart", "route = /q"]
    where.set_value(("route", "/cart")).run(timeout=30)
    at.sidebar.button(key="demo_incident").click().run(timeout=30)
    assert not at.exception
    incident = read_commands(redis_client, KEYS).incident
    assert incident is not None and (incident.service, incident.dimension) == ("*", "route")
    assert incident.value == "/cart" and incident.matches({"route": "/cart"})
    assert any("Latency incident on route /cart" in s.value for s in at.sidebar.success)


def test_a_breakdown_reads_its_closed_windows_once(redis_client: redis.Redis) -> None:
    """A dimension's store is judged by its job's watermark: its closed windows are decoded
    once and kept (the page re-reads its breakdown every second), its open one every time."""
    from dashboard.breakdown import BreakdownView, read_breakdown
    from tidegauge.core.closed_windows import ClosedWindows

    seed_routes(redis_client, {"checkout": {"/cart": 80, "/pay": 30}, "search": {"/q": 20}})
    newest = now_ms() // W * W - W
    progress = {"batch_id": 1, "batch_time": newest + W, "input_rows": 1, "offsets": {}}
    write_progress(
        redis_client,
        KEYS,
        {
            **progress,
            "latest_offsets": {},
            "batch_duration_ms": 1,
            "query_id": "q",
            "watermark": newest,
        },  # fmt: skip
    )
    view, memo = BreakdownView("route", range_ms=60_000), ClosedWindows()
    first = read_breakdown(redis_client, KEYS, view, memo)
    assert memo.synced  # it knows the job's watermark: the five closed windows are kept
    # the open window changes: the next read has it, the closed ones come from the memo
    slices = [window(newest, member("*", "/cart"), 200, seed=5)]
    write_batch(redis_client, KEYS, SinkBatch(2, []), dimensions={"route": SinkBatch(2, slices)})
    again = read_breakdown(redis_client, KEYS, view, memo)
    cart = {w.window_start: w.count for w in again.rows if w.service == member("*", "/cart")}
    assert cart[newest] == 200 and cart == {
        w.window_start: (200 if w.window_start == newest else w.count)
        for w in first.rows
        if w.service == member("*", "/cart")
    }
