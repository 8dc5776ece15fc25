"""The Redis sink (jobs/sink/redis_sink.py) and the read API (tidegauge/core/store/), real Redis.

The sink promises that each micro-batch is one transaction of absolute values, so a replayed
batch leaves Redis exactly as it was; these tests replay batches and compare every key. The `*`
row of a window is the merge of every stored service's WindowAgg (sketches included), and a
range read is the merge of the windows inside it; expected answers are built with the same
`WindowAgg.merged` from the aggregates the tests sent.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
import redis

import jobs.sink.status as status_writes
from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch
from jobs.sink.rollup import BatchTime
from jobs.sink.status import write_progress
from jobs.state.rows import ArrivalUpdate, LateUpdate, WindowCount, WindowUpdate
from tests.fixtures import S, T
from tidegauge.core.events import ALL_SERVICES, OVERFLOW_SERVICE
from tidegauge.core.metrics import PERCENTILES
from tidegauge.core.store import (
    DeadLetter,
    Keys,
    RangeResult,
    WindowRow,
    read_arrivals,
    read_batches,
    read_dead_counts,
    read_dead_letters,
    read_range,
    read_services,
    read_status,
    read_window_specs,
    read_windows,
)
from tidegauge.core.store.arrivals import arrival_totals
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

W = 10 * S
KEYS = Keys("tg")
TUMBLING = WindowSpec.tumbling(W)
MINUTE = WindowSpec.tumbling(60 * S)
HOPPING = WindowSpec(30 * S, 10 * S)


def snapshot(r: redis.Redis) -> dict[bytes, tuple[bytes, Any, int]]:
    """Every key with its type, full content and TTL, read in a type-aware, order-free way."""
    out: dict[bytes, tuple[bytes, Any, int]] = {}
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        value: Any
        if kind == b"hash":
            value = r.hgetall(key)
        elif kind == b"zset":
            value = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            value = sorted(r.smembers(key))
        elif kind == b"list":
            value = r.lrange(key, 0, -1)
        else:
            value = r.get(key)
        out[key] = (kind, value, r.ttl(key))
    return out


def letter(
    partition: int,
    offset: int,
    ts: int,
    reason: str = "invalid_json",
    batch_id: int = 1,
    raw: bytes = b"{oops",
) -> DeadLetter:
    return DeadLetter(
        partition=partition,
        offset=offset,
        kafka_timestamp=ts,
        reason=reason,
        detail=f"detail of {partition}:{offset}",
        raw=raw,
        raw_size=len(raw) + 10,
        batch_id=batch_id,
    )


def events(
    n: int, seed: int, users: range | None = None, scale: float = 20.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n events: lognormal latencies around `scale` ms (some absent), ~3 % 5xx, users drawn
    from `users` (default: 100 users of their own). Seeded, so every call is reproducible."""
    rng = np.random.default_rng(seed)
    latency = rng.lognormal(np.log(scale), 0.6, n)
    latency[rng.random(n) < 0.05] = np.nan
    status = rng.choice(np.array([200, 404, 500, 503, -1]), n, p=[0.85, 0.07, 0.02, 0.01, 0.05])
    pool = users if users is not None else range(seed * 1000, seed * 1000 + 100)
    ids = np.array([f"user-{u}" for u in rng.choice(np.array(pool), n)], dtype=object)
    return latency, status, ids


def agg_of(n: int, seed: int, users: range | None = None, scale: float = 20.0) -> WindowAgg:
    """The WindowAgg of `events(n, seed, users, scale)`."""
    agg = WindowAgg()
    agg.add(*events(n, seed, users, scale))
    return agg


def distinct(*calls: tuple[int, int, range]) -> int:
    """Exact number of distinct users over several `events(n, seed, users)` calls."""
    return len(set().union(*(set(events(n, seed, users)[2]) for n, seed, users in calls)))


def update(spec: WindowSpec, start: int, service: str, agg: WindowAgg) -> WindowUpdate:
    """What the job sends for one (window, service): its aggregate's bytes."""
    return WindowUpdate(spec.key, start, service, agg.to_bytes())


def stored_aggs(r: redis.Redis, spec: WindowSpec, start: int) -> dict[str, WindowAgg]:
    raw = r.hgetall(KEYS.window_aggs(spec.key, start))
    return {k.decode(): WindowAgg.from_bytes(v) for k, v in raw.items()}


def stored_docs(r: redis.Redis, spec: WindowSpec, start: int) -> dict[str, dict[str, Any]]:
    """Each service's figures of a stored window, as every reader computes them."""
    return {k: a.metrics(spec.size_ms) for k, a in stored_aggs(r, spec, start).items()}


def window_counts(r: redis.Redis, spec: WindowSpec, start: int) -> dict[str, int]:
    return {k: d["count"] for k, d in stored_docs(r, spec, start).items()}


# --- write_batch: idempotence ---------------------------------------------------------------


def _full_batch(batch_id: int) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "windows": [
            update(TUMBLING, T, "api", agg_of(50, 1)),
            update(TUMBLING, T, "web", agg_of(20, 2)),
            update(TUMBLING, T + W, "api", agg_of(10, 3)),
            update(MINUTE, T, "db", agg_of(90, 4)),
            update(HOPPING, T - 20 * S, "api", agg_of(50, 1)),
            update(HOPPING, T, "api", agg_of(60, 5)),
        ],
        "late": [
            LateUpdate(TUMBLING.key, T - W, "api", 3),
            LateUpdate(TUMBLING.key, T - 2 * W, "web", 1),
            LateUpdate(HOPPING.key, T - 40 * S, "api", 2),
        ],
        "dead": [
            letter(0, 10, T + 5, batch_id=batch_id, raw=b"\xff\xfe binary \x00"),
            letter(1, 11, T + 3, "empty", batch_id=batch_id, raw=b""),
            letter(2, 12, T + 4, batch_id=batch_id),
        ],
        "dead_counts": {"invalid_json": 2, "empty": 1},
    }


def _write(r: redis.Redis, b: dict[str, Any], dead_letter_max: int = 100_000) -> None:
    write_batch(
        r,
        KEYS,
        SinkBatch(b["batch_id"], b["windows"], b["dead"], b["dead_counts"], late=b["late"]),
        SinkConfig(dead_letter_max=dead_letter_max),
    )


