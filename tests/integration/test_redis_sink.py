"""The Redis sink (jobs/redis_sink.py) and the read API (tidegauge/store.py) on a real redis-server.

The sink promises that each micro-batch is one transaction of absolute values, so a replayed
batch leaves Redis exactly as it was; these tests replay batches and compare every key.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

import jobs.redis_sink as redis_sink
from jobs.redis_sink import WindowUpdate, write_batch, write_progress
from tidegauge.store import (
    DeadLetter,
    Keys,
    WindowRow,
    read_batches,
    read_dead_counts,
    read_dead_letters,
    read_services,
    read_status,
    read_window_sizes,
    read_windows,
)

S = 1_000
W = 10 * S
T = 1_795_341_600_000  # a 10 s (and 60 s) window boundary
KEYS = Keys("tg")


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


def letter(partition: int, offset: int, ts: int, reason: str = "invalid_json",
           batch_id: int = 1, raw: bytes = b"{oops") -> DeadLetter:
    return DeadLetter(
        partition=partition, offset=offset, kafka_timestamp=ts, reason=reason,
        detail=f"detail of {partition}:{offset}", raw=raw, raw_size=len(raw) + 10,
        batch_id=batch_id,
    )


def window_counts(r: redis.Redis, size: int, start: int) -> dict[str, int]:
    return {
        k.decode(): json.loads(v)["count"] for k, v in r.hgetall(KEYS.window(size, start)).items()
    }


# --- write_batch: idempotence ---------------------------------------------------------------


def _full_batch(batch_id: int) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "windows": [
            WindowUpdate(W, T, "api", 5),
            WindowUpdate(W, T, "web", 2),
            WindowUpdate(W, T + W, "api", 1),
            WindowUpdate(60 * S, T, "db", 9),
        ],
        "late": [WindowUpdate(W, T - W, "api", 3), WindowUpdate(W, T - 2 * W, "web", 1)],
        "dead": [
            letter(0, 10, T + 5, batch_id=batch_id, raw=b"\xff\xfe binary \x00"),
            letter(1, 11, T + 3, "empty", batch_id=batch_id, raw=b""),
            letter(2, 12, T + 4, batch_id=batch_id),
        ],
        "dead_counts": {"invalid_json": 2, "empty": 1},
    }


def _write(r: redis.Redis, b: dict[str, Any], dead_letter_max: int = 100_000) -> None:
    write_batch(
        r, KEYS, b["batch_id"], b["windows"], b["dead"], b["dead_counts"],
        dead_letter_max=dead_letter_max, late=b["late"],
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
    b1 = _full_batch(1)
    _write(redis_client, b1)
    b2 = {
        "batch_id": 2,
        "windows": [WindowUpdate(W, T, "api", 8), WindowUpdate(W, T + 2 * W, "db", 1)],
        "late": [WindowUpdate(W, T - W, "api", 2)],
        "dead": [letter(0, 20, T + 9, batch_id=2)],
        "dead_counts": {"invalid_json": 3, "empty": 1},
    }
    _write(redis_client, b2)
    after_b2 = snapshot(redis_client)
    _write(redis_client, b2)
    assert snapshot(redis_client) == after_b2


def test_empty_batch_writes_nothing(redis_client: redis.Redis) -> None:
    write_batch(redis_client, KEYS, 0, [])
    assert redis_client.dbsize() == 0


# --- write_batch: the `*` totals --------------------------------------------------------------


def test_star_is_the_sum_of_every_stored_service(redis_client: redis.Redis) -> None:
    write_batch(redis_client, KEYS, 1, [WindowUpdate(W, T, "api", 3), WindowUpdate(W, T, "web", 2)])
    assert window_counts(redis_client, W, T) == {"api": 3, "web": 2, "*": 5}
    # batch 2 only updates api (absolute 4): web's 2 from batch 1 still counts
    write_batch(redis_client, KEYS, 2, [WindowUpdate(W, T, "api", 4)])
    assert window_counts(redis_client, W, T) == {"api": 4, "web": 2, "*": 6}
    # batch 3 adds a new service to the window, and opens another window
    write_batch(
        redis_client, KEYS, 3, [WindowUpdate(W, T, "db", 10), WindowUpdate(W, T + W, "db", 1)]
    )
    assert window_counts(redis_client, W, T) == {"api": 4, "web": 2, "db": 10, "*": 16}
    assert window_counts(redis_client, W, T + W) == {"db": 1, "*": 1}
    stored = redis_client.hgetall(KEYS.window(W, T))
    assert json.loads(stored[b"api"]) == {"count": 4, "batch": 2}
    assert json.loads(stored[b"*"]) == {"count": 16, "batch": 3}
    # replaying batch 3 keeps the totals
    write_batch(
        redis_client, KEYS, 3, [WindowUpdate(W, T, "db", 10), WindowUpdate(W, T + W, "db", 1)]
    )
    assert window_counts(redis_client, W, T) == {"api": 4, "web": 2, "db": 10, "*": 16}
    assert read_services(redis_client, KEYS) == ["api", "db", "web"]
    assert read_window_sizes(redis_client, KEYS) == [W]


def test_star_is_per_window_size(redis_client: redis.Redis) -> None:
    write_batch(
        redis_client, KEYS, 1,
        [WindowUpdate(W, T, "api", 3), WindowUpdate(60 * S, T, "api", 30)],
    )
    assert window_counts(redis_client, W, T) == {"api": 3, "*": 3}
    assert window_counts(redis_client, 60 * S, T) == {"api": 30, "*": 30}
    assert read_window_sizes(redis_client, KEYS) == [W, 60 * S]


@pytest.mark.parametrize("where", ["windows", "late"])
def test_write_batch_refuses_star(redis_client: redis.Redis, where: str) -> None:
    star = [WindowUpdate(W, T, "*", 5)]
    args: dict[str, Any] = {"windows": [WindowUpdate(W, T, "api", 1)], "late": []}
    args[where] = args[where] + star
    with pytest.raises(ValueError, match=r"'\*' is computed by the sink"):
        write_batch(redis_client, KEYS, 1, args["windows"], late=args["late"])
    assert redis_client.dbsize() == 0  # refused before anything was written


# --- late counts ------------------------------------------------------------------------------


def _late(r: redis.Redis, start: int) -> dict[str, int]:
    return {row.service: row.late for row in read_windows(r, KEYS, W) if row.window_start == start}


def test_late_counts_replay_safe_but_add_across_batches(redis_client: redis.Redis) -> None:
    write_batch(redis_client, KEYS, 5, [WindowUpdate(W, T + W, "api", 1)],
                late=[WindowUpdate(W, T, "api", 2)])
    assert _late(redis_client, T) == {"api": 2, "*": 2}
    # replay of batch 5: still 2
    write_batch(redis_client, KEYS, 5, [WindowUpdate(W, T + W, "api", 1)],
                late=[WindowUpdate(W, T, "api", 2)])
    assert _late(redis_client, T) == {"api": 2, "*": 2}
    # batch 6: 3 more late api rows and 1 late web row in the same window add up
    write_batch(redis_client, KEYS, 6, [],
                late=[WindowUpdate(W, T, "api", 3), WindowUpdate(W, T, "web", 1)])
    assert _late(redis_client, T) == {"api": 5, "web": 1, "*": 6}
    # replay of batch 6
    write_batch(redis_client, KEYS, 6, [],
                late=[WindowUpdate(W, T, "api", 3), WindowUpdate(W, T, "web", 1)])
    assert _late(redis_client, T) == {"api": 5, "web": 1, "*": 6}
    # the window only has late rows: it is listed with count 0
    rows = [r for r in read_windows(redis_client, KEYS, W) if r.window_start == T]
    assert {(r.service, r.count, r.late) for r in rows} == {
        ("*", 0, 6), ("api", 0, 5), ("web", 0, 1),
    }
    # the window with accepted rows has no late rows
    assert _late(redis_client, T + W) == {"api": 0, "*": 0}


# --- dead letters ---------------------------------------------------------------------------


def test_dead_letters_capped_newest_kept_counts_exact(redis_client: redis.Redis) -> None:
    b1 = [letter(0, i, T + 100 + i, batch_id=1) for i in range(4)]  # ts T+100..T+103
    write_batch(redis_client, KEYS, 1, [], b1, {"invalid_json": 4}, dead_letter_max=5)
    assert len(read_dead_letters(redis_client, KEYS)) == 4
    # batch 2: some newer, some older than what is stored, given out of order
    b2 = [
        letter(1, 0, T + 50, "empty", batch_id=2),
        letter(1, 1, T + 201, batch_id=2),
        letter(1, 2, T + 99, "empty", batch_id=2),
        letter(1, 3, T + 200, batch_id=2),
    ]
    counts = {"invalid_json": 6, "empty": 2}
    write_batch(redis_client, KEYS, 2, [], b2, counts, dead_letter_max=5)
    kept = read_dead_letters(redis_client, KEYS)
    assert [d.kafka_timestamp - T for d in kept] == [201, 200, 103, 102, 101]  # newest first
    assert [d.ref for d in kept] == ["1:1", "1:3", "0:3", "0:2", "0:1"]
    assert kept[0] == b2[1]  # round trip of every field
    assert [d.ref for d in read_dead_letters(redis_client, KEYS, limit=2)] == ["1:1", "1:3"]
    # counts stay exact although 3 letters were trimmed
    assert read_dead_counts(redis_client, KEYS) == counts
    # a replay of batch 2 changes nothing
    before = snapshot(redis_client)
    write_batch(redis_client, KEYS, 2, [], b2, counts, dead_letter_max=5)
    assert snapshot(redis_client) == before


def test_dead_letter_raw_bytes_survive(redis_client: redis.Redis) -> None:
    raw = bytes(range(256))
    d = letter(3, 99, T, raw=raw)
    write_batch(redis_client, KEYS, 1, [], [d], {"invalid_utf8": 1})
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
    monkeypatch.setattr(redis_sink, "BATCH_HISTORY", 3)
    for b in (4, 0, 1, 2, 3, 5):
        write_progress(redis_client, KEYS, summary(b))
    assert [h["batch_id"] for h in read_batches(redis_client, KEYS)] == [3, 4, 5]


# --- read_windows filters -------------------------------------------------------------------


@pytest.fixture
def seeded(redis_client: redis.Redis) -> redis.Redis:
    """Windows of 10 s at T..T+30s (api, web), a late-only window at T+40s, and 60 s windows.

        start  api web  *   late
        T       1   2   3
        T+10    4   -   4   api 1
        T+20    -   5   5
        T+30    6   7  13
        T+40    -   -   -   web 2
    """
    write_batch(
        redis_client, KEYS, 1,
        [
            WindowUpdate(W, T, "api", 1), WindowUpdate(W, T, "web", 2),
            WindowUpdate(W, T + W, "api", 4), WindowUpdate(W, T + 2 * W, "web", 5),
            WindowUpdate(60 * S, T, "api", 11), WindowUpdate(60 * S, T, "web", 7),
        ],
    )
    write_batch(
        redis_client, KEYS, 2,
        [WindowUpdate(W, T + 3 * W, "api", 6), WindowUpdate(W, T + 3 * W, "web", 7)],
        late=[WindowUpdate(W, T + W, "api", 1), WindowUpdate(W, T + 4 * W, "web", 2)],
    )
    return redis_client


def row(start: int, service: str, count: int, late: int = 0, size: int = W) -> WindowRow:
    return WindowRow(start, start + size, service, count, count * 1000.0 / size, late)


ALL_ROWS = [
    row(T, "*", 3), row(T, "api", 1), row(T, "web", 2),
    row(T + W, "*", 4, 1), row(T + W, "api", 4, 1),
    row(T + 2 * W, "*", 5), row(T + 2 * W, "web", 5),
    row(T + 3 * W, "*", 13), row(T + 3 * W, "api", 6), row(T + 3 * W, "web", 7),
    row(T + 4 * W, "*", 0, 2), row(T + 4 * W, "web", 0, 2),
]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({}, ALL_ROWS, id="everything-smallest-size-by-default"),
        pytest.param({"size_ms": W}, ALL_ROWS, id="explicit-size"),
        pytest.param(
            {"size_ms": 60 * S},
            [row(T, "*", 18, size=60 * S), row(T, "api", 11, size=60 * S),
             row(T, "web", 7, size=60 * S)],
            id="other-size",
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
            [row(T + 2 * W, "web", 5), row(T + 3 * W, "web", 7), row(T + 4 * W, "web", 0, 2)],
            id="service-and-since",
        ),
        pytest.param({"service": "nope"}, [], id="unknown-service"),
        pytest.param({"size_ms": 5 * S}, [], id="unknown-size"),
    ],
)
def test_read_windows_filters(
    seeded: redis.Redis, kwargs: dict[str, Any], expected: list[WindowRow]
) -> None:
    assert read_windows(seeded, KEYS, **kwargs) == expected


def test_read_windows_on_an_empty_store(redis_client: redis.Redis) -> None:
    assert read_windows(redis_client, KEYS) == []
    assert read_status(redis_client, KEYS) is None
    assert read_batches(redis_client, KEYS) == []
    assert read_dead_counts(redis_client, KEYS) == {}


def test_prefixes_are_separate(redis_client: redis.Redis) -> None:
    other = Keys("other")
    write_batch(redis_client, other, 1, [WindowUpdate(W, T, "api", 3)])
    assert read_windows(redis_client, KEYS) == []
    assert read_windows(redis_client, other) == [row(T, "*", 3), row(T, "api", 3)]
