"""The catalog as versions in event time, against a lookup written from the definition.

service a:  v1 (team x)      v2 (team y)        tombstone       v3 (team z)
time:       |0 ............ |100 ............. |200 .......... |300 ......
as_of(a, 99) = x, as_of(a, 100) = y, as_of(a, 250) = None, as_of(a, -1) = None
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.catalog_truth import entry_at
from tidegauge.catalog.entry import CatalogEntry
from tidegauge.catalog.history import CatalogHistory, CatalogRecord, describe_change

TEAMS = ["payments", "discovery", "platform"]


def _record(offset: int, broker_ms: int, service: str, team: str | None, eff: int | None = None):  # type: ignore[no-untyped-def]
    value = None if team is None else CatalogEntry(team=team, effective_from_ms=eff).to_bytes()
    return CatalogRecord(offset, broker_ms, service, value)


def test_the_timeline_in_the_docstring() -> None:
    h = CatalogHistory.of(
        [
            _record(0, 0, "a", "x"),
            _record(1, 5, "a", "y", eff=100),  # written early, holds from 100
            _record(2, 200, "a", None),
            _record(3, 300, "a", "z"),
        ]
    )
    team = lambda t: e.team if (e := h.as_of("a", t)) else None  # noqa: E731
    assert [team(t) for t in (-1, 0, 99, 100, 199, 200, 250, 300, 10**12)] == [
        None, "x", "x", "y", "y", None, None, "z", "z",
    ]  # fmt: skip
    assert h.as_of("b", 100) is None
    assert [c for _, c in h.changes("a")] == [
        "a catalogued (team x)",
        "a moved to team y",
        "a removed from the catalog",
        "a catalogued (team z)",
    ]


def test_a_change_for_the_past_holds_from_its_effective_time_and_ties_go_to_the_later_record() -> (
    None
):
    h = CatalogHistory.of([_record(0, 1000, "a", "x"), _record(1, 5000, "a", "y", eff=2000)])
    assert h.as_of("a", 1999).team == "x" and h.as_of("a", 2000).team == "y"  # type: ignore[union-attr]
    h.add(_record(2, 6000, "a", "z", eff=2000))
    assert h.as_of("a", 2000).team == "z"  # type: ignore[union-attr]


def test_a_record_that_is_not_an_entry_is_kept_apart_and_joins_nothing() -> None:
    h = CatalogHistory.of([CatalogRecord(0, 0, "a", b"{not json"), _record(1, 10, "a", "x")])
    assert h.as_of("a", 5) is None and h.as_of("a", 10).team == "x"  # type: ignore[union-attr]
    assert len(h.rejected) == 1 and "not JSON" in h.rejected[0][1]


def _lookup(records: list[CatalogRecord], service: str, at: int) -> str | None:
    entry = entry_at(records, service, at)
    return entry.team if entry else None


_RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 1000),
        st.one_of(st.none(), st.sampled_from(TEAMS)),
        st.one_of(st.none(), st.integers(0, 1000)),
    ),
    max_size=30,
)


@given(_RECORDS, st.lists(st.integers(-10, 1100), min_size=1, max_size=20), st.integers(-10, 1100))
def test_as_of_is_the_definition_and_pruning_keeps_every_answer_from_its_horizon(
    raw: list[tuple[str, int, str | None, int | None]], times: list[int], horizon: int
) -> None:
    records = [
        _record(i, broker, service, team, eff if team is not None else None)
        for i, (service, broker, team, eff) in enumerate(raw)
    ]
    h = CatalogHistory.of(reversed(records))  # any arrival order: versions are placed by time
    for service in ("a", "b", "c"):
        for t in times:
            got = h.as_of(service, t)
            assert (got.team if got else None) == _lookup(records, service, t)
    h.prune(horizon)
    for service in ("a", "b", "c"):
        for t in [t for t in times if t >= horizon] + [horizon]:
            got = h.as_of(service, t)
            assert (got.team if got else None) == _lookup(records, service, t)
    for versions in h.versions.values():  # nothing kept that the horizon cannot need
        assert versions and versions[1:] == [v for v in versions[1:] if v.effective_ms > horizon]


def test_describe_change_names_what_changed() -> None:
    a = CatalogEntry(team="payments", tier="1")
    assert describe_change("checkout", a, CatalogEntry(team="core", tier="2")) == (
        "checkout moved to team core, tier 1 -> 2"
    )
    assert describe_change("checkout", a, a) == "checkout re-stated, unchanged"
    assert describe_change("checkout", None, a) == "checkout catalogued (team payments, tier 1)"
