"""Services ranked by events and errors, counted inside a real redis-server.

`tidegauge/core/store/ranking.py` sums the sorted sets of counts the sink keeps beside the
aggregates, and reads the windows without them with a read-only Lua script; the totals must be
the sums of what the windows hold, for every stored layout of an aggregate (version 4, and
versions 3 and 2 of stores written before), with and without the sorted sets and the reader's memo,
and the same when the Redis user may not run scripts.
"""

from __future__ import annotations

import json
import struct
from collections import Counter

import numpy as np
import pytest
import redis

from jobs.sink.redis_sink import SinkBatch, write_batch
from jobs.state.rows import WindowUpdate
from tests.fixtures import S, T
from tests.integration.helpers import tidegauge
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.config import RedisSettings
from tidegauge.core.store import Keys
from tidegauge.core.store.ranking import rank_services, read_service_totals
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

KEYS = Keys("tg")
W = 10 * S
SPEC = WindowSpec.tumbling(W)


#: Every latency written, by service: the ground truth of the p99 ranking.
LATENCIES: dict[str, list[float]] = {}


def _agg(rng: np.random.Generator, n: int, service: str = "") -> WindowAgg:
    agg = WindowAgg()
    status = rng.choice([200, 200, 200, 503], n)
    users = np.array([f"u{u}" for u in rng.integers(0, 40, n)], dtype=object)
    scale = 3 + 0.3 * len(service)  # services differ in latency, names by length
    latency = np.round(rng.lognormal(scale, 0.5, n), 3)
    LATENCIES.setdefault(service, []).extend(latency.tolist())
    agg.add(latency, status, users)
    return agg


def _v2_bytes(agg: WindowAgg) -> bytes:
    """`agg` as a version 2 (fixed layout) aggregate, as stores written before hold them."""
    blobs = [agg.latency.to_bytes(), agg.users.to_bytes()]
    blobs += [agg.lateness.to_bytes(), agg.overdue.to_bytes()]
    head = struct.pack("<4sBqqIIII", b"TGWA", 2, agg.count, agg.errors, *map(len, blobs))
    return head + b"".join(blobs)


def _v3_bytes(agg: WindowAgg) -> bytes:
    """`agg` as a version 3 aggregate (every metric by name, empty ones too)."""
    out = struct.pack("<4sBH", b"TGWA", 3, len(agg.registered))
    for m in agg.registered:
        name, payload = m.name.encode(), m.encode(agg.states[m.name])
        out += struct.pack("<B", len(name)) + name + struct.pack("<I", len(payload)) + payload
    return out


def _seed(r: redis.Redis) -> tuple[Counter[str], Counter[str], list[int]]:
    rng = np.random.default_rng(3)
    LATENCIES.clear()
    events: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    starts = [T + k * W for k in range(4)]
    for batch, start in enumerate(starts):
        updates = []
        for svc in ("api", "web", "db", "(other)"):
            agg = _agg(rng, int(rng.integers(1, 60)), svc)
            events[svc] += agg.count
            errors[svc] += agg.errors
            updates.append(WindowUpdate(SPEC.key, start, svc, agg.to_bytes()))
        write_batch(r, KEYS, SinkBatch(batch, updates))
    old = _agg(rng, 25, "legacy")  # a window of a store written before: version 2 bytes
    r.hset(KEYS.window_aggs(SPEC.key, starts[0]), "legacy", _v2_bytes(old))
    events["legacy"] += old.count
    errors["legacy"] += old.errors
    older = _agg(rng, 31, "older")  # version 3 bytes
    r.hset(KEYS.window_aggs(SPEC.key, starts[0]), "older", _v3_bytes(older))
    events["older"] += older.count
    errors["older"] += older.errors
    return events, errors, starts


