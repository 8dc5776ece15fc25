"""The latency range's CDF and table (dashboard/latency_range.py), from merged sketches."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.latency_range import cdf_frame, range_table
from tidegauge.core.window_agg import WindowAgg

pytestmark = pytest.mark.unit


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
    cdf = cdf_frame(aggs, ["*", "api", "web", "nobody"])
    assert set(cdf["service"]) == {"*", "api", "web"}
    for s, v in (
        ("api", lat["api"]),
        ("web", lat["web"]),
        ("*", np.concatenate(list(lat.values()))),
    ):
        part = cdf[cdf["service"] == s]
        median = np.interp(0.5, part["fraction"], part["latency_ms"])
        assert median == pytest.approx(np.median(v), rel=0.02)
    table = range_table(aggs, ["*", "api", "web"], 60_000).set_index("service")
    assert table.loc["*", "events"] == 10_000
    assert table.loc["*", "p99 ms"] == pytest.approx(
        np.quantile(np.concatenate(list(lat.values())), 0.99), rel=0.03
    )
    assert table.loc["api", "distinct users"] == pytest.approx(700, rel=0.03)
    assert table.loc["*", "distinct users"] == pytest.approx(1400, rel=0.03)
