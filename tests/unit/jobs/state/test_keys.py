"""Each shard's state key (jobs/state/keys.py): spread over the tasks, fixed per checkpoint.

Spark's own placement of the keys is checked in tests/spark/test_shards.py; here the choice
and its record, without Spark.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.state.keys import KEYS_FILE, state_keys
from jobs.summary.settings import ExecutorConfig
from jobs.summary.shards import group_partition, shard_keys
from tidegauge.core.windows import WindowSpec


def test_the_plain_keys_fall_unevenly_which_is_why_keys_are_chosen() -> None:
    # 4 shards over 2 partitions: three plain keys in one partition
    assert Counter(group_partition("event", k, 2) for k in range(4)) == Counter({1: 3, 0: 1})
    assert [group_partition("event", k, 2) for k in shard_keys(4, 2)] == [0, 1, 0, 1]


@given(st.integers(1, 64), st.integers(1, 16))
def test_chosen_keys_are_distinct_and_place_shard_k_in_partition_k_mod_p(
    shards: int, partitions: int
) -> None:
    keys = shard_keys(shards, partitions)
    assert len(keys) == shards and len(set(keys)) == shards
    assert all(k >= 0 for k in keys)
    assert [group_partition("event", k, partitions) for k in keys] == [
        s % partitions for s in range(shards)
    ]
    assert shard_keys(shards, partitions) == keys  # the same on every machine and run


def test_a_new_checkpoint_gets_spread_keys_and_keeps_them(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    keys = state_keys(str(ck), 4, 2)
    assert keys == shard_keys(4, 2) and keys != (0, 1, 2, 3)
    doc = json.loads((ck / KEYS_FILE).read_text())
    assert doc == {"shards": 4, "partitions": 2, "keys": list(keys)}
    # a restart with other shuffle partitions still finds the state where it is
    assert state_keys(str(ck), 4, 8) == keys


def test_a_checkpoint_written_before_the_keys_were_chosen_keeps_the_plain_ones(
    tmp_path: Path,
) -> None:
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "offsets" / "0").write_text("v1\n")
    assert state_keys(str(ck), 4, 2) == (0, 1, 2, 3)
    (ck / "offsets" / "1").write_text("v1\n")
    assert state_keys(str(ck), 4, 2) == (0, 1, 2, 3)  # recorded: the same from now on


def test_another_shard_count_is_refused_with_what_to_do(tmp_path: Path) -> None:
    ck = str(tmp_path / "ck")
    state_keys(ck, 4, 2)
    with pytest.raises(ValueError, match=r"4 shards, the job asks for 8 \(--state-shards\)"):
        state_keys(ck, 8, 2)


@pytest.mark.parametrize("text", ["{not json", '{"keys": [0, 1, 1, 2]}', '{"keys": "0123"}'])
def test_an_unreadable_record_is_an_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / KEYS_FILE).write_text(text)
    with pytest.raises(ValueError, match=f"{KEYS_FILE}: not a readable record"):
        state_keys(str(tmp_path), 4, 2)


def test_without_a_checkpoint_the_keys_are_the_spread_ones() -> None:
    assert state_keys(None, 4, 2) == shard_keys(4, 2)


def test_the_state_function_maps_a_group_key_back_to_its_shard() -> None:
    spec = (WindowSpec.tumbling(10_000),)
    cfg = ExecutorConfig(spec, shards=4, shard_keys=shard_keys(4, 2))
    assert [cfg.shard_of_key(k) for k in shard_keys(4, 2)] == [0, 1, 2, 3]
    assert ExecutorConfig(spec, shards=4).shard_of_key(3) == 3  # the plain keys
    with pytest.raises(ValueError, match="one distinct key per shard"):
        ExecutorConfig(spec, shards=4, shard_keys=(0, 0, 1, 2))
