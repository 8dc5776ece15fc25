"""Retention tiers end to end in the sink (jobs/sink/rollup.py) and the range reader, real Redis.

A stream of three hours of event time (tests/integration/fixtures.py) is written batch by batch
as the job would write it (absolute window aggregates, late rows long after their windows closed,
stragglers, duplicates), with short tiers (`30m,1m:2h,10m:1d`), and the same stream again with
`forever`. Ground truth is the events themselves. Ranges read after the raw windows expired
must equal the truth (counts exact, p50/p99 rank error <= 0.01, distinct users <= 3 %) and the
same ranges read from the raw windows that were never expired.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from cli.local.services import start_redis
from jobs.sink.ahead import read_ahead
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch
from jobs.sink.retry import SinkError, retry
from jobs.sink.rollup import BatchTime
from jobs.state.rows import WindowUpdate
from tests.fixtures import H, M, S
from tests.fixtures import T as T0  # an hour boundary
from tests.integration.fixtures import (
    BATCHES,
    KEYS,
    LATENESS,
    SERVICES,
    SRC,
    TIERS,
    Truth,
    W,
    _stream,
    _write,
)
from tidegauge.core.config import RedisSettings
from tidegauge.core.dimensions import member
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.retention import Retention, Tier, format_size
from tidegauge.core.store import (
    read_lateness,
    read_range,
    read_services,
    split_batch_field,
    straggler_value,
)
from tidegauge.core.store.tiers import read_retention
from tidegauge.core.window_agg import WindowAgg


@pytest.fixture(scope="module")
def stores(module_redis_db: Callable[[], RedisSettings]) -> dict[str, Any]:
    batches, truth = _stream()
    tiered = redis.Redis.from_url(module_redis_db().url)
    raw = redis.Redis.from_url(module_redis_db().url)
    for b in batches:
        _write(tiered, b, TIERS)
        _write(raw, b, Retention.parse("forever"))
    return {"tiered": tiered, "raw": raw, "truth": truth, "batches": batches}


def _slots(lo: int, hi: int) -> range:
    return range(lo, hi, W)


def _rank_error(values: list[float], estimate: float, q: float) -> float:
    arr = np.sort(np.asarray(values))
    return abs(np.searchsorted(arr, estimate, side="right") / len(arr) - q)


RANGES = [
    ("all three hours", 0, 3 * H),
    ("across every tier boundary", 17 * M + 25 * S, 2 * H + 41 * M + 5 * S),
    ("inside the expired raw part", H + 17 * M, H + 52 * M),
    ("the recent raw part", 2 * H + 40 * M, 2 * H + 55 * M),
]


@pytest.mark.parametrize(("name", "lo", "hi"), RANGES, ids=[r[0] for r in RANGES])
def test_a_range_from_roll_ups_equals_the_truth_and_the_raw_windows(
    stores: dict[str, Any], name: str, lo: int, hi: int
) -> None:
    truth: Truth = stores["truth"]
    for svc in (*SERVICES, "*"):
        got = read_range(stores["tiered"], KEYS, T0 + lo, T0 + hi, svc)
        assert got.covered_from is not None and got.covered_to is not None
        held = _slots(got.covered_from, got.covered_to)
        names = SERVICES if svc == "*" else (svc,)
        lat = [x for s in held for n in names for x in truth.latency.get((s, n), [])]
        users = set().union(*(truth.users.get((s, n), set()) for s in held for n in names))
        assert got.metrics["count"] == len(lat), f"{name} {svc}: {got.resolution}"
        assert _rank_error(lat, got.metrics["p50"], 0.5) <= 0.01
        assert _rank_error(lat, got.metrics["p99"], 0.99) <= 0.01
        assert abs(got.metrics["distinct_users"] - len(users)) <= 0.03 * len(users)
        raw = read_range(stores["raw"], KEYS, got.covered_from, got.covered_to, svc)
        assert raw.metrics["count"] == got.metrics["count"]
        assert raw.pieces == {SRC.key: raw.windows}
        assert _rank_error(lat, raw.metrics["p99"], 0.99) <= 0.01
        assert abs(raw.metrics["distinct_users"] - got.metrics["distinct_users"]) <= 0.03 * len(
            users
        )


def test_old_parts_come_from_roll_ups_and_a_coarser_resolution_reads_fewer_pieces(
    stores: dict[str, Any],
) -> None:
    got = read_range(stores["tiered"], KEYS, T0, T0 + 3 * H, "api")
    # raw kept 30 minutes, 1 m roll-ups 2 hours: the first hour answers from 10 m roll-ups
    assert set(got.pieces) == {"10000", "r60000", "r600000"}
    assert got.pieces["r600000"] == 6 and got.pieces["10000"] >= 180
    assert "× 10m" in got.resolution and got.covered_from == T0
    coarse = read_range(stores["tiered"], KEYS, T0, T0 + 3 * H, "api", min_size_ms=10 * M)
    assert coarse.pieces["r600000"] >= 17 and coarse.windows < 40
    assert coarse.metrics["count"] == got.metrics["count"]
    assert coarse.covered_to == got.covered_to


def test_a_range_finer_than_every_tier_still_holding_it_has_no_windows(
    stores: dict[str, Any],
) -> None:
    # 47..52 min: the raw windows and the 1 m roll-ups have expired, no 10 m roll-up lies inside
    got = read_range(stores["tiered"], KEYS, T0 + 47 * M, T0 + 52 * M, "api")
    assert got.windows == 0 and got.covered_from is None and got.resolution == "no windows"


def test_raw_windows_and_fine_roll_ups_expire_and_memory_stays_bounded(
    stores: dict[str, Any],
) -> None:
    r: redis.Redis = stores["tiered"]
    last = stores["batches"][-1].at.watermark_ms
    raw_starts = [int(s) for s in r.zrange(KEYS.window_index(SRC.key), 0, -1)]
    assert min(raw_starts) + W > last - 30 * M  # nothing older than the raw TTL
    assert len(raw_starts) <= (30 * M + 2 * M) // W
    minutes = [int(s) for s in r.zrange(KEYS.window_index("r60000"), 0, -1)]
    assert min(minutes) + M > last - 2 * H and max(minutes) + M <= last
    tens = [int(s) for s in r.zrange(KEYS.window_index("r600000"), 0, -1)]
    assert tens[0] == T0 and len(tens) == (last - T0) // (10 * M)
    # no key of an expired raw window is left behind, of any kind
    old = [
        k
        for k in r.scan_iter(f"tg:*:{SRC.key}:*")
        if k.split(b":")[-1].isdigit() and not k.startswith(b"tg:arr:")
    ]
    assert all(int(k.split(b":")[-1]) + W > last - 30 * M for k in old)
    assert r.dbsize() < stores["raw"].dbsize() / 2
    stored = read_retention(r, KEYS)
    assert stored is not None and stored.retention == TIERS and stored.watermark_ms == last
    # arrival series age on their own clocks: broker time moved three hours, processing time
    # three minutes
    broker = [int(s) for s in r.zrange(KEYS.arrivals_index("broker", W), 0, -1)]
    assert min(broker) + W > T0 + (BATCHES - 1) * M - 30 * M and len(broker) <= 31
    assert r.zcard(KEYS.arrivals_index("processing", W)) == BATCHES // 10
    assert [la.spec.key for la in stored.layers] == ["10000", "r60000", "r600000"]


def test_roll_ups_keep_their_services_counts_for_ranking(stores: dict[str, Any]) -> None:
    """Every roll-up, as every raw window, keeps its services' events and errors in sorted
    sets beside its aggregates (`*` left out), equal to the aggregates' counts."""
    r: redis.Redis = stores["tiered"]
    checked = 0
    for spec in ("r60000", "r600000", SRC.key):
        for start in [int(s) for s in r.zrange(KEYS.window_index(spec), 0, -1)][:20]:
            aggs = {
                k: WindowAgg.from_bytes(v)
                for k, v in r.hgetall(KEYS.window_aggs(spec, start)).items()
                if k != b"*"
            }
            events = r.zrange(KEYS.window_events(spec, start), 0, -1, withscores=True)
            errors = r.zrange(KEYS.window_errors(spec, start), 0, -1, withscores=True)
            assert dict(events) == {k: float(a.count) for k, a in aggs.items()}
            assert dict(errors) == {k: float(a.errors) for k, a in aggs.items()}
            checked += len(aggs)
    assert checked > 100


