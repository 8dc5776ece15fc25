"""`tidegauge catalog` on the real broker: the topic is the catalog, versions and all.

Every command a user types, then the topic read back record by record: puts, a change made for
the past (`--effective-from`), a tombstone, a TOML file loaded twice (the second time writes
nothing) and with `--prune`; `show --at` answers as of a time, as the job's join will.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import pytest

from cli.local.services import Service, free_port
from tests.integration.helpers import tidegauge
from tidegauge.catalog.entry import CatalogEntry, Slo
from tidegauge.catalog.history import CatalogHistory
from tidegauge.catalog.topic import read_catalog
from tidegauge.core.config import KafkaSettings

_ids = itertools.count()


@pytest.fixture
def catalog(broker: Service) -> KafkaSettings:
    return KafkaSettings(bootstrap=broker.address, topic=f"catalog-{next(_ids)}")


def _cli(kafka: KafkaSettings, *args: str, check: bool = True):  # type: ignore[no-untyped-def]
    return tidegauge(
        "catalog", "--bootstrap", kafka.bootstrap, "--topic", kafka.topic, *args, check=check
    )


def test_put_change_for_the_past_remove_and_read_back(catalog: KafkaSettings) -> None:
    out = _cli(
        catalog, "put", "checkout", "--team", "payments", "--tier", "1",
        "--availability", "99.9", "--latency", "800ms:99", "--tag", "oncall=#payments",
    ).stdout  # fmt: skip
    assert "checkout: team payments, tier 1, availability 99.9%, 99% under 800ms" in out
    first = read_catalog(catalog)
    assert len(first) == 1
    put_ms = first[0].broker_ms
    assert abs(put_ms - time.time() * 1000) < 60_000
    assert CatalogEntry.from_bytes(first[0].value or b"") == CatalogEntry(
        team="payments", tier="1", tags={"oncall": "#payments"}, slo=Slo(99.9, 800, 99)
    )
    # the team changed an hour ago, recorded now: it holds from then
    moved = put_ms - 3_600_000
    _cli(catalog, "put", "checkout", "--team", "core", "--effective-from", str(moved))
    _cli(catalog, "put", "search", "--team", "discovery")
    _cli(catalog, "rm", "search")
    records = read_catalog(catalog)
    assert [(r.offset, r.service, r.value is None) for r in records] == [
        (0, "checkout", False), (1, "checkout", False), (2, "search", False), (3, "search", True),
    ]  # fmt: skip
    history = CatalogHistory.of(records)
    assert history.as_of("checkout", moved - 1) is None
    assert history.as_of("checkout", moved).team == "core"  # type: ignore[union-attr]
    assert history.as_of("checkout", put_ms).team == "payments"  # type: ignore[union-attr]
    assert history.as_of("search", records[3].broker_ms) is None
    shown = _cli(catalog, "show").stdout
    assert "1 service(s)" in shown and "checkout" in shown and "search" not in shown
    past = _cli(catalog, "show", "--at", str(moved + 1)).stdout
    assert "team core" in past and "team payments" not in past
    lines = _cli(catalog, "history", "checkout").stdout.splitlines()
    assert [line.split(")  ")[-1] for line in lines] == [
        "checkout catalogued (team core)",
        "checkout moved to team payments, tier 1, SLO changed, tags changed",
    ]


def test_a_catalog_file_loaded_twice_writes_only_what_changed(
    catalog: KafkaSettings, tmp_path: Path
) -> None:
    f = tmp_path / "catalog.toml"
    f.write_text(
        '[services.checkout]\nteam = "payments"\ntier = 1\n'
        'slo = { availability = 99.9, period = "30d" }\n'
        '[services.search]\nteam = "discovery"\n'
    )
    assert "2 change(s) written" in _cli(catalog, "load", str(f)).stdout
    assert "0 change(s) written, 2 entr(y/ies) unchanged" in _cli(catalog, "load", str(f)).stdout
    f.write_text('[services.checkout]\nteam = "core"\ntier = 1\n')
    out = _cli(catalog, "load", str(f), "--prune").stdout
    assert "checkout: team core, tier 1" in out and "search: removed" in out
    now = CatalogHistory.of(read_catalog(catalog)).now()
    assert now == {"checkout": CatalogEntry(team="core", tier="1")}
    assert len(read_catalog(catalog)) == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["put", "checkout"], "needs a team, a tier or an slo"),
        (["put", "checkout", "--availability", "100"], "between 0 and 100"),
        (["put", "checkout", "--latency", "800ms"], "THRESHOLD:PERCENT"),
        (["put", "checkout", "--team", "a", "--effective-from", "yesterday"], "ISO-8601"),
        (["load", "/nonexistent.toml"], "cannot read /nonexistent.toml"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    catalog: KafkaSettings, args: list[str], says: str
) -> None:
    proc = _cli(catalog, *args, check=False)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert read_catalog(catalog) == []


def test_an_unreachable_broker_is_a_clean_error() -> None:
    kafka = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", topic="catalog")
    started = time.monotonic()
    proc = _cli(kafka, "show", check=False)
    assert proc.returncode == 1 and "cannot reach Kafka" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and time.monotonic() - started < 60


def test_a_batch_planned_again_joins_the_catalog_it_first_read(
    catalog: KafkaSettings, tmp_path: Path
) -> None:
    """A restart re-plans the batch the checkpoint had not committed: it must join the records
    it read the first time, though the catalog has moved on since; the next batch reads on."""
    from jobs.summary.catalog import join_for_batch
    from tidegauge.catalog.topic import CatalogFollower
    from tidegauge.core.windows import WindowSpec

    specs = (WindowSpec(10_000, 10_000),)
    _cli(catalog, "put", "checkout", "--team", "payments")
    checkpoint = str(tmp_path / "checkpoint")
    follower = CatalogFollower(catalog)
    try:
        first = join_for_batch(checkpoint, 5, 0, specs, follower)
    finally:
        follower.close()
    _cli(catalog, "put", "checkout", "--team", "core", "--effective-from", "0")
    services = np.array(["checkout"], dtype=object)
    later = np.array([10**13], np.int64)  # any time: both entries are in force by then
    fresh = CatalogFollower(catalog)  # a restarted planner
    try:
        again = join_for_batch(checkpoint, 5, 0, specs, fresh)
        next_batch = join_for_batch(checkpoint, 6, 0, specs, fresh)
    finally:
        fresh.close()
    assert first.lookup(services, later)["team"].tolist() == ["payments"]
    assert again.lookup(services, later)["team"].tolist() == ["payments"]
    assert next_batch.lookup(services, later)["team"].tolist() == ["payments"]
    # ("core" holds from time 0, "payments" from its later broker time: as of now, payments)
    assert next_batch.lookup(services, np.array([1], np.int64))["team"].tolist() == ["core"]
    assert again.lookup(services, np.array([1], np.int64))["team"].tolist() == [None]
