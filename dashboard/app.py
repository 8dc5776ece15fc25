"""The Streamlit script: layout only. Reads come from `dashboard.data`, figures from `figures`.

Run it through `tidegauge dashboard` (or `streamlit run dashboard/app.py -- FLAGS`). Settings come
from the flags after `--`, else from `TIDEGAUGE_REDIS_URL` and defaults. The live part is one
`st.fragment` that re-reads Redis every `--refresh`, so only it redraws, not the whole page.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

import redis
import streamlit as st

from dashboard import data, figures
from dashboard.run import app_settings
from tidegauge.config import DEFAULT_REDIS_URL, RedisSettings, redact_url
from tidegauge.durations import format_duration, to_iso
from tidegauge.store import Keys, connect

st.set_page_config(page_title="Tidegauge", page_icon="🌊", layout="wide")


def _own_argv() -> list[str]:
    # `streamlit run app.py -- FLAGS` makes sys.argv [app.py, *FLAGS]; under AppTest sys.argv is
    # the test runner's, which is not ours to parse.
    if sys.argv and Path(sys.argv[0]).resolve() == Path(__file__).resolve():
        return sys.argv[1:]
    return []


@st.cache_resource(show_spinner=False)
def _client(url: str) -> redis.Redis:
    # One client (and connection pool) per server process and URL, shared by every browser tab.
    return connect(RedisSettings(url=url))


try:
    settings = app_settings(_own_argv())
except ValueError as e:
    st.title("Tidegauge")
    st.error(f"Bad dashboard settings: {e}")
    st.stop()

keys = Keys(settings.redis.prefix)
shown_url = redact_url(settings.redis.url)

st.title("Tidegauge")
st.caption(
    f"Redis `{shown_url}` · prefix `{keys.prefix}` · refresh every "
    f"{format_duration(settings.refresh_ms)} · chart shows the last "
    f"{format_duration(settings.window_range_ms)} of event time"
)


def _job_command() -> str:
    cmd = "tidegauge job"
    if settings.redis.url != DEFAULT_REDIS_URL:
        cmd += f" --redis {shown_url}"
    if keys.prefix != "tg":
        cmd += f" --redis-prefix {keys.prefix}"
    return cmd + " --checkpoint var/checkpoints/job"


def _status_strip(snap: data.Snapshot) -> None:
    if snap.status is None:
        st.info("The job has written windows but no status yet.")
        return
    view = data.status_view(snap.status, snap.read_at_ms, settings.stale_after_ms)
    if view.stale:
        st.warning(
            f"**Stale**: the job's last batch (#{view.batch_id}) finished "
            f"{data.format_age(view.batch_age_ms)} ago, more than --stale-after "
            f"{format_duration(settings.stale_after_ms)}. The job may be stopped or stuck, "
            "or no new records are arriving (Spark runs no batch without new input).",
            icon="⚠️",
        )
    cols = st.columns(6)
    cols[0].metric("Last batch", f"#{view.batch_id}")
    cols[1].metric("Batch age", data.format_age(view.batch_age_ms))
    if view.watermark_ms is None or view.watermark_delay_ms is None:
        cols[2].metric("Watermark (UTC)", "none yet")
        cols[3].metric("Watermark delay", "–")
    else:
        cols[2].metric(
            "Watermark (UTC)", to_iso(view.watermark_ms)[11:19], help=to_iso(view.watermark_ms)
        )
        cols[3].metric("Watermark delay", data.format_age(view.watermark_delay_ms))
    cols[4].metric("Input rows (last batch)", f"{view.input_rows:,}")
    cols[5].metric("Batch duration", format_duration(view.batch_duration_ms))
    wm = "none yet" if view.watermark_ms is None else to_iso(view.watermark_ms)
    offsets = data.offsets_summary(data.offsets_frame(snap.status))
    st.caption(f"Watermark {wm} · Kafka offsets by partition: {offsets}")


def _events_chart(snap: data.Snapshot) -> None:
    st.subheader("Events per second by service")
    show_total = st.toggle("Show the all-services total (*)", value=True, key="show_total")
    frame = data.windows_frame(snap.windows)
    order = data.stable_order(st.session_state.get("service_order", []), data.services_in(frame))
    st.session_state["service_order"] = order
    wm = snap.status.watermark if snap.status and snap.status.watermark > 0 else None
    fig = figures.events_per_second(
        frame,
        services=order,
        window_size_ms=snap.window_size_ms,
        watermark=None if wm is None else data.to_utc([wm]).iloc[0].to_pydatetime(),
        show_total=show_total,
    )
    st.plotly_chart(fig, key="events_per_s", config={"displaylogo": False})


def _dead_letters(snap: data.Snapshot) -> None:
    st.subheader("Dead letters")
    if not snap.dead_counts:
        st.caption("None so far: every record met the event contract.")
        return
    left, right = st.columns([1, 3])
    with left:
        st.caption(f"By reason (total {sum(snap.dead_counts.values()):,})")
        st.dataframe(data.dead_counts_frame(snap.dead_counts), hide_index=True, key="dead_counts")
    with right:
        st.caption(f"Latest {len(snap.dead_letters)}")
        st.dataframe(data.dead_letters_frame(snap.dead_letters), hide_index=True, key="dead_latest")


@st.fragment(run_every=timedelta(milliseconds=settings.refresh_ms))
def live() -> None:
    """Re-read Redis and redraw the status strip, the chart and the dead letters."""
    now_ms = time.time_ns() // 1_000_000
    try:
        snap = data.read_snapshot(
            _client(settings.redis.url), keys, settings.window_range_ms, now_ms
        )
    except redis.exceptions.RedisError as e:
        st.error(
            f"Cannot read Redis at `{shown_url}`: {e}\n\n"
            "Check that redis-server is running and reachable from here, and that `--redis` "
            "(or `TIDEGAUGE_REDIS_URL`) names the right host, port, database and password. "
            "This page retries on every refresh."
        )
        return
    except (ValueError, KeyError, TypeError) as e:
        st.error(
            f"Redis at `{shown_url}` holds data under prefix `{keys.prefix}` that this dashboard "
            f"cannot read ({type(e).__name__}: {e}). Is another application using that prefix?"
        )
        return
    if snap.is_empty:
        st.info(
            f"Connected to Redis at `{shown_url}`; waiting for the job's first batch "
            f"(nothing under prefix `{keys.prefix}` yet). Start the job with:"
        )
        st.code(_job_command(), language="bash")
        st.caption("or run the whole pipeline locally with `tidegauge demo`.")
        return
    _status_strip(snap)
    _events_chart(snap)
    _dead_letters(snap)


live()
