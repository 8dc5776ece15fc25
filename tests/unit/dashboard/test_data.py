"""What the user picked (dashboard/data.py `Filters`), without Redis."""

from __future__ import annotations

import dataclasses

import pytest

from dashboard import data

pytestmark = pytest.mark.unit


def test_filters_pick_known_services_or_all() -> None:
    f = data.Filters(services=("api", "gone"))
    assert f.selected(["api", "web"]) == ["api"]
    assert data.Filters().selected(["api", "web"]) == ["api", "web"]
    with pytest.raises(ValueError):
        data.Filters(kind="rolling")  # not a window kind


def test_filters_refuse_a_negative_top_or_an_unknown_ranking() -> None:
    assert data.Filters().top == data.DEFAULT_TOP and data.Filters(top=0).top == 0
    with pytest.raises(ValueError, match="top"):
        data.Filters(top=-1)
    with pytest.raises(ValueError, match="rank"):
        data.Filters(rank_by="p75")


def test_the_services_not_drawn_are_one_line_of_star_less_the_drawn_ones() -> None:
    from dashboard.panels import with_others
    from dashboard.windows import windows_frame
    from tests.unit.dashboard.fixtures import plain_row

    rows = [plain_row(0, "*", 100), plain_row(0, "a", 50), plain_row(0, "b", 30)]
    rows += [plain_row(10_000, "*", 40), plain_row(10_000, "a", 40)]
    snap = data.Snapshot(
        read_at_ms=0, status=None, window_size_ms=10_000, services=["a", "b", "c", "d"]
    )
    snap = dataclasses.replace(snap, drawn=["a", "b"])
    frame = with_others(windows_frame(rows), snap, data.Filters())
    rest = frame[frame["service"] == "2 others"].sort_values("window_start")
    assert rest["count"].tolist() == [20, 0]
    assert rest["events_per_s"].tolist() == [2.0, 0.0]
    chosen = data.Filters(services=("a",))  # services chosen: no such line
    assert len(with_others(windows_frame(rows), snap, chosen)) == len(rows)
    everyone = dataclasses.replace(snap, drawn=["a", "b", "c", "d"])
    assert len(with_others(windows_frame(rows), everyone, data.Filters())) == len(rows)
