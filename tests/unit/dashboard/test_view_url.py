"""A view of the dashboard as URL parameters and back (dashboard/view_url.py)."""

from __future__ import annotations

import pytest

from dashboard.view_url import View, from_params, link, to_params, wall_link

pytestmark = pytest.mark.unit

KINDS = ("tumbling", "hopping", "session")
RANGES = (300_000, 900_000, 3_600_000, 86_400_000)
LATENCY = (300_000, 900_000, 3_600_000)


def back(v: View) -> View:
    return from_params(to_params(v), KINDS, RANGES, LATENCY)


def test_the_default_view_is_the_plain_url() -> None:
    assert to_params(View()) == {}
    assert link("http://h:8501/?old=1#top", View()) == "http://h:8501/"


@pytest.mark.parametrize(
    "v",
    [
        View(services=("checkout", "search")),
        View(kind="hopping", range_ms=3_600_000),
        View(latency_range_ms=300_000, latency_service="checkout"),
        View(show_broker=True, show_total=False, wall=True),
        View(top=20, rank_by="errors"),
        View(top=0),
        View(dimension="route", dimension_of="checkout", dimension_by="p99"),
        View(dimension="route+method", dimension_value="/cart GET"),
        View(only=("region", "eu-west-1")),
        View(only=("route", "/v1:batch")),
        View(("a b", "ü"), "session", 86_400_000, 3_600_000, "a b", True, False, True),
    ],
)
def test_every_choice_survives_the_round_trip(v: View) -> None:
    assert back(v) == v and back(v).problems == ()


def test_a_link_reads_as_written() -> None:
    v = View(services=("checkout", "search"), range_ms=3_600_000, wall=True)
    assert link("http://h:8501/", v) == "http://h:8501/?svc=checkout,search&range=1h&wall=1"


def test_what_cannot_be_read_is_ignored_and_named() -> None:
    v = from_params(
        {"kind": "sliding", "range": "7m", "lrange": "soon", "wall": "maybe", "svc": ["x", "api"]},
        KINDS,
        RANGES,
        LATENCY,
    )
    assert v == View(services=("api",))  # the last of a repeated parameter counts
    assert [p.split(":")[0] for p in v.problems] == ["kind=sliding", "range=7m", "lrange=soon",
                                                      "wall=maybe"]  # fmt: skip
    assert "not one of 5m, 15m, 1h, 24h" in v.problems[1]


def test_the_wall_link_shows_the_same_view_on_the_wall_page() -> None:
    v = View(services=("checkout", "search"), range_ms=3_600_000, wall=True)
    url = wall_link("http://dash.example:8501/?svc=old&wall=1#top", v)
    assert url == "http://dash.example:8501/tidegauge/wall?svc=checkout,search&range=1h"
    assert wall_link("http://h:8501/", View()) == "http://h:8501/tidegauge/wall"


def test_how_many_services_are_drawn_and_by_what_read_as_written() -> None:
    assert to_params(View(top=0, rank_by="errors")) == {"top": "all", "by": "errors"}
    v = from_params({"top": "0", "by": "p75"}, KINDS, RANGES, LATENCY)
    assert v == View() and [p.split(":")[0] for p in v.problems] == ["top=0", "by=p75"]


def test_the_breakdown_reads_as_written() -> None:
    v = View(dimension="route", dimension_of="checkout", dimension_by="errors")
    assert link("http://h:8501/", v) == "http://h:8501/?dim=route&dof=checkout&dby=errors"
    bad = from_params({"dim": "route", "dby": "p42"}, KINDS, RANGES, LATENCY)
    assert bad == View(dimension="route") and bad.problems[0].startswith("dby=p42")


def test_only_one_value_reads_as_written() -> None:
    assert to_params(View(only=("region", "eu-west-1"))) == {"only": "region:eu-west-1"}
    bad = from_params({"only": "region"}, KINDS, RANGES, LATENCY)
    assert bad == View() and bad.problems[0].startswith("only=region")
