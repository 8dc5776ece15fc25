"""Reads with the closed-window memo (tidegauge/core/closed_windows.py) on a real redis-server.

The dashboard re-reads an hour of windows every second through one `ClosedWindows` memo. These
tests change the store the ways a live job does (late events for closed windows, old broker
timestamps, new windows and a moving watermark, a flushed and rewritten store) and check that
every memoised read still equals a fresh read without the memo, whose own correctness is
tested against ground truth in test_redis_sink.py and the dashboard tests.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import redis

from jobs.sink.redis_sink import SinkBatch, SinkConfig, write_batch
from jobs.sink.status import write_progress
from jobs.state.rows import ArrivalUpdate, LateUpdate, WindowUpdate
from tests.integration.seed import LATENESS_MS, SPEC, Seeded, W, seed_live
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.store import (
    ALL_SERVICES,
    Keys,
    read_arrivals,
    read_lateness,
    read_range_merged,
    read_windows,
)
from tidegauge.core.window_agg import WindowAgg

KEYS = Keys()


def reads(r: redis.Redis, truth: Seeded, cache: ClosedWindows | None) -> dict[str, Any]:
    """What the dashboard reads per refresh, as plain values to compare."""
    since, until = truth.starts[0], truth.newest_start + W + 10 * W
    merged = read_range_merged(r, KEYS, since, until, SPEC, cache=cache)
    return {
        "windows": [w.to_dict() for w in read_windows(r, KEYS, SPEC, since_ms=since, cache=cache)],
        "range": {s: a.metrics(until - since) for s, a in merged.aggs.items()},
        "range_windows": merged.windows,
        "starts": merged.starts,
        "lateness": {
            svc: read_lateness(r, KEYS, since, until, svc, SPEC, cache=cache).to_dict(
                [0, 5_000, LATENESS_MS, 60_000]
            )
            for svc in (ALL_SERVICES, truth.services[1])
        },
        "arrivals": {
            d: [a.to_dict() for a in read_arrivals(r, KEYS, d, since, until, cache=cache)]
            for d in ("processing", "broker")
        },
    }


def same(got: Any, want: Any, where: str = "") -> None:
    """Equal, except that percentiles may differ within t-digest accuracy.

    The memo merges closed windows in blocks first, and t-digest merges are approximate, so
    the grouping moves quantiles a little: 1 %, and 2 % for p99 and beyond, where few values
    sit (over 40 seeded start times the largest moves were 1.2 % for the lateness p99 and
    0.9 % for the latency p99.9, everything else under 0.5 %). Counts, users (HyperLogLog
    merges are exact), maxima and everything else must be equal.
    """
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        tail = where.endswith(("p99", "p999"))
        assert got == pytest.approx(want, rel=0.02 if tail else 0.01), where
    else:
        assert got == want, where


def agree(r: redis.Redis, truth: Seeded, memo: ClosedWindows) -> dict[str, Any]:
    """Memoised reads (twice: filling, then reusing) equal fresh ones."""
    fresh = reads(r, truth, None)
    same(reads(r, truth, memo), fresh)
    same(reads(r, truth, memo), fresh)
    return fresh


def window(start: int, service: str, n: int, seed: int) -> WindowUpdate:
    rng = np.random.default_rng(seed)
    agg = WindowAgg()
    agg.add(rng.lognormal(3.0, 0.5, n), np.full(n, 200), rng.integers(0, 99, n).astype(str))
    return WindowUpdate(SPEC.key, start, service, agg.to_bytes())


def progress(batch_id: int, watermark: int) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "batch_time": watermark + LATENESS_MS,
        "watermark": watermark,
        "input_rows": 1,
        "offsets": {},
        "latest_offsets": {},
        "batch_duration_ms": 10,
        "query_id": "q-1",
    }


@pytest.fixture
def seeded(redis_client: redis.Redis) -> Seeded:
    return seed_live(redis_client, KEYS, time.time_ns() // 1_000_000, minutes=3)


def test_memoised_reads_follow_every_change_a_live_job_makes(
    redis_client: redis.Redis, seeded: Seeded
) -> None:
    r, memo = redis_client, ClosedWindows()
    first = agree(r, seeded, memo)
    assert memo.size("rows") > 0 and memo.size("aggs") > 0 and memo.size("blocks") > 0
    # and both agree with the raw latencies written (every window lies in the range)
    merged = reads(r, seeded, memo)["range"][ALL_SERVICES]
    assert merged["count"] == sum(seeded.events.values())
    for name, q in (("p50", 50), ("p95", 95), ("p99", 99)):
        assert merged[name] == pytest.approx(np.percentile(seeded.latencies, q), rel=0.02)
    late_before = first["lateness"][ALL_SERVICES]["late"]

    # late events for an old, closed window, and old broker timestamps (a late burst)
    old, svc = seeded.starts[2], seeded.services[1]
    late = LateAgg()
    late.add(np.array([70_000.0, 80_000.0, 90_000.0]), 45_000.0)
    write_batch(
        r,
        KEYS,
        SinkBatch(
            900,
            [],
            late=[LateUpdate(SPEC.key, old, svc, 3, late.to_bytes())],
            arrivals=[ArrivalUpdate("broker", old, svc, 3, {"late": 3, "stragglers": 0})],
        ),
        SinkConfig(arrival_window_ms=W),
    )
    now = agree(r, seeded, memo)
    assert now["lateness"][ALL_SERVICES]["late"] == late_before + 3
    assert any(w["late"] >= 3 and w["window_start"] == old for w in now["windows"])

    # the job goes on: a new window, and the watermark closes the ones that were open
    nxt = seeded.newest_start + W
    write_batch(
        r, KEYS, SinkBatch(901, [window(nxt, s, 40, i) for i, s in enumerate(seeded.services)])
    )
    write_progress(r, KEYS, progress(901, nxt + W))
    now = agree(r, seeded, memo)
    assert nxt in now["starts"]


def test_a_flushed_and_rewritten_store_is_not_mistaken_for_the_old_one(
    redis_client: redis.Redis, seeded: Seeded
) -> None:
    r, memo = redis_client, ClosedWindows()
    before = agree(r, seeded, memo)
    r.flushdb()
    # same windows, other values (another seed): only the new epoch tells the memo
    again = seed_live(r, KEYS, seeded.batch_time + 500, minutes=3, seed=7)
    assert again.starts == seeded.starts
    after = agree(r, again, memo)
    assert after["range"] != before["range"]


def test_a_closed_window_is_not_read_again_an_open_one_is(
    redis_client: redis.Redis, seeded: Seeded
) -> None:
    r, memo = redis_client, ClosedWindows()
    before = agree(r, seeded, memo)
    closed, still_open = seeded.starts[0], seeded.newest_start
    assert closed + W <= seeded.watermark < still_open + W
    svc = seeded.services[0]
    # Redis changes under a closed window (no job would do this): the memo does not look
    r.hset(KEYS.window_aggs(SPEC.key, closed), svc, WindowAgg(count=1).to_bytes())
    assert reads(r, seeded, memo)["windows"] == before["windows"]
    # an open window still changes, and the memo shows it
    write_batch(r, KEYS, SinkBatch(902, [window(still_open, svc, 5, 1)]))
    rows = read_windows(r, KEYS, SPEC, svc, still_open, still_open + W, cache=memo)
    assert [w.count for w in rows] == [5]
