"""The read tasks' shard of a service (jobs/summary/shards.py) is Spark's `pmod(hash(service), n)`.

The stateful step is grouped by the shard Spark computes; the read tasks bundle a chunk's
services by the shard they compute themselves. If the two ever differed, a service's summaries
would reach a shard that does not hold its state. Names of every UTF-8 length class (the
Murmur3 tail is per byte, signed), non-ASCII and the overflow name.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyspark.sql import functions as F

from jobs.summary.shards import group_partition, shard_keys, shard_of, spark_hash
from tidegauge.core.events import OVERFLOW_SERVICE


def _names() -> list[str]:
    rng = random.Random(7)
    alphabet = "abcXYZ-_.0189é✓ß漢🙂"
    out = ["", "a", "ab", "abc", "abcd", "abcde", "checkout", "sérvice ✓", OVERFLOW_SERVICE]
    out += [f"s{k:05d}" for k in range(200)]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(300)]
    return out


@pytest.mark.parametrize("shards", [1, 2, 4, 7])
def test_shard_of_is_sparks_pmod_hash(spark: Any, shards: int) -> None:
    names = _names()
    rows = (
        spark.createDataFrame([(n,) for n in names], "service string")
        .select("service", F.hash("service").alias("h"), F.pmod(F.hash("service"), F.lit(shards)))
        .collect()
    )
    assert len(rows) == len(names)
    for service, h, shard in rows:
        assert spark_hash(service) == h, service
        assert shard_of(service, shards) == shard, service


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 8])
def test_group_partition_is_sparks_pmod_hash_of_the_group_key(spark: Any, partitions: int) -> None:
    keys = list(range(-5, 300)) + [2**31 - 1, -(2**31)]
    rows = (
        spark.createDataFrame([(g, k) for g in ("event", "dead") for k in keys], "g string, k int")
        .select("g", "k", F.pmod(F.hash("g", "k"), F.lit(partitions)).alias("p"))
        .collect()
    )
    assert len(rows) == 2 * len(keys)
    for group, key, partition in rows:
        assert group_partition(group, key, partitions) == partition, (group, key)


@pytest.mark.parametrize(("shards", "partitions"), [(4, 2), (4, 4), (8, 2), (6, 4), (16, 3)])
def test_the_chosen_state_keys_spread_the_shards_evenly_in_spark(
    spark: Any, shards: int, partitions: int
) -> None:
    """Spark itself places the groups ("event", key) of the chosen keys round robin."""
    keys = shard_keys(shards, partitions)
    placed = (
        spark.createDataFrame([("event", k) for k in keys], "g string, k int")
        .select(F.pmod(F.hash("g", "k"), F.lit(partitions)).alias("p"))
        .collect()
    )
    assert [r.p for r in placed] == [k % partitions for k in range(shards)]
