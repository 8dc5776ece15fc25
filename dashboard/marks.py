"""Marks on the time charts: alert firings and annotations drawn as shaded spans or lines.

A `Mark` is a span of a chart's time axis (an instant when start == end) with a label and a
style: alert firings over their windows in event time, by state (docs/alerts.md); demo commands
and job starts over the span they affected, in their own time domain. `mark` draws them onto a
figure of `dashboard.figures` without changing it (figures are shared between sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.figures import Figure, service_label
from tidegauge.alerts.rules import Firing
from tidegauge.core.store.annotations import Annotation

__all__ = [
    "MARK_STYLE",
    "Mark",
    "annotation_marks",
    "clip",
    "firing_marks",
    "mark",
    "mark_firings",
]

#: How marks are drawn on the time charts: alert firings by state, annotations by domain.
MARK_STYLE: dict[str, dict[str, Any]] = {
    "confirmed": {"fillcolor": "#d62728", "opacity": 0.12, "line": {"width": 0}},
    "provisional": {"fillcolor": "#ff7f0e", "opacity": 0.12, "line": {"width": 0}},
    "retracted": {
        "fillcolor": "rgba(0,0,0,0)",
        "opacity": 0.6,
        "line": {"width": 1, "dash": "dot", "color": "#7f7f7f"},
    },
    "event": {"fillcolor": "#9467bd", "opacity": 0.10, "line": {"width": 0}},
    "processing": {"fillcolor": "#17becf", "opacity": 0.15, "line": {"width": 0}},
    "instant": {"opacity": 0.8, "line": {"width": 1.5, "dash": "dash", "color": "#17becf"}},
}
_MARK_TEXT = {"confirmed": "#d62728", "provisional": "#ff7f0e", "retracted": "#7f7f7f"}


@dataclass(frozen=True)
class Mark:
    """A span (or, start == end, an instant) of a time chart with its label and style."""

    start: int
    end: int
    label: str
    style: str


def firing_marks(firings: Sequence[Firing]) -> list[Mark]:
    """Alert firings over their windows (event time), by state (docs/alerts.md)."""
    return [
        Mark(f.start, f.end, f"{f.rule_name} ({service_label(f.service)}): {f.state}", f.state)
        for f in firings
    ]


def annotation_marks(annotations: Sequence[Annotation]) -> list[Mark]:
    """Demo commands and job starts over the span they affected, in their own time domain."""
    return [
        Mark(a.start, a.end, a.label, "instant" if a.end == a.start else a.domain)
        for a in annotations
    ]


def mark(fig: Figure, marks: Sequence[Mark]) -> Figure:
    """`fig` (a chart over time) with each mark as a shaded span or a dashed line and a label.

    Returns a new figure; `fig` may be shared between sessions and is not changed.
    """
    if not marks or not fig.get("data"):
        return fig
    layout = dict(fig["layout"])
    shapes = list(layout.get("shapes", []))
    notes = list(layout.get("annotations", []))
    for m in marks:
        x0, x1 = _utc(m.start), _utc(m.end)
        kind = "line" if m.start == m.end else "rect"
        shapes.append(
            {"type": kind, "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0, "y1": 1,
             "layer": "below", **MARK_STYLE[m.style]}
        )  # fmt: skip
        top = m.style not in _MARK_TEXT  # annotations above, alert firings below: no overlap
        notes.append(
            {
                "text": m.label,
                "xref": "x",
                "yref": "paper",
                "x": x0,
                "y": 1 if top else 0,
                "xanchor": "left",
                "yanchor": "top" if top else "bottom",
                "showarrow": False,
                "font": {"size": 11, "color": _MARK_TEXT.get(m.style, "#555555")},
            }
        )
    layout["shapes"], layout["annotations"] = shapes, notes
    return {"data": fig["data"], "layout": layout}


def clip(marks: Sequence[Mark], since_ms: int, until_ms: int) -> list[Mark]:
    """The marks overlapping [since_ms, until_ms], cut to it (a mark must not widen an axis)."""
    return [
        Mark(max(m.start, since_ms), min(m.end, until_ms), m.label, m.style)
        for m in marks
        if m.end >= since_ms and m.start <= until_ms
    ]


def mark_firings(fig: Figure, firings: Sequence[Firing]) -> Figure:
    """`mark` with alert firings: confirmed red, provisional orange, retracted dotted."""
    return mark(fig, firing_marks(firings))


def _utc(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms").isoformat()
