"""The read tasks' shard of a service (jobs/summary/shards.py) is Spark's `pmod(hash(service), n)`.

Checkpoints written when Spark grouped the stateful step keep each service's state in the shard
Spark computed; the read tasks bundle a chunk's services by the shard they compute themselves.
If the two ever differed, a carried-over checkpoint's services would reach a shard that does not
hold their state. Names of every UTF-8 length class (the
Murmur3 tail is per byte, signed), non-ASCII and the overflow name.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyspark.sql import functions as F

from jobs.summary.shards import shard_of, spark_hash
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