def test_totals_are_the_windows_sums_in_every_layout(redis_client: redis.Redis) -> None:
    events, errors, starts = _seed(redis_client)
    assert WindowAgg.from_bytes(_v2_bytes(WindowAgg(count=3, errors=1))).count == 3
    assert WindowAgg.from_bytes(_v3_bytes(WindowAgg(count=3, errors=1))).errors == 1
    memo = ClosedWindows()
    for cache in (None, memo, memo):  # the memo's second read takes closed windows from it
        totals = read_service_totals(redis_client, KEYS, [(SPEC, starts)], cache)
        assert {s: t.events for s, t in totals.items()} == dict(events)
        assert {s: t.errors for s, t in totals.items()} == dict(errors)
        assert "*" not in totals
    by_events = sorted(events, key=lambda s: (-events[s], s))
    assert rank_services(totals, "events", 2) == by_events[:2]
    assert rank_services(totals, "errors", 9) == sorted(errors, key=lambda s: (-errors[s], s))


def test_windows_keep_their_counts_in_sorted_sets_summed_by_redis(
    redis_client: redis.Redis,
) -> None:
    """The sink keeps each window's services' events and errors in sorted sets beside their
    aggregates; the totals come from them where they hold every service of the window, and
    from the script elsewhere (a window written in part before: here the first, whose
    "legacy" and "older" aggregates have no score), and stay the same without any sorted set
    (a store written before)."""
    from tidegauge.core.store.ranking import _by_sorted_sets

    events, errors, starts = _seed(redis_client)
    for start in starts:
        stored = redis_client.hgetall(KEYS.window_aggs(SPEC.key, start))
        scores = dict(
            redis_client.zrange(KEYS.window_events(SPEC.key, start), 0, -1, withscores=True)
        )
        wrong = dict(
            redis_client.zrange(KEYS.window_errors(SPEC.key, start), 0, -1, withscores=True)
        )
        aggs = {
            k: WindowAgg.from_bytes(v)
            for k, v in stored.items()
            if k not in (b"*", b"legacy", b"older")
        }
        assert scores == {k: float(a.count) for k, a in aggs.items()}
        assert wrong == {k: float(a.errors) for k, a in aggs.items()}
    scored, scripted = _by_sorted_sets(redis_client, KEYS, [(SPEC, starts)])
    assert scored == [(SPEC.key, s) for s in starts[1:]] and scripted == [(SPEC, starts[:1])]
    for without in (False, True):
        if without:
            for start in starts:
                redis_client.delete(
                    KEYS.window_events(SPEC.key, start), KEYS.window_errors(SPEC.key, start)
                )
        totals = read_service_totals(redis_client, KEYS, [(SPEC, starts)])
        assert {s: (t.events, t.errors) for s, t in totals.items()} == {
            s: (events[s], errors[s]) for s in events
        }


def test_a_user_without_scripts_gets_the_same_totals(redis_client: redis.Redis) -> None:
    events, errors, starts = _seed(redis_client)
    redis_client.acl_setuser(
        "no-scripts",
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        commands=["-@all", "+@read", "+@connection"],
    )
    try:
        kwargs = redis_client.connection_pool.connection_kwargs
        viewer = redis.Redis(
            host=kwargs["host"],
            port=kwargs["port"],
            db=kwargs.get("db", 0),
            username="no-scripts",
            password="pw",
        )
        try:
            viewer.eval_ro("return 1", 0)
        except redis.exceptions.NoPermissionError:
            pass
        else:
            raise AssertionError("the user should not be allowed to run scripts")
        totals = read_service_totals(viewer, KEYS, [(SPEC, starts)], with_p99=True)
        assert {s: (t.events, t.errors) for s, t in totals.items()} == {
            s: (events[s], errors[s]) for s in events
        }
        scripted = read_service_totals(redis_client, KEYS, [(SPEC, starts)], with_p99=True)
        assert {s: t.p99 for s, t in totals.items()} == pytest.approx(
            {s: t.p99 for s, t in scripted.items()}, rel=1e-12
        )
        viewer.close()
    finally:
        redis_client.acl_deluser("no-scripts")


