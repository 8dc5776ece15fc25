"""Alert firings and annotations drawn on the time charts (dashboard/marks.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dashboard import figures
from dashboard.marks import annotation_marks, clip, mark, mark_firings

pytestmark = pytest.mark.unit


def test_firings_are_drawn_as_spans_without_changing_the_shared_figure() -> None:
    from tidegauge.alerts.rules import Firing

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
    marked = mark_firings(base, fs)
    assert json.dumps(base, default=str) == before  # the shared input is untouched
    spans = marked["layout"]["shapes"]
    assert [s["x0"] for s in spans] == ["2026-11-22T10:00:00", "2026-11-22T10:00:30"]
    assert spans[0]["fillcolor"] == "#d62728" and spans[1]["line"]["dash"] == "dot"
    assert [a["text"] for a in marked["layout"]["annotations"]] == [
        "slow (api): confirmed",
        "slow (api): retracted",
    ]
    assert mark_firings(base, []) is base


def test_marks_are_clipped_to_the_chart_and_instants_are_lines() -> None:
    from tidegauge.core.store.annotations import Annotation

    marks = annotation_marks(
        [
            Annotation("incident", "incident: api 5x slower", "event", 100, 400, "api"),
            Annotation("job_start", "job restarted (batch 9)", "processing", 250, 250),
            Annotation("backlog", "backlog", "processing", 900, 950),
        ]
    )
    kept = clip(marks, 200, 800)
    assert [(m.start, m.end, m.style) for m in kept] == [(200, 400, "event"), (250, 250, "instant")]
    fig = mark({"data": [{"x": [1]}], "layout": {}}, kept)
    assert [s["type"] for s in fig["layout"]["shapes"]] == ["rect", "line"]