def test_replaying_a_batch_changes_nothing(redis_client: redis.Redis) -> None:
    _write(redis_client, _full_batch(7))
    first = snapshot(redis_client)
    assert first, "the batch wrote something"
    _write(redis_client, _full_batch(7))
    assert snapshot(redis_client) == first
    # byte-for-byte as well, as the module docstring promises
    dumps = {k: redis_client.dump(k) for k in first}
    _write(redis_client, _full_batch(7))
    assert {k: redis_client.dump(k) for k in first} == dumps


def test_replaying_the_last_batch_after_earlier_batches_changes_nothing(
    redis_client: redis.Redis,
) -> None:
    _write(redis_client, _full_batch(1))
    b2 = {
        "batch_id": 2,
        "windows": [
            update(TUMBLING, T, "api", agg_of(80, 6)),
            update(TUMBLING, T + 2 * W, "db", agg_of(1, 7)),
            update(HOPPING, T, "web", agg_of(30, 8)),
        ],
        "late": [LateUpdate(TUMBLING.key, T - W, "api", 2)],
        "dead": [letter(0, 20, T + 9, batch_id=2)],
        "dead_counts": {"invalid_json": 3, "empty": 1},
    }
    _write(redis_client, b2)
    after_b2 = snapshot(redis_client)
    dumps = {k: redis_client.dump(k) for k in after_b2}
    _write(redis_client, b2)
    assert snapshot(redis_client) == after_b2
    assert {k: redis_client.dump(k) for k in after_b2} == dumps


def test_empty_batch_writes_nothing(redis_client: redis.Redis) -> None:
    write_batch(redis_client, KEYS, SinkBatch(0, []))
    assert redis_client.dbsize() == 0


# --- write_batch: the `*` rows ------------------------------------------------------------------


def test_star_merges_every_stored_service(redis_client: redis.Redis) -> None:
    # api and web share half their users; db has users of its own and much slower latencies
    api1, web = agg_of(300, 1, range(0, 200)), agg_of(200, 2, range(100, 300))
    write_batch(
        redis_client,
        KEYS,
        SinkBatch(1, [update(TUMBLING, T, "api", api1), update(TUMBLING, T, "web", web)]),
    )
    assert window_counts(redis_client, TUMBLING, T) == {"api": 300, "web": 200, "*": 500}

    # batch 2 only updates api (absolute): web's aggregate from batch 1 still counts in `*`
    api2 = agg_of(400, 3, range(0, 200))
    write_batch(redis_client, KEYS, SinkBatch(2, [update(TUMBLING, T, "api", api2)]))
    assert window_counts(redis_client, TUMBLING, T) == {"api": 400, "web": 200, "*": 600}
    assert stored_aggs(redis_client, TUMBLING, T)["*"] == WindowAgg.merged([api2, web])

    # batch 3 adds a new service to the window, and opens another window
    db, db_next = agg_of(100, 4, range(1000, 1050), scale=400.0), agg_of(5, 5)
    batch3 = [update(TUMBLING, T, "db", db), update(TUMBLING, T + W, "db", db_next)]
    write_batch(redis_client, KEYS, SinkBatch(3, batch3))
    assert window_counts(redis_client, TUMBLING, T) == {"api": 400, "web": 200, "db": 100, "*": 700}
    assert window_counts(redis_client, TUMBLING, T + W) == {"db": 5, "*": 5}

    total = WindowAgg.merged([api2, db, web])  # the sink merges in service order
    aggs = stored_aggs(redis_client, TUMBLING, T)
    assert aggs == {"api": api2, "web": web, "db": db, "*": total}
    docs = stored_docs(redis_client, TUMBLING, T)
    # each service's figures are those of the aggregate the job sent last, `*`'s of the merge
    assert docs["api"] == api2.metrics(W)
    assert docs["web"] == web.metrics(W)
    assert docs["*"] == total.metrics(W)
    star = docs["*"]
    # counts are exact sums
    assert (star["count"], star["errors"], star["latency_count"]) == (
        api2.count + web.count + db.count,
        api2.errors + web.errors + db.errors,
        api2.latency.count + web.latency.count + db.latency.count,
    )
    assert star["events_per_s"] == 70.0
    # distinct users of the union (api and web share users 100..199), not the sum
    union = distinct(
        (400, 3, range(0, 200)), (200, 2, range(100, 300)), (100, 4, range(1000, 1050))
    )
    assert star["distinct_users"] == pytest.approx(union, rel=0.02)
    per_service = sum(docs[s]["distinct_users"] for s in ("api", "web", "db"))
    assert per_service - union > 40  # the services share users: a sum would count them twice
    # percentiles of the merged digest: not an average of the services' percentiles
    merged_digest = api2.latency.copy()
    merged_digest.merge(db.latency, web.latency)
    for name, q in PERCENTILES.items():
        assert star[name] == pytest.approx(float(merged_digest.quantile(q)), rel=1e-9), name
    assert star["p50"] != pytest.approx(np.mean([docs[s]["p50"] for s in ("api", "web", "db")]))

    # replaying batch 3 keeps every byte, `*` included
    before = snapshot(redis_client)
    write_batch(redis_client, KEYS, SinkBatch(3, batch3))
    assert snapshot(redis_client) == before
    assert read_services(redis_client, KEYS) == ["api", "db", "web"]
    assert read_window_specs(redis_client, KEYS) == [TUMBLING]


def test_star_is_per_window_spec(redis_client: redis.Redis) -> None:
    a10, a30, a60 = agg_of(3, 1), agg_of(9, 2), agg_of(30, 3)
    write_batch(
        redis_client,
        KEYS,
        SinkBatch(
            1,
            [
                update(TUMBLING, T, "api", a10),
                update(HOPPING, T, "api", a30),
                update(MINUTE, T, "api", a60),
            ],
        ),
    )
    assert window_counts(redis_client, TUMBLING, T) == {"api": 3, "*": 3}
    assert window_counts(redis_client, HOPPING, T) == {"api": 9, "*": 9}
    assert window_counts(redis_client, MINUTE, T) == {"api": 30, "*": 30}
    # `*` metrics use the spec's own size: 9 events in 30 s
    assert stored_docs(redis_client, HOPPING, T)["*"]["events_per_s"] == 0.3
    # tumbling first (by size), then hopping
    assert read_window_specs(redis_client, KEYS) == [TUMBLING, MINUTE, HOPPING]


