"""The `--max-services` quotas of the state shards (jobs/summary/slots.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.summary.slots import LOG_DIR, ShardSlots, even, quotas, read_before, record, slots_for


def test_a_new_job_splits_the_limit_evenly_and_exactly() -> None:
    assert even(1000, 4) == (250, 250, 250, 250)
    assert even(1001, 4) == (251, 250, 250, 250)
    assert even(2, 4) == (1, 1, 0, 0)
    for limit in range(1, 60):
        for shards in (1, 2, 3, 4, 7):
            got = even(limit, shards)
            assert sum(got) == limit and max(got) - min(got) <= 1


def test_free_slots_go_to_the_shards_that_overflowed_in_proportion() -> None:
    # 988 tracked, 12 free; only shard 0 had names over its quota: it gets all 12
    assert quotas(1000, ShardSlots((250, 248, 245, 245), (12, 0, 0, 0))) == (262, 248, 245, 245)
    # 10 free, overflowed 3 and 1: 7.5 and 2.5, the remainder to the lower shard
    assert quotas(100, ShardSlots((30, 30, 30, 0), (3, 0, 1, 0))) == (38, 30, 32, 0)
    # nobody overflowed: the free slots are shared evenly on top of what each tracks
    assert quotas(100, ShardSlots((10, 20, 30, 30), (0, 0, 0, 0))) == (13, 23, 32, 32)


def test_quotas_add_up_to_the_limit_and_never_take_a_tracked_slot() -> None:
    import random

    rng = random.Random(7)
    for _ in range(2000):
        shards = rng.randint(1, 8)
        limit = rng.randint(1, 500)
        tracked = tuple(rng.randint(0, limit // shards + 5) for _ in range(shards))
        over = tuple(rng.choice((0, 0, rng.randint(1, 50))) for _ in range(shards))
        got = quotas(limit, ShardSlots(tracked, over))
        assert all(q >= t for q, t in zip(got, tracked, strict=True))
        assert sum(got) == max(limit, sum(tracked))
        if any(over) and sum(tracked) < limit:  # only hungry shards gain
            assert all(q == t for q, t, o in zip(got, tracked, over, strict=True) if not o)


def test_the_log_carries_what_shards_track_from_batch_to_batch(tmp_path: Path) -> None:
    cp = str(tmp_path)
    assert read_before(cp, 0, 4) is None
    assert slots_for(cp, 0, 1000, 4) == (250, 250, 250, 250)
    record(cp, 0, 4, {0: (250, 12), 1: (248, 0), 2: (245, 0), 3: (245, 0)})
    assert slots_for(cp, 1, 1000, 4) == (262, 248, 245, 245)
    # batch 1 ran shard 0 only: the others keep what they tracked, and nobody overflowed
    record(cp, 1, 4, {0: (262, 0)})
    assert read_before(cp, 2, 4) == ShardSlots((262, 248, 245, 245), (0, 0, 0, 0))
    # a batch run again after a failure gets the quotas it had the first time
    assert slots_for(cp, 1, 1000, 4) == (262, 248, 245, 245)
    record(cp, 1, 4, {0: (262, 0)})
    assert slots_for(cp, 1, 1000, 4) == (262, 248, 245, 245)
    # a batch with no state shard run writes no entry: the next one reads the newest before it
    assert slots_for(cp, 5, 1000, 4) == slots_for(cp, 2, 1000, 4)


def test_the_log_keeps_a_few_entries_and_refuses_a_broken_one(tmp_path: Path) -> None:
    cp = str(tmp_path)
    for batch in range(60):
        record(cp, batch, 2, {0: (batch, 0), 1: (0, 0)})
    kept = sorted(int(p.name) for p in (tmp_path / LOG_DIR).iterdir())
    assert kept[-1] == 59 and len(kept) <= 21 and not list((tmp_path / LOG_DIR).glob(".*"))
    assert read_before(cp, 60, 3) is None  # another shard count: not this job's entry
    (tmp_path / LOG_DIR / "59").write_text("{not json")
    with pytest.raises(ValueError, match="service-slots/59: not a readable"):
        read_before(cp, 60, 2)