def test_query_windows_top_lists_the_busiest_services_and_star(
    redis_settings: RedisSettings,
) -> None:
    r = redis.Redis.from_url(redis_settings.url)
    events, errors, starts = _seed(r)
    common = ["--redis", redis_settings.url, "--since", str(starts[0]), "--until", str(T + 9 * W)]
    got = json.loads(tidegauge("query", "windows", *common, "--top", "2", "--json").stdout)
    top = sorted(events, key=lambda s: (-events[s], s))[:2]
    assert {row["service"] for row in got} == {"*", *top}
    assert sum(row["count"] for row in got if row["service"] == top[0]) == events[top[0]]
    table = tidegauge("query", "windows", *common, "--top", "1", "--by", "errors").stdout
    worst = sorted(errors, key=lambda s: (-errors[s], s))[0]
    assert (
        table.splitlines()[-1]
        == f"top 1 of {len(errors)} services by errors; {len(errors) - 1} others in * only"
    )
    assert worst in table
    bad = tidegauge("query", "windows", *common, "--top", "2", "--service", "api", check=False)
    assert bad.returncode != 0 and "leave out --service" in bad.stderr
    r.close()


def _rank_error(values: list[float], estimate: float, q: float) -> float:
    data = np.sort(np.asarray(values))
    lo = np.searchsorted(data, estimate, side="left") / len(data)
    hi = np.searchsorted(data, estimate, side="right") / len(data)
    return 0.0 if lo <= q <= hi else min(abs(lo - q), abs(hi - q))


def test_p99_of_each_service_is_its_merged_latencies_and_ranks_them(
    redis_client: redis.Redis,
) -> None:
    _, _, starts = _seed(redis_client)
    memo = ClosedWindows()
    for cache in (None, memo, memo):
        totals = read_service_totals(redis_client, KEYS, [(SPEC, starts)], cache, with_p99=True)
        assert set(totals) == set(LATENCIES)
        for svc, t in totals.items():
            assert t.p99 is not None
            assert _rank_error(LATENCIES[svc], t.p99, 0.99) <= 0.01 + 1 / len(LATENCIES[svc])
    truth = {s: float(np.quantile(v, 0.99)) for s, v in LATENCIES.items()}
    assert rank_services(totals, "p99", 2) == sorted(truth, key=lambda s: -truth[s])[:2]
    plain = read_service_totals(redis_client, KEYS, [(SPEC, starts)])
    assert all(t.p99 is None for t in plain.values())  # read only when asked