@pytest.mark.parametrize("where", ["windows", "late"])
def test_write_batch_refuses_star(redis_client: redis.Redis, where: str) -> None:
    star: dict[str, list[Any]] = {
        "windows": [update(TUMBLING, T, "*", agg_of(5, 1))],
        "late": [LateUpdate(TUMBLING.key, T, "*", 5)],
    }
    args: dict[str, list[Any]] = {"windows": [update(TUMBLING, T, "api", agg_of(1, 2))], "late": []}
    args[where] = args[where] + star[where]
    with pytest.raises(ValueError, match=r"'\*' is computed by the sink"):
        write_batch(redis_client, KEYS, SinkBatch(1, args["windows"], late=args["late"]))
    assert redis_client.dbsize() == 0  # refused before anything was written


# --- late counts ------------------------------------------------------------------------------


def _late(r: redis.Redis, start: int, spec: WindowSpec = TUMBLING) -> dict[str, int]:
    return {
        row.service: row.late for row in read_windows(r, KEYS, spec) if row.window_start == start
    }


def test_late_counts_replay_safe_but_add_across_batches(redis_client: redis.Redis) -> None:
    tk = TUMBLING.key
    b5 = [update(TUMBLING, T + W, "api", agg_of(1, 1))]
    write_batch(redis_client, KEYS, SinkBatch(5, b5, late=[LateUpdate(tk, T, "api", 2)]))
    assert _late(redis_client, T) == {"api": 2, "*": 2}
    # replay of batch 5: still 2
    write_batch(redis_client, KEYS, SinkBatch(5, b5, late=[LateUpdate(tk, T, "api", 2)]))
    assert _late(redis_client, T) == {"api": 2, "*": 2}
    # batch 6: 3 more late api rows and 1 late web row in the same window add up
    b6 = [LateUpdate(tk, T, "api", 3), LateUpdate(tk, T, "web", 1)]
    write_batch(redis_client, KEYS, SinkBatch(6, [], late=b6))
    assert _late(redis_client, T) == {"api": 5, "web": 1, "*": 6}
    # replay of batch 6
    write_batch(redis_client, KEYS, SinkBatch(6, [], late=b6))
    assert _late(redis_client, T) == {"api": 5, "web": 1, "*": 6}
    # the window only has late rows: it is listed with count 0
    rows = [r for r in read_windows(redis_client, KEYS, TUMBLING) if r.window_start == T]
    assert {(r.service, r.count, r.late) for r in rows} == {
        ("*", 0, 6),
        ("api", 0, 5),
        ("web", 0, 1),
    }
    # the window with accepted rows has no late rows
    assert _late(redis_client, T + W) == {"api": 0, "*": 0}


def test_a_batch_stores_stars_late_rows_as_one_field_and_readers_of_older_stores_agree(
    redis_client: redis.Redis,
) -> None:
    """Each batch writes `*`'s late rows of a window as one "*|batch" field, the merge of its
    services' (count and both lateness digests); `*`'s lateness reads it instead of every
    service's field, and a batch of a store written before (no `*` field) counts by its
    services' fields: the same counts and digest weights either way."""
    from tidegauge.core.late_agg import LateAgg
    from tidegauge.core.store import read_lateness

    tk = TUMBLING.key

    def late(service: str, lateness: list[float]) -> LateUpdate:
        agg = LateAgg()
        agg.add(np.array(lateness), 5_000.0)
        return LateUpdate(tk, T, service, agg.count, agg.to_bytes())

    b5 = [late("web", [40_000.0]), late("api", [31_000.0, 35_000.0])]
    write_batch(
        redis_client, KEYS, SinkBatch(5, [update(TUMBLING, T + W, "api", agg_of(1, 1))], late=b5)
    )
    fields = redis_client.hgetall(KEYS.window_late(tk, T))
    assert sorted(fields) == [b"*|5", b"api|5", b"web|5"]
    star = LateAgg.from_bytes(fields[b"*|5"])
    assert star.count == 3 and star.lateness.count == 3 and star.lateness.max == 40_000.0
    # batch 6 as a store written before wrote it: no `*` field
    write_batch(redis_client, KEYS, SinkBatch(6, [], late=[late("api", [50_000.0])]))
    redis_client.hdel(KEYS.window_late(tk, T), "*|6")
    got = read_lateness(redis_client, KEYS, T, T + 2 * W, "*")
    assert (got.late, got.lateness.max) == (4, 50_000.0)
    # each late event weighs once in the digests (the accepted event's agg holds none)
    assert got.lateness.count == got.overdue.count == 4 and got.events == 5
    assert [read_lateness(redis_client, KEYS, T, T + 2 * W, s).late for s in ("api", "web")] == [
        3,
        1,
    ]
    assert _late(redis_client, T) == {"api": 3, "web": 1, "*": 4}


def test_duplicates_replay_safe_but_add_across_batches(redis_client: redis.Redis) -> None:
    tk = TUMBLING.key
    win = [update(TUMBLING, T, "api", agg_of(3, 0)), update(TUMBLING, T, "web", agg_of(1, 0))]
    b5 = [WindowCount(tk, T, "api", 2)]
    write_batch(redis_client, KEYS, SinkBatch(5, win, duplicates=b5))
    write_batch(redis_client, KEYS, SinkBatch(5, win, duplicates=b5))  # a replay of batch 5
    b6 = [WindowCount(tk, T, "api", 1), WindowCount(tk, T, "web", 4)]
    write_batch(redis_client, KEYS, SinkBatch(6, [], duplicates=b6))
    rows = {r.service: r for r in read_windows(redis_client, KEYS, TUMBLING)}
    assert {s: (r.count, r.duplicates) for s, r in rows.items()} == {
        "api": (3, 3),
        "web": (1, 4),
        "*": (4, 7),
    }


