"""Kafka records parsed into events inside the read task: the source `tidegauge job` reads.

`tidegauge-kafka` (jobs/source/kafka_source.py) yields raw records; parsing them in a `mapInArrow`
after it costs every read task a second Python round trip, and every record a trip JVM -> Arrow
-> Python and back before anything is computed (BENCHMARKS.md: ~80 ms per task at low rates, a
third of the read path's throughput at high ones). `tidegauge-events` is the same source, same
offsets, options and checkpoint, whose `read` hands each Arrow chunk of raw records (one Kafka
partition's, at most `CHUNK` records) straight to the parser (jobs/parse/parser.py) and yields
parsed rows: one Python step from the broker to typed rows. The parse is exactly the `mapInArrow`
one, chunk by chunk, so clock-skew estimates (per device, per chunk of one partition) are unchanged.

Options besides the Kafka source's: `correctClockSkew` (true|false), and `plugins`,
`metricNames`, `fieldNames` (JSON lists: the driver's plugin modules and the registry they gave,
which each executor loads and checks, see tidegauge/core/plugins.py).

`tidegauge-summaries` is the source the job reads: the same again, whose read task goes one
step further and summarises each parsed chunk per service against the batch's watermark
(jobs/summary/summarise.py), so one row per state shard and chunk leaves the task instead of one
per record. The planner reads each batch's watermark and timestamp from the query's offset log
(jobs/source/offset_log.py) and hands them to the tasks with their ranges. Its options add the
window settings: `windows` (JSON list of window spec keys), `allowedLatenessMs`, `lateEventsMax`,
`dedup`, and `stateShards` (the job's `--state-shards`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from jobs.source.kafka_source import KafkaDataSource, KafkaStreamReader, ranges_of, read_ranges
from jobs.source.offset_log import BatchClock, batch_clock
from jobs.summary.schema import SUMMARY_SCHEMA
from jobs.summary.settings import ExecutorConfig
from jobs.summary.slots import slots_for
from tidegauge.core.dimensions import (
    DEFAULT_VALUES,
    Dimension,
    parse_dimensions,
    register_dimension_fields,
)
from tidegauge.core.events import event_fields
from tidegauge.core.plugins import ensure_plugins, load_plugins, loaded_plugins
from tidegauge.core.registry import metrics
from tidegauge.core.windows import WindowSpec

if TYPE_CHECKING:
    from tidegauge.catalog.join import CatalogJoin
    from tidegauge.catalog.topic import CatalogFollower

# The parser and the summaries (pandas and all) are imported in the read tasks that use them:
# Spark starts several short-lived Python processes that only plan with these classes, and
# each of them paid ~1 s of imports (BENCHMARKS.md, "Job start").

__all__ = [
    "CHUNK",
    "SUMMARY_RECORDS",
    "EventDataSource",
    "EventStreamReader",
    "SummaryDataSource",
    "SummaryStreamReader",
    "event_source_options",
    "summary_source_options",
]

#: Records per Arrow chunk handed to the parser: Spark's default Arrow batch size
#: (`spark.sql.execution.arrow.maxRecordsPerBatch`), which is what `mapInArrow` saw.
CHUNK = 10_000

#: Parsed records a read task summarises at once (several chunks, several partitions).
SUMMARY_RECORDS = 100_000


def event_source_options(
    correct_clock_skew: bool,
    record_format: str | None = None,
    dimensions: tuple[Dimension, ...] = (),
) -> dict[str, str]:
    """The options that make executors parse with this process's contract (plugins included).

    `record_format` (`RecordFormat.to_json`): what the records are, when not the contract's
    own JSON (access logs, OTLP spans; tidegauge/core/formats.py).
    """
    return {
        **({"recordFormat": record_format} if record_format is not None else {}),
        "correctClockSkew": "true" if correct_clock_skew else "false",
        "plugins": json.dumps(list(loaded_plugins())),
        "metricNames": json.dumps([m.name for m in metrics()]),
        "fieldNames": json.dumps([f.name for f in event_fields()]),
        # (after the plugins' fields: executors register them after loading the plugins)
        "dimensions": json.dumps([d.name for d in dimensions]),
    }


class EventStreamReader(KafkaStreamReader):
    """The Kafka planner, whose read task also parses (executor side)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.correct_clock_skew = options.get("correctClockSkew", "false") == "true"
        self.record_format = options.get("recordFormat")
        self.plugins = tuple(json.loads(options.get("plugins", "[]")))
        self.metric_names = tuple(json.loads(options.get("metricNames", "null")) or ())
        self.field_names = tuple(json.loads(options.get("fieldNames", "null")) or ())
        self.dimensions = parse_dimensions(json.loads(options.get("dimensions", "[]")))

    def _parser(self) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        from jobs.parse.parser import make_parser

        if self.dimensions:
            load_plugins(self.plugins)
            register_dimension_fields(self.dimensions)
        if self.metric_names or self.field_names:
            ensure_plugins(self.plugins, self.metric_names, self.field_names)
        return make_parser(self.correct_clock_skew, record_format=self.record_format)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the parsed records of one range, or of several one after another."""
        parse = self._parser()
        yield from parse(read_ranges(ranges_of(partition), chunk=CHUNK))


def summary_source_options(
    correct_clock_skew: bool,
    specs: tuple[WindowSpec, ...],
    allowed_lateness_ms: int,
    late_events_max: int,
    dedup: bool = True,
    shards: int = 1,
    max_services: int = 0,
    record_format: str | None = None,
    dimensions: tuple[Dimension, ...] = (),
    dimension_values: int = DEFAULT_VALUES,
    catalog_topic: str | None = None,
) -> dict[str, str]:
    """`event_source_options` plus the window settings the read tasks summarise with.

    And the number of state shards they bundle services by (jobs/summary/shards.py), the
    job's `--max-services`, which the planner shares out among them (jobs/summary/slots.py),
    and the catalog topic joined to the events (`--catalog`, jobs/summary/catalog.py).
    """
    return {
        **({"catalogTopic": catalog_topic} if catalog_topic else {}),
        **event_source_options(correct_clock_skew, record_format, dimensions),
        "dimensionValues": str(dimension_values),
        "windows": json.dumps([s.key for s in specs]),
        "allowedLatenessMs": str(allowed_lateness_ms),
        "lateEventsMax": str(late_events_max),
        "dedup": "true" if dedup else "false",
        "stateShards": str(shards),
        "maxServices": str(max_services),
    }


def _summary(
    parsed: list[pa.RecordBatch], clock: BatchClock, cfg: ExecutorConfig
) -> pa.RecordBatch:
    from jobs.summary.summarise import summarise, summary_batch

    rows = pa.Table.from_batches(parsed).to_pandas()
    return summary_batch(summarise(rows, clock.watermark_ms, clock.timestamp_ms, cfg))


class ClockedPartition(InputPartition):
    """A task's offset ranges, its batch's clock, slots and catalog join (picklable)."""

    def __init__(
        self,
        ranges: InputPartition,
        clock: BatchClock,
        slots: tuple[int, ...] = (),
        catalog: CatalogJoin | None = None,
    ) -> None:
        super().__init__(value=(ranges.value, clock.batch_id))
        self.ranges = ranges
        self.clock = clock
        self.slots = slots
        self.catalog = catalog


class SummaryStreamReader(EventStreamReader):
    """The Kafka planner, whose read task parses and summarises (executor side)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.specs = tuple(WindowSpec.from_key(k) for k in json.loads(options["windows"]))
        self.allowed_lateness_ms = int(options.get("allowedLatenessMs", "0"))
        self.late_events_max = int(options.get("lateEventsMax", "1000"))
        self.dedup = options.get("dedup", "true") == "true"
        self.shards = int(options.get("stateShards", "1"))
        self.max_services = int(options.get("maxServices", "0"))
        self.dimension_values = int(options.get("dimensionValues", str(DEFAULT_VALUES)))
        self.catalog_topic = options.get("catalogTopic")
        self._catalog: CatalogFollower | None = None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The Kafka source's tasks, each told the batch's watermark, timestamp and slots.

        With `--catalog`, each also gets the batch's catalog join (jobs/summary/catalog.py).
        """
        parts = super().partitions(start, end)
        if not parts:
            return parts
        clock = batch_clock(self.checkpoint, end)
        slots = (
            slots_for(self.checkpoint, clock.batch_id, self.max_services, self.shards)
            if self.max_services
            else ()
        )
        catalog = None
        if self.catalog_topic:
            from jobs.summary.catalog import join_for_batch

            catalog = join_for_batch(
                self.checkpoint, clock.batch_id, clock.watermark_ms, self.specs, self._follower()
            )
        return [ClockedPartition(p, clock, slots, catalog) for p in parts]

    def _follower(self) -> CatalogFollower:
        if self._catalog is None:
            from tidegauge.catalog.topic import CatalogFollower
            from tidegauge.core.config import KafkaSettings

            kafka = KafkaSettings(self.bootstrap, self.catalog_topic or "", self.client_options)
            self._catalog = CatalogFollower(kafka)
        return self._catalog

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the task's parsed records summarised (jobs/summary/summarise.py).

        Parsed chunk by chunk (`CHUNK`), summarised `SUMMARY_RECORDS` at a time: the fewer the
        summaries, the fewer partial aggregates to ship and merge, which counts when there are
        many services with few events each (BENCHMARKS.md, cost curves).
        """
        assert isinstance(partition, ClockedPartition)
        parse = self._parser()
        cfg = ExecutorConfig(
            self.specs,
            self.allowed_lateness_ms,
            self.late_events_max,
            shards=self.shards,
            dedup=self.dedup,
            max_services=self.max_services,
            slots=partition.slots,
            dimensions=self.dimensions,
            dimension_values=self.dimension_values,
            catalog=partition.catalog,
        )
        clock = partition.clock
        pending: list[pa.RecordBatch] = []
        held = 0
        for parsed in parse(read_ranges(ranges_of(partition.ranges), chunk=CHUNK)):
            pending.append(parsed)
            held += parsed.num_rows
            if held >= SUMMARY_RECORDS:
                yield _summary(pending, clock, cfg)
                pending, held = [], 0
        if pending:
            yield _summary(pending, clock, cfg)


class EventDataSource(KafkaDataSource):
    """`spark.readStream.format("tidegauge-events")`: Kafka records as parsed event rows."""

    @classmethod
    def name(cls) -> str:
        """Format name used with `spark.readStream.format`."""
        return "tidegauge-events"

    def schema(self) -> str:
        """The parsed rows' schema of the contract with the driver's plugins.

        (Spark asks in a planner process of its own, which loads the plugins named here; the
        job passes the schema itself anyway.)
        """
        from jobs.parse.parser import parsed_schema

        load_plugins(json.loads(self.options.get("plugins", "[]")))
        return parsed_schema()[0]

    reader_class = EventStreamReader


class SummaryDataSource(EventDataSource):
    """`spark.readStream.format("tidegauge-summaries")`: what `tidegauge job` reads."""

    @classmethod
    def name(cls) -> str:
        """Format name used with `spark.readStream.format`."""
        return "tidegauge-summaries"

    def schema(self) -> str:
        """Summary rows (jobs/summary/summarise.py), whatever the plugins."""
        return SUMMARY_SCHEMA

    required_options = ("bootstrap", "topic", "windows")
    reader_class = SummaryStreamReader