@pytest.mark.parametrize("kind", ["late", "strag", "dup"])
def test_late_rows_stragglers_and_duplicates_survive_the_roll_ups(
    stores: dict[str, Any], kind: str
) -> None:
    """Late rows that came after their period was rolled up, even after their raw window had
    expired, are in the roll-ups: every tier's fields over a range add up to the truth."""
    truth: Truth = stores["truth"]
    facts = {"late": truth.late, "strag": truth.stragglers, "dup": truth.duplicates}[kind]
    r: redis.Redis = stores["tiered"]
    lo, hi = T0, T0 + 2 * H + 58 * M + 20 * S  # 10 m roll-ups, then 1 m ones, then raw
    got = read_range(r, KEYS, lo, hi, "*")
    totals: dict[str, int] = defaultdict(int)
    name = {"late": KEYS.window_late, "strag": KEYS.window_stragglers}.get(
        kind, KEYS.window_duplicates
    )
    pieces = _pieces_of(r, lo, hi)
    assert set(pieces) == set(got.pieces) == {"10000", "r60000", "r600000"}
    for key, starts in pieces.items():
        for start in starts:
            for f, v in r.hgetall(name(key, start)).items():
                svc = split_batch_field(f)[0]
                if svc == "*":  # a roll-up's folded `*` revisions: not a service's stragglers
                    continue
                if kind == "late":
                    totals[svc] += LateAgg.count_of(v)
                else:  # a roll-up's folded stragglers are "count/revisions"
                    totals[svc] += straggler_value(v)[0] if kind == "strag" else int(v)
    want: dict[str, int] = defaultdict(int)
    for (start, svc), n in facts.items():
        if lo <= start < hi:
            want[svc] += n
    assert dict(totals) == dict(want) and sum(want.values()) > 20