def test_arrivals_are_one_field_per_batch_replay_safe_and_old_fields_still_count(
    redis_client: redis.Redis,
) -> None:
    r = redis_client

    def arrivals(*rows: tuple[str, int, int, int]) -> list[ArrivalUpdate]:
        return [
            ArrivalUpdate("broker", T, svc, n, {"late": late, "stragglers": st, "proc_ms": T})
            for svc, n, late, st in rows
        ]

    config = SinkConfig(arrival_window_ms=W)
    b7 = arrivals(("api", 5, 1, 0), ("web", 3, 0, 2), ("db", 1, 0, 0))
    write_batch(r, KEYS, SinkBatch(7, arrivals=b7), config)
    write_batch(r, KEYS, SinkBatch(7, arrivals=b7), config)  # a replay of batch 7
    write_batch(r, KEYS, SinkBatch(8, arrivals=arrivals(("api", 2, 0, 1))), config)
    key = KEYS.arrivals("broker", W, T)
    assert sorted(r.hkeys(key)) == [b"7", b"8"]  # a field per batch, every service in it
    # a field as stores written before hold it: one per (service, batch)
    old = {"events": 4, "late": 2, "proc_ms": T, "stragglers": 0}
    r.hset(key, "web|6", json.dumps(old))
    got = {a.service: (a.events, a.late, a.stragglers) for a in read_arrivals(r, KEYS, "broker")}
    assert got == {
        "api": (7, 1, 1),
        "db": (1, 0, 0),
        "web": (7, 2, 2),
        "*": (15, 3, 3),
    }
    # the totals alone (what the page draws) are read from each field's head: the same sums
    totals = read_arrivals(r, KEYS, "broker", service=ALL_SERVICES)
    assert [(a.service, a.events, a.late, a.stragglers) for a in totals] == [("*", 15, 3, 3)]
    assert arrival_totals(b"7", b'{"*":[9,1,2],"api":[9,1,2]}') == [9, 1, 2]
    assert arrival_totals(b"7", b'{"api":[9,1,2],"*":[9,1,2]}') == [9, 1, 2]  # (not first)
    assert arrival_totals(b"web|6", json.dumps(old).encode()) == [4, 2, 0]


def test_late_counts_are_per_spec(redis_client: redis.Redis) -> None:
    # one late row of the job is late for a tumbling and a hopping window at once
    late = [LateUpdate(TUMBLING.key, T, "api", 1), LateUpdate(HOPPING.key, T - 20 * S, "api", 1)]
    write_batch(
        redis_client, KEYS, SinkBatch(1, [update(HOPPING, T, "api", agg_of(4, 1))], late=late)
    )
    write_batch(
        redis_client, KEYS, SinkBatch(1, [update(HOPPING, T, "api", agg_of(4, 1))], late=late)
    )
    assert _late(redis_client, T) == {"api": 1, "*": 1}
    assert _late(redis_client, T - 20 * S, HOPPING) == {"api": 1, "*": 1}
    assert _late(redis_client, T, HOPPING) == {"api": 0, "*": 0}
    # a spec known only from late rows is still listed
    assert read_window_specs(redis_client, KEYS) == [TUMBLING, HOPPING]


# --- dead letters ---------------------------------------------------------------------------


def test_dead_letters_capped_newest_kept_counts_exact(redis_client: redis.Redis) -> None:
    b1 = [letter(0, i, T + 100 + i, batch_id=1) for i in range(4)]  # ts T+100..T+103
    write_batch(
        redis_client, KEYS, SinkBatch(1, [], b1, {"invalid_json": 4}), SinkConfig(dead_letter_max=5)
    )
    assert len(read_dead_letters(redis_client, KEYS)) == 4
    # batch 2: some newer, some older than what is stored, given out of order
    b2 = [
        letter(1, 0, T + 50, "empty", batch_id=2),
        letter(1, 1, T + 201, batch_id=2),
        letter(1, 2, T + 99, "empty", batch_id=2),
        letter(1, 3, T + 200, batch_id=2),
    ]
    counts = {"invalid_json": 6, "empty": 2}
    write_batch(redis_client, KEYS, SinkBatch(2, [], b2, counts), SinkConfig(dead_letter_max=5))
    kept = read_dead_letters(redis_client, KEYS)
    assert [d.kafka_timestamp - T for d in kept] == [201, 200, 103, 102, 101]  # newest first
    assert [d.ref for d in kept] == ["1:1", "1:3", "0:3", "0:2", "0:1"]
    assert kept[0] == b2[1]  # round trip of every field
    assert [d.ref for d in read_dead_letters(redis_client, KEYS, limit=2)] == ["1:1", "1:3"]
    # counts stay exact although 3 letters were trimmed
    assert read_dead_counts(redis_client, KEYS) == counts
    # a replay of batch 2 changes nothing
    before = snapshot(redis_client)
    write_batch(redis_client, KEYS, SinkBatch(2, [], b2, counts), SinkConfig(dead_letter_max=5))
    assert snapshot(redis_client) == before


def test_dead_letter_raw_bytes_survive(redis_client: redis.Redis) -> None:
    raw = bytes(range(256))
    d = letter(3, 99, T, raw=raw)
    write_batch(redis_client, KEYS, SinkBatch(1, [], [d], {"invalid_utf8": 1}))
    (back,) = read_dead_letters(redis_client, KEYS)
    assert back == d and back.raw == raw


# --- write_progress ---------------------------------------------------------------------------


def summary(batch_id: int, **extra: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "batch_id": batch_id,
        "batch_time": T + batch_id * S,
        "status_time": T + batch_id * S + 5,
        "watermark": T - 30 * S + batch_id,
        "input_rows": 100 + batch_id,
        "offsets": {"0": 10 * (batch_id + 1), "1": 5 * (batch_id + 1)},
        "start_offsets": {"0": 10 * batch_id, "1": 5 * batch_id},
        "latest_offsets": {"0": 1_000, "1": 500},
        "batch_duration_ms": 40 + batch_id,
        "query_id": "q-1",
    }
    s.update(extra)
    return s


def test_status_never_moves_backwards(redis_client: redis.Redis) -> None:
    write_progress(redis_client, KEYS, summary(5))
    write_progress(redis_client, KEYS, summary(3))  # a late event for an older batch
    status = read_status(redis_client, KEYS)
    assert status is not None
    assert status.batch_id == 5
    assert status.batch_time == T + 5 * S
    assert status.input_rows == 105
    assert status.offsets == {"0": 60, "1": 30}
    assert status.latest_offsets == {"0": 1_000, "1": 500}
    assert status.watermark == T - 30 * S + 5
    assert status.status_time == T + 5 * S + 5
    # the older batch is still in the history
    assert [b["batch_id"] for b in read_batches(redis_client, KEYS)] == [3, 5]
    # the same batch id again (e.g. an idle progress) may refresh the status
    write_progress(redis_client, KEYS, summary(5, status_time=T + 99 * S, input_rows=0))
    status = read_status(redis_client, KEYS)
    assert status is not None
    assert (status.batch_id, status.status_time, status.input_rows) == (5, T + 99 * S, 0)
    write_progress(redis_client, KEYS, summary(6))
    status = read_status(redis_client, KEYS)
    assert status is not None and status.batch_id == 6


