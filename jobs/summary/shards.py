"""Which state shard a service's windows live in: Spark's `pmod(hash(service), shards)`, in Python.

The job's stateful step is grouped by (group, shard), and a service's shard is what Spark's
`pmod(hash(service), n)` gives (`hash` = Murmur3 x86_32, seed 42, over the name's UTF-8 bytes,
with Spark's own tail: each trailing byte mixed on its own, as a signed byte). The read tasks
compute the same number here, so that they can bundle a chunk's services per shard (one summary
row per shard and chunk instead of one per service) while every service stays in the shard its
checkpointed state is in. `tests/spark` checks this against Spark's `hash` itself.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = [
    "SPARK_HASH_SEED",
    "group_partition",
    "group_shard",
    "shard_keys",
    "shard_of",
    "spark_hash",
    "spark_hash_int",
]

#: The seed of Spark SQL's `hash` function.
SPARK_HASH_SEED = 42

_M = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _M, 15) * _C2) & _M


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M
    return h1 ^ (h1 >> 16)


def spark_hash(value: str, seed: int = SPARK_HASH_SEED) -> int:
    """Spark SQL's `hash(value)` of a string: Murmur3_x86_32 `hashUnsafeBytes`, a signed int."""
    data = value.encode()
    n = len(data)
    aligned = n - n % 4
    h1 = seed & _M
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for b in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b >= 128 else b) & _M))
    h = _fmix(h1, n)
    return h - (1 << 32) if h >= 1 << 31 else h


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark SQL's Murmur3 of a 32-bit int (`hashInt`) with `seed`, a signed int."""
    h = _fmix(_mix_h1(seed & _M, _mix_k1(value & _M)), 4)
    return h - (1 << 32) if h >= 1 << 31 else h


def group_partition(group: str, key: int, partitions: int) -> int:
    """The shuffle partition of state group `(group, key)`: `pmod(hash(group, key), partitions)`.

    Spark hashes a row of several columns by chaining: each column's hash seeds the next's.
    """
    return spark_hash_int(key, spark_hash(group)) % partitions


def shard_keys(shards: int, partitions: int, group: str = "event") -> tuple[int, ...]:
    """The state key of each shard, chosen so the shards spread evenly over the partitions.

    Spark places a group by its key's hash, and the plain keys 0..n-1 fall unevenly: with 4
    shards over 2 partitions, 3 land in one, so one state task does three quarters of the
    work. Shard k gets the smallest unused key of partition `k mod partitions` instead.
    """
    keys: list[int] = []
    for k in range(shards):
        want, key = k % partitions, 0
        while key in keys or group_partition(group, key, partitions) != want:
            key += 1
        keys.append(key)
    return tuple(keys)


@lru_cache(maxsize=1 << 17)
def shard_of(service: str, shards: int) -> int:
    """The state shard of `service`: Spark's `pmod(hash(service), shards)` (cached per process)."""
    return spark_hash(service) % shards


#: Separates a dimension slice's parts in its group name (tidegauge/core/dimensions.py `SEP`).
_SLICE_SEP = "\x1f"


def group_shard(name: str, shards: int) -> int:
    """The state shard of a state group: a service's, or a dimension slice's.

    A slice of a service lives with the service (its values are counted by one summary per
    (service, dimension)); a slice across all services (`*`) with the other values of its
    dimension.
    """
    if _SLICE_SEP not in name:
        return shard_of(name, shards)
    service, dim, _ = name.split(_SLICE_SEP, 2)
    return shard_of(service if service != "*" else service + _SLICE_SEP + dim, shards)
