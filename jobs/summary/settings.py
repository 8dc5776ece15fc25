"""The settings every executor step shares: window specs, lateness, de-duplication, caps."""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.summary.slots import even
from tidegauge.catalog.join import CatalogJoin
from tidegauge.core.dimensions import DEFAULT_VALUES, Dimension
from tidegauge.core.events import EventField, event_fields
from tidegauge.core.registry import metrics
from tidegauge.core.windows import WindowSpec, primary_size

__all__ = ["ExecutorConfig"]


def _metric_names() -> tuple[str, ...]:
    return tuple(m.name for m in metrics())


@dataclass(frozen=True)
class ExecutorConfig:
    """What the executors need of the job's configuration: read tasks and the state function.

    Built on the driver from `JobConfig`, pickled to every task with its closure.
    """

    specs: tuple[WindowSpec, ...]
    allowed_lateness_ms: int = 0
    #: Late events kept: the newest this many (jobs/summary/late_events.py).
    late_events_max: int = 1_000
    #: Event groups; fixed for a checkpoint (services are hashed onto shards).
    shards: int = 1
    #: Plugin modules of the driver when the query was built, and the metric and event field
    #: names they give: executors load the same plugins and check they got the same registry.
    plugins: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = field(default_factory=_metric_names)
    fields: tuple[EventField, ...] = field(default_factory=event_fields)
    #: De-duplicate events by id (jobs/panes/dedup.py); `--no-dedup` turns it off.
    dedup: bool = True
    #: Services tracked at once by the whole job (0: no limit); each shard takes its share.
    max_services: int = 0
    #: Read tasks: each shard's quota of `max_services` in this batch (jobs/summary/slots.py);
    #: () when there is no limit.
    slots: tuple[int, ...] = ()
    #: How long (event time, by the watermark) a tracked name without events keeps its slot.
    service_idle_ms: int = 3_600_000
    #: `--dimension`s: the slices each event is also counted in (tidegauge/core/dimensions.py).
    dimensions: tuple[Dimension, ...] = ()
    #: Values with a slice of their own per (service, dimension); the rest are `(other)`.
    dimension_values: int = DEFAULT_VALUES
    #: Read tasks: the batch's catalog, joined to each event as of its time (`--catalog`).
    catalog: CatalogJoin | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.allowed_lateness_ms < 0:
            raise ValueError("allowed lateness must be >= 0")
        if self.shards < 1:
            raise ValueError("shards must be >= 1")
        if self.late_events_max < 0:
            raise ValueError("late_events_max must be >= 0")
        if self.max_services < 0:
            raise ValueError("max_services must be >= 0")
        if self.dimension_values < 1:
            raise ValueError("dimension_values must be >= 1")

    def shard_slots(self, shard: int) -> int | None:
        """Shard `shard`'s quota of names in this batch (None: no limit; jobs/summary/slots.py).

        The read tasks' quotas when they have them, else `max_services` split evenly.
        """
        if not self.max_services:
            return None
        if self.slots:
            return self.slots[shard]
        return even(self.max_services, self.shards)[shard]

    @property
    def primary_ms(self) -> int:
        """Window size of the per-event views (`tidegauge.core.windows.primary_size`)."""
        return primary_size(self.specs)
