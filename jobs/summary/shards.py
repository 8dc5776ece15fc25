"""Which state shard a service's windows live in: Spark's `pmod(hash(service), shards)`, in Python.

The job's stateful step is grouped by (group, shard) (jobs/state/step.py), and a service's
shard is what Spark's `pmod(hash(service), n)` gives (`hash` = Murmur3 x86_32, seed 42, over
the name's UTF-8 bytes, with Spark's own tail: each trailing byte mixed on its own, as a signed
byte). The read tasks compute it here, to bundle a chunk's services per shard (one summary row
per shard and chunk instead of one per service). It stays Spark's number because checkpoints
written when Spark grouped the shards keep every service's state in that shard
(jobs/state/migrate.py); `tests/spark` checks it against Spark's `hash` itself.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = [
    "SPARK_HASH_SEED",
    "group_shard",
    "shard_of",
    "spark_hash",
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
