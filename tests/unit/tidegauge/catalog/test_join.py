"""The catalog join of a chunk of events: the history's as-of answer for every event, at once."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tidegauge.catalog.entry import CatalogEntry
from tidegauge.catalog.history import CatalogHistory, CatalogRecord
from tidegauge.catalog.join import CatalogJoin

SERVICES = ["api", "web", "pay", "unknown"]


def _records(raw: list[tuple[int, int, int | None, int | None]]) -> list[CatalogRecord]:
    out = []
    for i, (svc, broker, team, eff) in enumerate(raw):
        value = None
        if team is not None:
            value = CatalogEntry(
                team=f"t{team}", tier=str(team % 2), effective_from_ms=eff
            ).to_bytes()
        out.append(CatalogRecord(i, broker, SERVICES[svc], value))
    return out


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.integers(0, 10_000),
            st.one_of(st.none(), st.integers(0, 5)),
            st.one_of(st.none(), st.integers(0, 10_000)),
        ),
        max_size=40,
    ),
    st.lists(st.tuples(st.integers(0, 3), st.integers(-100, 12_000)), max_size=60),
    st.integers(-100, 12_000),
)
def test_every_event_gets_the_entry_in_force_at_its_time_or_at_the_horizon(
    raw: list[tuple[int, int, int | None, int | None]],
    events: list[tuple[int, int]],
    horizon: int,
) -> None:
    records = _records(raw)
    join = CatalogJoin.of(CatalogHistory.of(records), horizon)
    reference = CatalogHistory.of(records)  # not pruned
    services = np.array([SERVICES[s] for s, _ in events], dtype=object)
    times = np.array([t for _, t in events], np.int64)
    got = join.lookup(services, times)
    for i, (s, t) in enumerate(events):
        want = reference.as_of(SERVICES[s], max(t, horizon))
        assert got["team"][i] == (want.team if want else None)
        assert got["tier"][i] == (want.tier if want else None)


def test_a_join_without_versions_gives_nothing() -> None:
    join = CatalogJoin.of(CatalogHistory(), 0)
    got = join.lookup(np.array(["api"], dtype=object), np.array([5], np.int64))
    assert got["team"].tolist() == [None] and len(join) == 0