def _pieces_of(r: redis.Redis, lo: int, hi: int) -> dict[str, list[int]]:
    from tidegauge.core.retention import cover

    stored = read_retention(r, KEYS)
    assert stored is not None
    out: dict[str, list[int]] = defaultdict(list)
    for spec, start in cover(lo, hi, stored.layers):
        out[spec.key].append(start)
    return out


def test_replaying_a_batch_that_rolled_up_and_expired_changes_nothing(
    module_redis_db: Callable[[], RedisSettings],
) -> None:
    batches, _ = _stream(seed=11)
    r = redis.Redis.from_url(module_redis_db().url)
    for b in batches[:121]:  # batch 120 closes a 10 m period and expires raw windows
        _write(r, b, TIERS)
    before = _snapshot(r)
    _write(r, batches[120], TIERS)
    assert _snapshot(r) == before
    for b in batches[121:]:
        _write(r, b, TIERS)
    _write(r, batches[-1], TIERS)
    after = _snapshot(r)
    again = redis.Redis.from_url(module_redis_db().url)
    for b in batches:
        _write(again, b, TIERS)
    assert _snapshot(again) == after  # a second run of the same batches: the same bytes


def _snapshot(r: redis.Redis) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        if kind == b"hash":
            out[key] = r.hgetall(key)
        elif kind == b"zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            out[key] = sorted(r.smembers(key))
        else:
            out[key] = r.get(key)
    return {k: v for k, v in out.items() if not k.endswith(b":epoch")}  # a random token


