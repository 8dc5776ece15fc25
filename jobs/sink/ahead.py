"""A batch's retention work that needs no rows, read and planned before its rows exist.

Fitting the retention to `--retention-size`, measuring the stores and planning the roll-ups
of closed periods (reads from Redis, then decode, merge and encode of the windows rolled up)
depend only on the stores as the batch before left them and on the batch's clock
(jobs/sink/rollup.py `read_retention`). So the job starts them in a thread of the driver
during the stateful step, as soon as one state worker has run all its groups of the batch
(jobs/state/step.py `apply_state`'s `on_idle`): the core it leaves idle while the others
finish takes them (started with the step, they slowed the workers as much as they saved when
the shards were even). Nothing here writes: the batch's transaction (jobs/sink/redis_sink.py
`write_batch`) completes the plan with the rows and writes it, or plans it afresh if what was
read ahead was for another batch or other stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import redis

from jobs.sink.footprint import Fitted, fit_stores
from jobs.sink.rollup import BatchTime, EarlyRetention, read_retention
from tidegauge.core.retention import Retention
from tidegauge.core.store import Keys
from tidegauge.core.window_aggs import MergeEncoded
from tidegauge.core.windows import WindowSpec

__all__ = ["Ahead", "RetentionSettings", "fit", "read_ahead"]


class RetentionSettings(Protocol):
    """What the retention work reads of the sink's settings (`SinkConfig` has it)."""

    @property
    def retention(self) -> Retention | None:
        """The tiers; None keeps every window."""

    @property
    def source(self) -> WindowSpec | None:
        """The spec rolled up into the tiers."""

    @property
    def retention_size(self) -> int | None:
        """`--retention-size` in bytes; None: no budget."""

    @property
    def merge(self) -> MergeEncoded:
        """How the roll-ups' aggregates are merged."""


@dataclass(frozen=True)
class Ahead:
    """What `read_ahead` read and planned for one batch and set of stores."""

    at: BatchTime
    #: The dimensions whose stores were read, sorted.
    dims: tuple[str, ...]
    fitted: Fitted | None
    #: Each store's early plan, by its key prefix (none without a retention).
    early: dict[str, EarlyRetention]

    def serves(self, at: BatchTime | None, dims: Sequence[str]) -> bool:
        """Whether it was read for this batch's time and exactly these stores."""
        return at == self.at and tuple(dims) == self.dims


def fit(
    r: redis.Redis, keys: Keys, config: RetentionSettings, dims: Sequence[str]
) -> Fitted | None:
    """The retention in force over every store the batch writes, with a byte budget; else None."""
    budget, retention = config.retention_size, config.retention
    if budget is None or retention is None or retention.raw_ttl_ms is None:
        return None
    stores = [keys, *(keys.by(dim) for dim in dims)]
    return fit_stores(r, stores, retention, config.source, budget)


def read_ahead(
    r: redis.Redis, keys: Keys, at: BatchTime, config: RetentionSettings, dims: Sequence[str]
) -> Ahead:
    """Fit, measure and plan the roll-ups of the services' store and each dimension's store."""
    dims = sorted(dims)
    fitted = fit(r, keys, config, dims)
    in_force = fitted.retention if fitted is not None else None
    early: dict[str, EarlyRetention] = {}
    if config.retention is not None:
        for store in [keys, *(keys.by(dim) for dim in dims)]:
            early[store.prefix] = read_retention(
                r,
                store,
                config.retention,
                config.source,
                at,
                config.retention_size,
                in_force,
                config.merge,
            )
    return Ahead(at, tuple(dims), fitted, early)