def test_a_new_query_takes_over_the_status_and_history(redis_client: redis.Redis) -> None:
    """A job started with a fresh checkpoint against a store of an older run: its batch ids
    start again at 0, and its status must not stay frozen behind the old run's batch 40."""
    for b in range(38, 41):
        write_progress(redis_client, KEYS, summary(b))
    write_progress(redis_client, KEYS, summary(0, query_id="q-2", input_rows=7))
    status = read_status(redis_client, KEYS)
    assert status is not None and (status.batch_id, status.input_rows) == (0, 7)
    assert [(b["batch_id"], b["query_id"]) for b in read_batches(redis_client, KEYS)] == [
        (0, "q-2")
    ]
    write_progress(redis_client, KEYS, summary(1, query_id="q-2"))
    status = read_status(redis_client, KEYS)
    assert status is not None and status.batch_id == 1
    assert [b["batch_id"] for b in read_batches(redis_client, KEYS)] == [0, 1]


def test_history_keeps_one_entry_per_batch(redis_client: redis.Redis) -> None:
    for b in (0, 1, 2, 1, 2, 2):
        write_progress(redis_client, KEYS, summary(b, status_time=T + b * S + 7))
    write_progress(redis_client, KEYS, summary(1, input_rows=999))
    history = read_batches(redis_client, KEYS)
    assert [h["batch_id"] for h in history] == [0, 1, 2]
    assert history[1]["input_rows"] == 999  # the last write of a batch wins
    assert history[2]["start_offsets"] == {"0": 20, "1": 10}
    assert [h["batch_id"] for h in read_batches(redis_client, KEYS, limit=2)] == [1, 2]


def test_history_is_trimmed_to_the_newest_batches(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status_writes, "BATCH_HISTORY", 3)
    for b in (4, 0, 1, 2, 3, 5):
        write_progress(redis_client, KEYS, summary(b))
    assert [h["batch_id"] for h in read_batches(redis_client, KEYS)] == [3, 4, 5]


# --- read_windows filters -------------------------------------------------------------------

#: The seeded windows: (spec, start) -> service -> WindowAgg (event counts in the table below).
SEEDED: dict[tuple[WindowSpec, int], dict[str, WindowAgg]] = {
    (TUMBLING, T): {"api": agg_of(1, 11), "web": agg_of(2, 12)},
    (TUMBLING, T + W): {"api": agg_of(4, 13)},
    (TUMBLING, T + 2 * W): {"web": agg_of(5, 14)},
    (TUMBLING, T + 3 * W): {"api": agg_of(6, 15), "web": agg_of(7, 16)},
    (MINUTE, T): {"api": agg_of(11, 17), "web": agg_of(7, 18)},
    (HOPPING, T - 10 * S): {"api": agg_of(5, 19)},
    (HOPPING, T): {"api": agg_of(5, 20), "web": agg_of(7, 21)},
}
#: Late rows: (spec, start) -> service -> count.
SEEDED_LATE: dict[tuple[WindowSpec, int], dict[str, int]] = {
    (TUMBLING, T + W): {"api": 1},
    (TUMBLING, T + 4 * W): {"web": 2},
    (HOPPING, T - 20 * S): {"web": 3},
}


@pytest.fixture
def seeded(redis_client: redis.Redis) -> redis.Redis:
    """10 s windows at T..T+30s (api, web), a late-only window at T+40s, 60 s and 30 s/10 s ones.

        10 s   start  api web  *   late
               T       1   2   3
               T+10    4   -   4   api 1
               T+20    -   5   5
               T+30    6   7  13
               T+40    -   -   -   web 2
        60 s   T      11   7  18
        30/10  T-20    -   -   -   web 3
               T-10    5   -   5
               T       5   7  12

    Written in two batches, the second touching windows of the first (absolute updates).
    """
    items = [
        (spec, start, svc, agg) for (spec, start), d in SEEDED.items() for svc, agg in d.items()
    ]
    late = [
        LateUpdate(spec.key, start, svc, n)
        for (spec, start), d in SEEDED_LATE.items()
        for svc, n in d.items()
    ]
    first = [update(spec, start, svc, agg) for spec, start, svc, agg in items if start < T + 3 * W]
    second = [
        update(spec, start, svc, agg) for spec, start, svc, agg in items if start >= T + 3 * W
    ]
    write_batch(redis_client, KEYS, SinkBatch(1, first))
    write_batch(redis_client, KEYS, SinkBatch(2, second + first[:2], late=late))
    return redis_client


def row(spec: WindowSpec, start: int, service: str, late: int = 0) -> WindowRow:
    """The row read_windows should return, from the aggregates that were written."""
    aggs = SEEDED.get((spec, start), {})
    agg = WindowAgg.merged(aggs.values()) if service == "*" else aggs.get(service)
    m = agg.metrics(spec.size_ms) if agg is not None and aggs else {}
    return WindowRow(
        window_start=start,
        window_end=start + spec.size_ms,
        service=service,
        count=m.get("count", 0),
        events_per_s=m.get("count", 0) * 1000.0 / spec.size_ms,
        late=late,
        spec=spec.key,
        kind=spec.kind,
        **{k: v for k, v in m.items() if k not in ("count", "events_per_s")},
    )


ALL_ROWS = [
    row(TUMBLING, T, "*"),
    row(TUMBLING, T, "api"),
    row(TUMBLING, T, "web"),
    row(TUMBLING, T + W, "*", 1),
    row(TUMBLING, T + W, "api", 1),
    row(TUMBLING, T + 2 * W, "*"),
    row(TUMBLING, T + 2 * W, "web"),
    row(TUMBLING, T + 3 * W, "*"),
    row(TUMBLING, T + 3 * W, "api"),
    row(TUMBLING, T + 3 * W, "web"),
    row(TUMBLING, T + 4 * W, "*", 2),
    row(TUMBLING, T + 4 * W, "web", 2),
]
HOPPING_ROWS = [
    row(HOPPING, T - 20 * S, "*", 3),
    row(HOPPING, T - 20 * S, "web", 3),
    row(HOPPING, T - 10 * S, "*"),
    row(HOPPING, T - 10 * S, "api"),
    row(HOPPING, T, "*"),
    row(HOPPING, T, "api"),
    row(HOPPING, T, "web"),
]