def test_a_service_gone_for_longer_than_every_tier_leaves_the_service_list(
    redis_client: redis.Redis,
) -> None:
    short = Retention.parse("2m,1m:4m")
    agg = WindowAgg()
    agg.add(np.array([5.0]), np.array([200]), np.array(["u"], dtype=object))
    blob = agg.to_bytes()
    for k in range(12):
        updates = [WindowUpdate(SRC.key, T0 + k * M, "steady", blob)]
        if k == 0:
            updates.append(WindowUpdate(SRC.key, T0, "once", blob))
        at = BatchTime(k, T0 + k * M - LATENESS if k else 0, T0 + k * S)
        write_batch(
            redis_client,
            KEYS,
            SinkBatch(k, updates, at=at),
            SinkConfig(retention=short, source=SRC),
        )
        if k == 3:
            assert read_services(redis_client, KEYS) == ["once", "steady"]
    assert read_services(redis_client, KEYS) == ["steady"]
    assert not redis_client.hgetall(KEYS.window_aggs("r60000", T0))


def test_a_full_redis_gets_a_clear_error_and_the_batch_goes_in_once_there_is_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At `maxmemory` (noeviction) Redis refuses writes: the sink says so and what to do,
    retries within --sink-retry-for, and writes the batch once there is room again."""
    svc = start_redis(log_path=tmp_path / "redis.log")
    try:
        r = redis.Redis(host=svc.host, port=svc.port)
        batch = _stream()[0][1]
        r.mset({f"ballast:{i}": b"x" * 100 for i in range(20_000)})
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", int(r.info("memory")["used_memory"]) - 200_000)

        with pytest.raises(SinkError) as e:
            retry(lambda: _write(r, batch, TIERS), "writing batch 1", budget_ms=1_500)
        assert "Redis full for" in str(e.value) and "maxmemory" in str(e.value)
        assert "--retention" in str(e.value) and "Nothing of the batch is lost" in str(e.value)
        assert not r.exists(KEYS.window_index(SRC.key))

        threading.Timer(1.0, lambda: r.config_set("maxmemory", 0)).start()
        with caplog.at_level(logging.WARNING, logger="tidegauge.job"):
            retry(lambda: _write(r, batch, TIERS), "writing batch 1", budget_ms=30_000)
        assert "Redis full" in caplog.text and "Redis writable again after" in caplog.text
        assert r.zcard(KEYS.window_index(SRC.key)) == len({w.start_ms for w in batch.windows})
    finally:
        svc.stop()


@pytest.mark.parametrize("svc", ["api", "*"])
def test_lateness_of_a_range_reads_the_roll_ups_too(stores: dict[str, Any], svc: str) -> None:
    """`query lateness` over three hours: late rows, stragglers and duplicates from every tier
    equal the truth, and the events are the accepted ones plus the late ones."""
    truth: Truth = stores["truth"]
    lo, hi = T0, T0 + 2 * H + 58 * M + 20 * S
    got = read_lateness(stores["tiered"], KEYS, lo, hi, svc)
    names = SERVICES if svc == "*" else (svc,)

    def total(facts: dict[tuple[int, str], int]) -> int:
        return sum(n for (s, name), n in facts.items() if lo <= s < hi and name in names)

    accepted = sum(
        len(v) for (s, name), v in truth.latency.items() if lo <= s < hi and name in names
    )
    assert got.late == total(truth.late) > 0
    assert got.stragglers == total(truth.stragglers) > 0
    assert got.duplicates == total(truth.duplicates) > 0
    assert got.events == accepted + got.late
    assert set(got.spec.split("+")) == {"10000", "r60000", "r600000"}


def test_stars_lateness_is_whole_where_some_batches_kept_no_star_fields(
    module_redis_db: Callable[[], RedisSettings],
) -> None:
    """Batches that kept `*`'s late rows as "*|batch" fields beside batches that did not (as a
    store written before them has), in the same windows and their roll-ups: `*`'s lateness
    over every tier counts each late row once (the truth), and its digests weigh what the
    services' digests weigh together."""
    batches, truth = _stream()
    r = redis.Redis.from_url(module_redis_db().url)
    for b in batches:
        _write(r, b, TIERS)
        if b.batch_id % 2:  # as written before: no `*` field
            for key in r.scan_iter("tg:late:*", _type="hash"):
                r.hdel(key, f"*|{b.batch_id}")
    assert any(
        f.startswith(b"*|") for k in r.scan_iter("tg:late:*", _type="hash") for f in r.hkeys(k)
    )
    lo, hi = T0, T0 + 2 * H + 58 * M + 20 * S
    star = read_lateness(r, KEYS, lo, hi, "*")
    assert star.late == sum(n for (s, _), n in truth.late.items() if lo <= s < hi) > 0
    each = [read_lateness(r, KEYS, lo, hi, svc) for svc in SERVICES]
    assert star.late == sum(x.late for x in each)
    assert star.lateness.count == sum(x.lateness.count for x in each)
    assert star.overdue.count == sum(x.overdue.count for x in each)


