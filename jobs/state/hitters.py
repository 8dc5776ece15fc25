"""Which dimension values keep a slice of their own: each (service, dimension)'s busiest.

The read tasks copy every event into the slices of its values (jobs/summary/slices.py); here, in
the state shard that holds the service, each batch first counts the events of every value in
the (service, dimension)'s Space-Saving summary (tidegauge/core/dimensions.py), then routes each
slice part: a value among the summary's `values` busiest keeps its slice, any other counts under
`(other)`. The summaries live in the shard's state (so a restart or a replay decides the same)
and are halved once per hour of event time, so the values kept are those of recent traffic.
A value can thus gain or lose its slice between batches: the events before stay where they were
counted, and a service's values (with `(other)`) always add up to the service.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from jobs.state.codec import ShardState, hitter_capacity
from jobs.summary.chunk import ChunkSummary
from jobs.summary.settings import ExecutorConfig
from tidegauge.core.dimensions import OTHER_VALUE, SEP, SpaceSaving, slice_group, split_group

__all__ = ["AGE_MS", "SliceRouter"]

#: Event time after which every summary's counts are halved.
AGE_MS = 3_600_000
#: At most this many halvings at once (a stream back after days starts from nothing anyway).
_MAX_HALVINGS = 16


class SliceRouter:
    """One batch's routing of a shard's slice parts (built before the parts are placed)."""

    def __init__(
        self, shard: ShardState, chunks: Sequence[ChunkSummary], cfg: ExecutorConfig, watermark: int
    ) -> None:
        hour = max(watermark, 0) // AGE_MS
        if shard.hitters and hour > shard.hitters_hour:
            for _ in range(min(hour - shard.hitters_hour, _MAX_HALVINGS)):
                for summary in shard.hitters.values():
                    summary.halve()
            shard.hitters = {k: v for k, v in shard.hitters.items() if v.counts}
        shard.hitters_hour = max(hour, shard.hitters_hour)
        weights: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for chunk in chunks:
            counts = chunk.tables["services"]["count"].tolist()
            for name, n in zip(chunk.names, counts, strict=True):
                parts = split_group(name)
                if parts is not None and parts[2] != OTHER_VALUE:
                    weights[parts[0] + SEP + parts[1]][parts[2]] += int(n)
        capacity = hitter_capacity(cfg)
        self.kept: dict[str, set[str]] = {}
        for store in sorted(weights):
            summary = shard.hitters.setdefault(store, SpaceSaving(capacity))
            # the batch's heaviest values first: one-off values then churn among themselves
            summary.add(dict(sorted(weights[store].items(), key=lambda kv: (-kv[1], kv[0]))))
            self.kept[store] = set(summary.top(cfg.dimension_values))

    def route(self, name: str) -> str:
        """The slice a part of `name` counts under (a service's own name: itself)."""
        parts = split_group(name)
        if parts is None:
            return name
        service, dim, value = parts
        if value in self.kept.get(service + SEP + dim, ()):
            return name
        return slice_group(service, dim, OTHER_VALUE)


def forget_gone(shard: ShardState) -> None:
    """Drop the summaries of services with nothing left in the shard (they start afresh)."""
    for store in list(shard.hitters):
        service = store.split(SEP, 1)[0]
        if service != "*" and service not in shard.services:
            del shard.hitters[store]