def test_seeded_rows_carry_every_metric() -> None:
    r = ALL_ROWS[0]
    assert (r.count, r.spec, r.kind, r.events_per_s) == (3, "10000", "tumbling", 0.3)
    assert r.p99 is not None and r.latency_count > 0 and r.distinct_users > 0
    assert HOPPING_ROWS[-1].kind == "hopping" and HOPPING_ROWS[-1].window_end == T + 30 * S


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({}, ALL_ROWS, id="everything-smallest-tumbling-by-default"),
        pytest.param({"spec": TUMBLING}, ALL_ROWS, id="explicit-spec"),
        pytest.param(
            {"spec": MINUTE},
            [row(MINUTE, T, "*"), row(MINUTE, T, "api"), row(MINUTE, T, "web")],
            id="other-size",
        ),
        pytest.param({"spec": HOPPING}, HOPPING_ROWS, id="hopping"),
        # hopping windows overlap: since/until still select by each window's own end and start
        pytest.param({"spec": HOPPING, "since_ms": T + 20 * S}, HOPPING_ROWS[4:], id="hop-since"),
        pytest.param({"spec": HOPPING, "until_ms": T - 10 * S}, HOPPING_ROWS[:2], id="hop-until"),
        pytest.param(
            {"spec": HOPPING, "service": "*", "since_ms": T + 10 * S - 1},
            [HOPPING_ROWS[0], HOPPING_ROWS[2], HOPPING_ROWS[4]],
            id="hop-star-since",
        ),
        # since: windows that END after since_ms
        pytest.param({"since_ms": T + W}, ALL_ROWS[3:], id="since-at-a-window-end"),
        pytest.param({"since_ms": T + W - 1}, ALL_ROWS, id="since-1ms-before-an-end"),
        pytest.param({"since_ms": T + 15 * S}, ALL_ROWS[3:], id="since-mid-window"),
        pytest.param({"since_ms": T + 5 * W}, [], id="since-after-everything"),
        # until: windows that START before until_ms
        pytest.param({"until_ms": T + 2 * W}, ALL_ROWS[:5], id="until-at-a-window-start"),
        pytest.param({"until_ms": T + 2 * W + 1}, ALL_ROWS[:7], id="until-1ms-after-a-start"),
        pytest.param({"until_ms": T}, [], id="until-first-start"),
        pytest.param(
            {"since_ms": T + 15 * S, "until_ms": T + 25 * S}, ALL_ROWS[3:7], id="since-and-until"
        ),
        pytest.param(
            {"service": "*"},
            [r for r in ALL_ROWS if r.service == "*"],
            id="totals",
        ),
        pytest.param(
            {"service": "web", "since_ms": T + 25 * S},
            [row(TUMBLING, T + 2 * W, "web"), row(TUMBLING, T + 3 * W, "web"), ALL_ROWS[-1]],
            id="service-and-since",
        ),
        pytest.param({"service": "nope"}, [], id="unknown-service"),
        pytest.param({"spec": WindowSpec.tumbling(5 * S)}, [], id="unknown-size"),
        pytest.param({"spec": WindowSpec(60 * S, 10 * S)}, [], id="unknown-slide"),
    ],
)
def test_read_windows_filters(
    seeded: redis.Redis, kwargs: dict[str, Any], expected: list[WindowRow]
) -> None:
    assert read_windows(seeded, KEYS, **kwargs) == expected


def test_read_window_specs_of_the_seeded_store(seeded: redis.Redis) -> None:
    assert read_window_specs(seeded, KEYS) == [TUMBLING, MINUTE, HOPPING]


def test_read_windows_on_an_empty_store(redis_client: redis.Redis) -> None:
    assert read_windows(redis_client, KEYS) == []
    assert read_window_specs(redis_client, KEYS) == []
    assert read_status(redis_client, KEYS) is None
    assert read_batches(redis_client, KEYS) == []
    assert read_dead_counts(redis_client, KEYS) == {}


def test_prefixes_are_separate(redis_client: redis.Redis) -> None:
    other = Keys("other")
    agg = agg_of(3, 1)
    write_batch(redis_client, other, SinkBatch(1, [update(TUMBLING, T, "api", agg)]))
    assert read_windows(redis_client, KEYS) == []
    rows = read_windows(redis_client, other)
    assert [(r.service, r.count) for r in rows] == [("*", 3), ("api", 3)]
    assert rows[0].p50 == rows[1].p50 == agg.metrics(W)["p50"]


# --- read_range -----------------------------------------------------------------------------


def _merged(spec: WindowSpec, starts: list[int], service: str) -> WindowAgg:
    parts = []
    for s in starts:
        aggs = SEEDED.get((spec, s), {})
        if service == "*" and aggs:
            parts.append(WindowAgg.merged(aggs.values()))
        elif service in aggs:
            parts.append(aggs[service])
    return WindowAgg.merged(parts)


@pytest.mark.parametrize(
    ("since", "until", "service", "inside", "covered"),
    [
        #   T         T+10s     T+20s     T+30s     T+40s     T+50s
        #   [ api web )[ api    )[   web  )[ api web )[ late    )
        pytest.param(T, T + 4 * W, "*", [0, 1, 2, 3], (T, T + 4 * W), id="all-star"),
        pytest.param(T - W, T + 6 * W, "*", [0, 1, 2, 3], (T, T + 4 * W), id="wider-than-data"),
        pytest.param(T, T + 4 * W, "api", [0, 1, 2, 3], (T, T + 4 * W), id="one-service"),
        pytest.param(T, T + 4 * W, "web", [0, 1, 2, 3], (T, T + 4 * W), id="other-service"),
        # windows only partly inside the range are left out, at either end
        pytest.param(T + 5 * S, T + 4 * W, "*", [1, 2, 3], (T + W, T + 4 * W), id="cut-start"),
        pytest.param(T, T + 35 * S, "*", [0, 1, 2], (T, T + 3 * W), id="cut-end"),
        pytest.param(T + 1, T + 4 * W - 1, "*", [1, 2], (T + W, T + 3 * W), id="cut-both"),
        pytest.param(T + W, T + 2 * W, "api", [1], (T + W, T + 2 * W), id="exactly-one"),
    ],
)
def test_read_range_merges_the_windows_inside(
    seeded: redis.Redis,
    since: int,
    until: int,
    service: str,
    inside: list[int],
    covered: tuple[int, int],
) -> None:
    starts = [T + i * W for i in inside]
    got = read_range(seeded, KEYS, since, until, service=service)
    expected = _merged(TUMBLING, starts, service)
    with_service = [s for s in starts if service == "*" or service in SEEDED[(TUMBLING, s)]]
    duration = covered[1] - covered[0]
    assert got == RangeResult(
        service, since, until, covered[0], covered[1], len(with_service), expected.metrics(duration)
    )
    assert got.metrics["count"] == sum(
        a.count for s in starts for svc, a in SEEDED[(TUMBLING, s)].items() if service in ("*", svc)
    )