def test_p99_over_many_closed_windows_merges_blocks_once_and_follows_the_open_ones(
    redis_client: redis.Redis,
) -> None:
    """An hour-like range: closed windows are merged in blocks of `P99_BLOCK` once per memo
    (each block read while the one before is merged); the p99 stays within the digests' rank
    error of every latency written, a block cut by the range's start counts only its windows
    in the range, and a refresh sees the open window."""
    from jobs.sink.status import write_progress
    from tidegauge.core.store.ranking import P99_BLOCK

    rng = np.random.default_rng(11)
    LATENCIES.clear()
    starts = [T + k * W for k in range(3 * P99_BLOCK + 5)]
    for batch, start in enumerate(starts):
        write_batch(
            redis_client,
            KEYS,
            SinkBatch(
                batch,
                [
                    WindowUpdate(SPEC.key, start, s, _agg(rng, 40, s).to_bytes())
                    for s in ("api", "web")
                ],
            ),  # fmt: skip
        )
    newest = starts[-1]  # open; every window before it is closed
    write_progress(
        redis_client,
        KEYS,
        {"batch_id": 99, "batch_time": newest + W, "watermark": newest, "input_rows": 1,
         "offsets": {}, "latest_offsets": {}, "batch_duration_ms": 1, "query_id": "q"},
    )  # fmt: skip
    memo = ClosedWindows()
    for part in (starts, starts[5:]):  # the whole range, then one that cuts the first block
        cut = len(starts) - len(part)
        for _ in range(2):  # the second read takes the merged blocks from the memo
            got = read_service_totals(redis_client, KEYS, [(SPEC, part)], memo, with_p99=True)
            bare = read_service_totals(redis_client, KEYS, [(SPEC, part)], with_p99=True)
            for svc in ("api", "web"):
                values = [v for k, v in enumerate(LATENCIES[svc]) if k // 40 >= cut]
                p99 = got[svc].p99
                assert p99 is not None and _rank_error(values, p99, 0.99) <= 0.01 + 1 / len(values)
                assert p99 == pytest.approx(bare[svc].p99, rel=0.05)
    assert memo.size("p99-blocks") >= 3
    # a closed block inside the range is kept merged only; the edges' windows one by one
    assert 0 < memo.size("latency") <= 2 * P99_BLOCK < len(starts) - 1
    # the open window gets slower: the next refresh's p99 has it
    slow = WindowAgg()
    slow.add(np.full(400, 5_000.0), np.full(400, 200), np.array(["u"] * 400, dtype=object))
    update = WindowUpdate(SPEC.key, newest, "api", slow.to_bytes())
    write_batch(redis_client, KEYS, SinkBatch(100, [update]))
    got = read_service_totals(redis_client, KEYS, [(SPEC, starts)], memo, with_p99=True)
    assert got["api"].p99 == pytest.approx(5_000.0, rel=0.01)


def test_an_hour_is_ranked_from_ten_minute_roll_ups_with_the_raw_windows_totals(
    redis_client: redis.Redis,
) -> None:
    """With the default retention the sink keeps 10-minute roll-ups; a ranking of the last
    hour reads six of them and the minutes and windows at the hour's ends (a few dozen pieces,
    not the 60 one-minute roll-ups or 360 windows), and gets the raw windows' counts exactly
    and their p99 ranking."""
    import time

    from tests.integration.seed import SPEC as SEEDED
    from tests.integration.seed import seed_live
    from tidegauge.core.retention import DEFAULT_RETENTION, Retention
    from tidegauge.core.store.ranking import rank_size, ranked_parts

    keys = Keys()
    hour = 3_600_000
    names = ["a", "b", "c", "d"]  # latency grows with the index (seed_live)
    truth = seed_live(
        redis_client,
        keys,
        time.time_ns() // 1_000_000,
        services=len(names),
        names=names,
        minutes=75,
        rate=2,
        # no catch-up batch: the helper's writes windows its own watermark has passed (a job
        # would have counted those events late), after the minute holding them was rolled up
        pause_windows=0,
        retention=Retention.parse(DEFAULT_RETENTION),
    )
    until = SEEDED.end(truth.newest_start)
    since = until - hour
    parts = dict(ranked_parts(redis_client, keys, SEEDED, since, until, rank_size(hour)))
    ten = WindowSpec.rollup_of(10 * 60_000)
    # whole 10-minute periods inside the hour that the watermark has closed: 4 to 6, by the clock
    assert 4 <= len(parts[ten]) <= 6
    assert sum(map(len, parts.values())) < 45  # 10 m + 1 m roll-ups at the ends + raw windows
    raw = [(SEEDED, [s for s in truth.starts if since <= s < until])]
    from_tiers = read_service_totals(redis_client, keys, list(parts.items()), with_p99=True)
    from_raw = read_service_totals(redis_client, keys, raw, with_p99=True)
    assert set(from_tiers) == set(from_raw) == set(names)
    for svc in names:
        assert (from_tiers[svc].events, from_tiers[svc].errors) == (
            from_raw[svc].events,
            from_raw[svc].errors,
        )
        assert from_tiers[svc].p99 == pytest.approx(from_raw[svc].p99, rel=0.1)
    assert rank_services(from_tiers, "p99", 4) == names[::-1] == rank_services(from_raw, "p99", 4)
    assert rank_services(from_tiers, "events", 4) == rank_services(from_raw, "events", 4)
