"""Mergeable sketches for Tidegauge: small value objects that run on executors and driver alike.

Every sketch shares the verbs ``update``, ``merge``, ``copy``, ``to_bytes``/``from_bytes`` and
refuses to merge with incompatible parameters (see docs/sketches.md).
"""

from sketches.tdigest import TDigest

__all__ = ["TDigest"]