def test_read_range_distinct_users_and_percentiles_merge(redis_client: redis.Redis) -> None:
    # the same 100 users in every window; latencies get slower window by window
    aggs = [agg_of(500, 40 + i, range(100), scale=10.0 * (i + 1)) for i in range(6)]
    write_batch(
        redis_client,
        KEYS,
        SinkBatch(1, [update(TUMBLING, T + i * W, "api", a) for i, a in enumerate(aggs)]),
    )
    got = read_range(redis_client, KEYS, T, T + 6 * W)
    assert got.metrics["count"] == 3000
    assert got.metrics["events_per_s"] == 50.0
    union = distinct(*((500, 40 + i, range(100)) for i in range(6)))
    assert got.metrics["distinct_users"] == pytest.approx(union, abs=1)  # not 6 times as many
    merged = WindowAgg.merged(aggs)
    assert got.metrics == merged.metrics(6 * W)
    window_p99s = [a.metrics(W)["p99"] for a in aggs]
    assert min(window_p99s) < got.metrics["p99"] < max(window_p99s)


def test_read_range_with_another_spec(seeded: redis.Redis) -> None:
    got = read_range(seeded, KEYS, T - 10 * S, T + 30 * S, spec=HOPPING)
    # [T-10s, T+20s) and [T, T+30s) are inside; [T-20s, T+10s) starts before the range
    expected = _merged(HOPPING, [T - 10 * S, T], "*")
    assert got == RangeResult(
        "*", T - 10 * S, T + 30 * S, T - 10 * S, T + 30 * S, 2, expected.metrics(40 * S)
    )
    minute = read_range(seeded, KEYS, T, T + 60 * S, "web", spec=MINUTE)
    assert minute.metrics == SEEDED[(MINUTE, T)]["web"].metrics(60 * S)


@pytest.mark.parametrize(
    ("since", "until", "service"),
    [
        pytest.param(T + 5 * S, T + 15 * S, "*", id="shorter-than-a-window"),
        pytest.param(T + 4 * W, T + 5 * W, "*", id="late-rows-only"),
        pytest.param(T + 10 * W, T + 11 * W, "*", id="after-everything"),
        pytest.param(T, T + 4 * W, "nope", id="unknown-service"),
    ],
)
def test_read_range_with_nothing_inside(
    seeded: redis.Redis, since: int, until: int, service: str
) -> None:
    got = read_range(seeded, KEYS, since, until, service=service)
    assert got.windows == 0
    assert got.metrics == WindowAgg().metrics(until - since)
    if service == "*":
        assert (got.covered_from, got.covered_to) == (None, None)


def test_read_range_on_an_empty_store_and_bad_ranges(redis_client: redis.Redis) -> None:
    got = read_range(redis_client, KEYS, T, T + W)
    assert got == RangeResult("*", T, T + W, None, None, 0, WindowAgg().metrics(W))
    for until in (T, T - 1):
        with pytest.raises(ValueError, match="end after it starts"):
            read_range(redis_client, KEYS, T, until)


def test_range_result_to_dict_flattens_the_metrics(seeded: redis.Redis) -> None:
    got = read_range(seeded, KEYS, T, T + 2 * W, service="api")
    d = got.to_dict()
    assert "metrics" not in d
    assert d == {
        "service": "api",
        "range_from": T,
        "range_to": T + 2 * W,
        "covered_from": T,
        "covered_to": T + 2 * W,
        "windows": 2,
        "pieces": {"10000": 2},
        "resolution": "2 × 10s",
        **got.metrics,
    }
    assert set(got.metrics) <= set(d)
    json.dumps(d, allow_nan=False)  # ready for `tidegauge query --json`


def test_star_is_the_merge_of_the_shards_stars_once_every_shard_has_one(
    redis_client: redis.Redis,
) -> None:
    """Each state shard sends its own `*`: with a part of every shard stored, the window's `*`
    is their merge; until then it is the merge of every service stored, as without parts."""
    r = redis_client
    cfg = SinkConfig(shards=2)
    a, b = agg_of(40, 1, range(30)), agg_of(60, 2, range(20, 70))

    def star(agg: WindowAgg, shard: int) -> WindowUpdate:
        return dataclasses.replace(update(TUMBLING, T, ALL_SERVICES, agg), shard=shard)

    # shard 1 has no part yet: `*` is merged from the services stored, and shard 0's part kept
    write_batch(r, KEYS, SinkBatch(1, [update(TUMBLING, T, "a", a), star(a, 0)]), cfg)
    write_batch(r, KEYS, SinkBatch(2, [update(TUMBLING, T, "b", b), star(a, 0)]), cfg)
    services = WindowAgg.merged([a, b])
    assert stored_aggs(r, TUMBLING, T)["*"].to_bytes() == services.to_bytes()
    assert set(r.hkeys(KEYS.window_parts(TUMBLING.key, T))) == {b"*|0"}
    # shard 1's part arrives: `*` is the merge of the two parts (the same counts and users)
    write_batch(r, KEYS, SinkBatch(3, [update(TUMBLING, T, "b", b), star(b, 1)]), cfg)
    got = stored_aggs(r, TUMBLING, T)["*"]
    assert got.to_bytes() == WindowAgg.merged([a, b]).to_bytes()
    assert window_counts(r, TUMBLING, T) == {"a": 40, "b": 60, "*": 100}
    assert stored_docs(r, TUMBLING, T)["*"]["distinct_users"] == distinct(
        (40, 1, range(30)), (60, 2, range(20, 70))
    )
    assert ALL_SERVICES.encode() not in r.smembers(KEYS.services)
    # a later batch touching one shard: its new part and the other's stored one
    b_later = WindowAgg.merged([b, agg_of(5, 9)])
    batch4 = [update(TUMBLING, T, "b", b_later), star(b_later, 1)]
    write_batch(r, KEYS, SinkBatch(4, batch4), cfg)
    before = snapshot(r)
    write_batch(r, KEYS, SinkBatch(4, batch4), cfg)  # a replay
    assert snapshot(r) == before
    assert window_counts(r, TUMBLING, T)["*"] == 105
    # a whole `*` is never sent
    with pytest.raises(ValueError, match="'\\*' is computed by the sink"):
        write_batch(r, KEYS, SinkBatch(5, [update(TUMBLING, T, ALL_SERVICES, a)]), cfg)


