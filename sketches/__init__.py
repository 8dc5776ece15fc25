"""Mergeable sketches for Tidegauge: small value objects that run on executors and driver alike.

Every sketch shares the verbs ``update``, ``merge``, ``copy``, ``to_bytes``/``from_bytes`` and
refuses to merge with incompatible parameters (see docs/sketches.md).
"""

from sketches.hll import DEFAULT_P, HyperLogLog, datasketch_hashfunc, hash32
from sketches.tdigest import TDigest

__all__ = ["DEFAULT_P", "HyperLogLog", "TDigest", "datasketch_hashfunc", "hash32"]