def test_a_store_grown_without_retention_is_rolled_up_over_batches_and_loses_nothing(
    module_redis_db: Callable[[], RedisSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hours written with `forever`, then the tiers: the backlog is rolled up a bounded
    number of windows per batch, oldest first; no raw window goes before it is rolled up, so
    every range reads whole all along, and the end state answers like a store tiered from the
    start (counts, late rows, stragglers against the truth)."""
    import jobs.sink.rollup

    monkeypatch.setattr(jobs.sink.rollup, "ROLLUP_PER_BATCH", 40)
    batches, truth = _stream(seed=5)
    r = redis.Redis.from_url(module_redis_db().url)
    plain = redis.Redis.from_url(module_redis_db().url)
    switch = 120
    for b in batches[:switch]:
        _write(r, b, Retention.parse("forever"))
        _write(plain, b, Retention.parse("forever"))
    behind = 0
    for b in batches[switch:]:
        _write(r, b, TIERS)
        _write(plain, b, Retention.parse("forever"))
        stored = read_retention(r, KEYS)
        assert stored is not None
        minutes = stored.layers[1].ready_until
        assert minutes is not None and minutes <= b.at.watermark_ms
        behind += minutes < b.at.watermark_ms - 2 * M
        got = read_range(r, KEYS, T0, T0 + 3 * H, "*")
        want = read_range(plain, KEYS, T0, got.covered_to or T0, "*")
        assert got.covered_from == T0 and got.metrics["count"] == want.metrics["count"]
        assert got.covered_to == want.covered_to, b.batch_id
    assert behind >= 10  # the backlog took many batches: each rolled a bounded part of it
    assert stored.layers[1].ready_until == tumbling_start_of(batches[-1].at.watermark_ms, M)
    raw_starts = [int(s) for s in r.zrange(KEYS.window_index(SRC.key), 0, -1)]
    assert min(raw_starts) + W > batches[-1].at.watermark_ms - 30 * M
    lo, hi = T0, T0 + 2 * H + 58 * M + 20 * S
    lateness = read_lateness(r, KEYS, lo, hi, "*")
    in_range = [n for (s, _), n in truth.late.items() if lo <= s < hi]
    assert lateness.late == sum(in_range) > 0
    assert lateness.stragglers == sum(n for (s, _), n in truth.stragglers.items() if lo <= s < hi)


def tumbling_start_of(ts_ms: int, size_ms: int) -> int:
    return ts_ms - ts_ms % size_ms


def test_a_dimensions_store_rolls_up_and_expires_as_the_services_store_does(
    stores: dict[str, Any], module_redis_db: Callable[[], RedisSettings]
) -> None:
    """Each service's windows, late rows, stragglers and duplicates also written as one value of
    a dimension (as the job writes slices, jobs/sink/slices.py): its store's ranges, across every
    tier and after the raw windows expired, equal the services' own."""
    r = redis.Redis.from_url(module_redis_db().url)

    def renamed(rows: list[Any]) -> list[Any]:
        return [dataclasses.replace(x, service=member(x.service, "v")) for x in rows]

    for b in stores["batches"]:
        whole = SinkBatch(
            b.batch_id, b.windows, late=b.late, stragglers=b.stragglers,
            duplicates=b.duplicates, arrivals=b.arrivals, at=b.at,
        )  # fmt: skip
        sliced = SinkBatch(
            b.batch_id, renamed(b.windows), late=renamed(b.late),
            stragglers=renamed(b.stragglers), duplicates=renamed(b.duplicates), at=b.at,
        )  # fmt: skip
        config = SinkConfig(arrival_window_ms=W, retention=TIERS, source=SRC)
        write_batch(r, KEYS, whole, config, {"copy": sliced})
    by = KEYS.by("copy")
    assert read_retention(r, by) is not None
    for _, lo, hi in RANGES:
        for svc in SERVICES:
            want = read_range(stores["tiered"], KEYS, T0 + lo, T0 + hi, svc)
            got = read_range(r, by, T0 + lo, T0 + hi, member(svc, "v"))
            assert (got.pieces, got.resolution) == (want.pieces, want.resolution)
            assert got.metrics == want.metrics and want.metrics["count"] > 0, svc
            late = read_lateness(r, by, T0 + lo, T0 + hi, member(svc, "v"))
            late_want = read_lateness(stores["tiered"], KEYS, T0 + lo, T0 + hi, svc)
            assert (late.late, late.stragglers, late.duplicates, late.events) == (
                late_want.late,
                late_want.stragglers,
                late_want.duplicates,
                late_want.events,
            )
    # what the tiers expired in the services' store is gone from the dimension's store too
    main = {k for k in r.scan_iter(f"{KEYS.prefix}:agg:*")}
    copy = {k.replace(b":by:copy", b"") for k in r.scan_iter(f"{by.prefix}:agg:*")}
    assert copy == main and r.scard(by.services) == len(SERVICES)


def test_retention_read_ahead_of_each_batchs_rows_writes_the_same_bytes(
    stores: dict[str, Any], module_redis_db: Callable[[], RedisSettings]
) -> None:
    """The job plans each batch's retention during its stateful step (jobs/sink/ahead.py).

    With a dimension's store and a size budget, through roll-ups of every tier, late rows into
    rolled-up periods and expiry: the stores written so equal, byte for byte, those planned
    inside each transaction. A plan read for another batch or other stores is not used.
    """
    budget = int(_held(_tier_bytes(stores["tiered"]), TIERS) / 4)
    config = SinkConfig(arrival_window_ms=W, retention=TIERS, source=SRC, retention_size=budget)
    inline = redis.Redis.from_url(module_redis_db().url)
    ahead = redis.Redis.from_url(module_redis_db().url)
    previous = None
    for k, b in enumerate(stores["batches"]):
        whole = SinkBatch(
            b.batch_id, b.windows, late=b.late, stragglers=b.stragglers,
            duplicates=b.duplicates, arrivals=b.arrivals, at=b.at,
        )  # fmt: skip
        copy = {"copy": dataclasses.replace(whole, arrivals=())}
        write_batch(inline, KEYS, whole, config, copy)
        read = read_ahead(ahead, KEYS, b.at, config, ["copy"])
        if k % 7 == 3 and previous is not None:
            read = previous  # another batch's: planned in the transaction instead
        elif k % 7 == 5:
            read = read_ahead(ahead, KEYS, b.at, config, [])  # without the dimension's store
        previous = read
        write_batch(ahead, KEYS, whole, config, copy, read)
    assert any(k.startswith(b"tg:by:copy:") for k in ahead.scan_iter(count=1000))
    assert _snapshot(ahead) == _snapshot(inline)


def _window_bytes(r: redis.Redis, spec_key: str, dimensions: bool = True) -> float:
    """Mean bytes of a stored window of this spec, every one of its keys counted (with
    `dimensions`, a dimension's store's keys of the same window too)."""
    starts = [int(s) for s in r.zrange(KEYS.window_index(spec_key), 0, -1)]
    pipe = r.pipeline(transaction=False)
    for start in starts:
        for key in r.keys(f"tg:*:{spec_key}:{start}"):
            if dimensions or not key.startswith(b"tg:by:"):
                pipe.memory_usage(key, samples=0)
    return sum(pipe.execute()) / len(starts)


def _tier_bytes(r: redis.Redis, dimensions: bool = True) -> dict[str, float]:
    return {spec: _window_bytes(r, spec, dimensions) for spec in (SRC.key, "r60000", "r600000")}


def _held(sizes: dict[str, float], retention: Retention) -> float:
    """Bytes the tiers hold once full: windows kept x their measured size."""
    raw = retention.raw_ttl_ms
    assert raw is not None
    steps = [(SRC.key, raw, W)] + [(t.spec.key, t.ttl_ms, t.size_ms) for t in retention.tiers]
    return sum(sizes[spec] * ttl / step for spec, ttl, step in steps)


def test_a_size_budget_shortens_every_tier_to_fit_and_reads_stay_exact(
    stores: dict[str, Any],
    module_redis_db: Callable[[], RedisSettings],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`--retention-size`: the store written with a quarter of what the tiers would hold.

    What the tiers hold once full is counted here from the unbudgeted store's own windows
    (every key of every window, `MEMORY USAGE`), independently of the sink's sampling.
    """
    sizes = _tier_bytes(stores["tiered"])

    def held(retention: Retention) -> float:
        return _held(sizes, retention)

    budget = int(held(TIERS) / 4)
    r = redis.Redis.from_url(module_redis_db().url)
    config = SinkConfig(arrival_window_ms=W, retention=TIERS, source=SRC, retention_size=budget)
    with caplog.at_level(logging.INFO, logger="tidegauge.job"):
        for b in stores["batches"]:
            write_batch(r, KEYS, SinkBatch(b.batch_id, b.windows, late=b.late, at=b.at), config)
    stored = read_retention(r, KEYS)
    assert stored is not None
    got = stored.retention
    assert stored.configured == TIERS and stored.size_budget == budget
    assert stored.text().endswith(
        f"(--retention {TIERS.text()} shortened to fit {format_size(budget)})"
    )
    # every TTL shorter by about one factor, and what they hold once full within the budget
    assert got.raw_ttl_ms is not None and TIERS.raw_ttl_ms is not None
    factors = [got.raw_ttl_ms / TIERS.raw_ttl_ms]
    factors += [g.ttl_ms / t.ttl_ms for g, t in zip(got.tiers, TIERS.tiers, strict=True)]
    assert all(0.15 < f < 0.35 for f in factors), got.text()
    assert 0.8 * budget <= held(got) <= 1.1 * budget
    said = [m for m in caplog.messages if " in force: --retention " in m]
    assert said and said[-1].startswith(f"retention {got.text()} in force")
    assert len(said) <= 6  # once per change: the sizes are measured once a minute
    assert "cannot hold" not in caplog.text
    # the raw windows expired at the shorter TTL, every key of them
    last = stores["batches"][-1].at.watermark_ms
    raw_starts = [int(s) for s in r.zrange(KEYS.window_index(SRC.key), 0, -1)]
    assert min(raw_starts) + W > last - got.raw_ttl_ms
    assert len(raw_starts) <= (got.raw_ttl_ms + 2 * M) // W
    for k in r.scan_iter(f"tg:*:{SRC.key}:*"):
        if k.split(b":")[-1].isdigit() and not k.startswith(b"tg:arr:"):
            assert int(k.split(b":")[-1]) + W > last - got.raw_ttl_ms
    # and what is still held reads exactly as before, from the tiers that hold it
    _reads_exactly(r, stores["truth"])
    # the budget lifted: the TTLs grow back, and readers do not look for what has gone
    last = stores["batches"][-1]
    again = SinkBatch(last.batch_id, last.windows, late=last.late, at=last.at)
    write_batch(r, KEYS, again, dataclasses.replace(config, retention_size=None))
    lifted = read_retention(r, KEYS)
    assert lifted is not None and lifted.retention == TIERS
    _reads_exactly(r, stores["truth"])


def _reads_exactly(r: redis.Redis, truth: Truth) -> None:
    """Three hours of each service read from the tiers: exact counts over what they cover."""
    for svc in SERVICES:
        part = read_range(r, KEYS, T0, T0 + 3 * H, svc)
        assert part.covered_from is not None and part.covered_to is not None
        held_slots = _slots(part.covered_from, part.covered_to)
        want = sum(len(truth.latency.get((s, svc), [])) for s in held_slots)
        assert part.metrics["count"] == want, part.resolution
        assert len(part.pieces) >= 2  # some of it from roll-ups


def test_the_services_and_a_dimensions_store_share_one_budget_and_one_retention(
    stores: dict[str, Any], module_redis_db: Callable[[], RedisSettings]
) -> None:
    """`--retention-size` bounds what the job keeps: its dimensions' stores count too."""
    budget = int(_held(_tier_bytes(stores["tiered"]), TIERS) / 4)  # the services' store alone
    r = redis.Redis.from_url(module_redis_db().url)
    config = SinkConfig(arrival_window_ms=W, retention=TIERS, source=SRC, retention_size=budget)
    for b in stores["batches"]:
        copy = [dataclasses.replace(x, service=member(x.service, "v")) for x in b.windows]
        write_batch(
            r,
            KEYS,
            SinkBatch(b.batch_id, b.windows, at=b.at),
            config,
            {"copy": SinkBatch(b.batch_id, copy, at=b.at)},
        )
    kept, by_copy = read_retention(r, KEYS), read_retention(r, KEYS.by("copy"))
    assert kept is not None and by_copy is not None
    assert kept.retention == by_copy.retention  # one retention in force for the job
    # the two stores together (every key of each window, both prefixes) within the budget;
    # the services' own holds the copy's rows plus each window's `*` and ranking: between half
    # and two thirds of the two (the budget is shared, not given to each store whole)
    both = _held(_tier_bytes(r), kept.retention)
    assert 0.8 * budget <= both <= 1.1 * budget, kept.text()
    own = _held(_tier_bytes(r, dimensions=False), kept.retention)
    assert 0.5 * both <= own <= 2 / 3 * both


def test_a_budget_too_small_for_the_tiers_says_so_and_keeps_the_shortest_retention(
    stores: dict[str, Any],
    module_redis_db: Callable[[], RedisSettings],
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = redis.Redis.from_url(module_redis_db().url)
    config = SinkConfig(arrival_window_ms=W, retention=TIERS, source=SRC, retention_size=10_000)
    with caplog.at_level(logging.INFO, logger="tidegauge.job"):
        for b in stores["batches"][:90]:
            write_batch(r, KEYS, SinkBatch(b.batch_id, b.windows, at=b.at), config)
    kept = read_retention(r, KEYS)
    assert kept is not None
    # the floors: a minute of raw windows, one period of the next tier for each roll-up
    assert kept.retention == Retention(M, (Tier(M, 10 * M), Tier(10 * M, 10 * M)))
    assert "--retention-size 9.77KB cannot hold even the shortest retention" in caplog.text