def test_a_closed_windows_parts_are_deleted_and_its_rows_stay(redis_client: redis.Redis) -> None:
    """Parts are only read to merge the next part of their window: once the watermark has
    passed the window's end none can come, so the sink deletes them; the window's `*` and
    `(other)` rows, and the parts of windows still open, stay as they were."""
    r = redis_client
    cfg = SinkConfig(shards=2)
    a, b = agg_of(40, 1, range(30)), agg_of(60, 2, range(20, 70))

    def part(service: str, start: int, agg: WindowAgg, shard: int) -> WindowUpdate:
        return dataclasses.replace(update(TUMBLING, start, service, agg), shard=shard)

    def rows(start: int) -> list[WindowUpdate]:
        return [
            update(TUMBLING, start, "a", a),
            part(ALL_SERVICES, start, a, 0),
            part(ALL_SERVICES, start, b, 1),
            part(OVERFLOW_SERVICE, start, b, 0),
            part(OVERFLOW_SERVICE, start, a, 1),
        ]

    at = BatchTime(1, T - 1, T)  # both windows open
    write_batch(r, KEYS, SinkBatch(1, rows(T) + rows(T + W), at=at), cfg)
    assert r.exists(KEYS.window_parts(TUMBLING.key, T), KEYS.window_parts(TUMBLING.key, T + W))
    before = stored_aggs(r, TUMBLING, T)
    # the watermark reaches the first window's end: closed, its parts gone
    write_batch(r, KEYS, SinkBatch(2, [], at=BatchTime(2, T + W, T + 1)), cfg)
    assert not r.exists(KEYS.window_parts(TUMBLING.key, T))
    assert set(r.hkeys(KEYS.window_parts(TUMBLING.key, T + W))) == {
        b"*|0",
        b"*|1",
        b"(other)|0",
        b"(other)|1",
    }
    assert r.zrange(KEYS.open_parts, 0, -1) == [KEYS.window_parts(TUMBLING.key, T + W).encode()]
    got = stored_aggs(r, TUMBLING, T)
    assert {k: v.to_bytes() for k, v in got.items()} == {k: v.to_bytes() for k, v in before.items()}
    assert got["*"].to_bytes() == WindowAgg.merged([a, b]).to_bytes()
    assert got[OVERFLOW_SERVICE].to_bytes() == WindowAgg.merged([b, a]).to_bytes()
    # a replay of that batch changes nothing; the next window closes in its turn
    snap = snapshot(r)
    write_batch(r, KEYS, SinkBatch(2, [], at=BatchTime(2, T + W, T + 1)), cfg)
    assert snapshot(r) == snap
    write_batch(r, KEYS, SinkBatch(3, [], at=BatchTime(3, T + 2 * W, T + 2)), cfg)
    assert not r.exists(KEYS.window_parts(TUMBLING.key, T + W), KEYS.open_parts)
    assert window_counts(r, TUMBLING, T + W)["*"] == 100


def test_overflow_parts_of_every_shard_make_one_row(redis_client: redis.Redis) -> None:
    """The overflow service is kept by every state shard: its row is the merge of their parts,
    also when a later batch updates only one shard's part (and a replay changes nothing)."""
    r = redis_client
    other = OVERFLOW_SERVICE

    def part(agg: WindowAgg, shard: int) -> WindowUpdate:
        return dataclasses.replace(update(TUMBLING, T, other, agg), shard=shard)

    a0, a1, api = agg_of(100, 1), agg_of(50, 2), agg_of(30, 3)
    write_batch(r, KEYS, SinkBatch(1, [part(a0, 0), part(a1, 1), update(TUMBLING, T, "api", api)]))
    a0_later = WindowAgg.merged([a0, agg_of(20, 4)])  # shard 0's absolute state, a batch later
    batch2 = [part(a0_later, 0)]
    write_batch(r, KEYS, SinkBatch(2, batch2))
    before = snapshot(r)
    write_batch(r, KEYS, SinkBatch(2, batch2))  # a replay
    assert snapshot(r) == before
    counts = window_counts(r, TUMBLING, T)
    assert counts == {other: 170, "api": 30, "*": 200}
    aggs = stored_aggs(r, TUMBLING, T)
    want = WindowAgg.merged([a0_later, a1])
    assert aggs[other].to_bytes() == want.to_bytes()
    assert stored_docs(r, TUMBLING, T)[other]["count"] == 170


def test_roll_ups_read_folded_and_per_batch_fields_alike(redis_client: redis.Redis) -> None:
    """A store written before folding keeps per-batch fields in its roll-ups: both count."""
    r, spec = redis_client, WindowSpec.from_key("r60000")
    agg = agg_of(30, 0)
    r.hset(KEYS.window_aggs(spec.key, T), mapping={"api": agg.to_bytes(), "*": agg.to_bytes()})
    r.hset(KEYS.window(spec.key, T), "api", '{"count": 999}')  # an old JSON document: not read
    r.zadd(KEYS.window_index(spec.key), {str(T): T})
    r.hset(
        KEYS.window_stragglers(spec.key, T),
        mapping={"api|5": "2", "api|7": "1", "api|-1": "4/3", "*|-1": "4/2"},
    )
    r.hset(KEYS.window_duplicates(spec.key, T), mapping={"api|5": "1", "api|-1": "2"})
    rows = {w.service: w for w in read_windows(r, KEYS, spec)}
    assert (rows["api"].count, rows["api"].stragglers, rows["api"].revision) == (30, 7, 5)
    assert rows["api"].duplicates == 3
    assert (rows["*"].stragglers, rows["*"].revision) == (7, 4)  # batches 5 and 7, and 2 folded
