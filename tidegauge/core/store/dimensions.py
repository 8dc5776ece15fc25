"""Reading the dimensions' stores (`Keys.by`): which dimensions there are, and their values."""

from __future__ import annotations

from typing import Any

import redis

from tidegauge.core.dimensions import SEP
from tidegauge.core.store.keys import Keys, _s

__all__ = ["dimension_values", "read_dimensions"]


def read_dimensions(r: redis.Redis, keys: Keys) -> list[str]:
    """The dimensions the job has written slices of, sorted."""
    members: Any = r.smembers(keys.dimensions)
    return sorted(_s(v) for v in members)


def dimension_values(r: redis.Redis, by: Keys, of: str) -> list[str]:
    """The members (`service SEP value`) of service `of` (or `*`) in a dimension's store."""
    members: Any = r.smembers(by.services)
    prefix = of + SEP
    return sorted(m for m in (_s(v) for v in members) if m.startswith(prefix))
