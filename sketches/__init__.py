"""Mergeable sketches for Tidegauge: small value objects that run on executors and driver alike.

Every sketch shares the verbs ``update``, ``merge``, ``copy``, ``to_bytes``/``from_bytes`` and
refuses to merge with incompatible parameters (see docs/sketches.md). Also here, as the lowest
floor every layer may use: the TG64 id hash (``sketches.tg64``) and the declaration of every
stored binary format (``sketches.preamble``).
"""

from sketches.hll import DEFAULT_P, HyperLogLog
from sketches.tdigest import TDigest
from sketches.tg64 import datasketch_hashfunc, hash32

__all__ = ["DEFAULT_P", "HyperLogLog", "TDigest", "datasketch_hashfunc", "hash32"]
