"""Kafka as a Spark streaming source, written as a Python Data Source with kafka-python.

Spark's own Kafka connector is a JVM package that needs a Maven download; this source needs
nothing beyond the wheels. It behaves like Spark's: offsets are `{"<partition>": next_offset}`
dicts kept in the query checkpoint (so a restart resumes exactly), one Spark partition per Kafka
partition offset range (read in parallel), `startingOffsets` earliest|latest,
`maxRecordsPerTrigger`, and an optional `endingOffsets` at which the stream stops growing (that is
how `--trigger available-now` is made deterministic, see jobs/pipeline.py). It reads like a Kafka
consumer in `read_committed` mode: records of aborted transactions never become rows, and no
range reaches into a transaction still open (jobs/source/log_batches.py); batches in every codec
Kafka defines are decoded (tidegauge/core/codecs.py). With `controlRedis`, `controlKey` and
`controlField` it obeys a pause request (`--scenario backlog`): until the wall clock reaches
that hash field (epoch ms), it reports no new data, so a backlog builds up in Kafka.

Where code runs: `KafkaStreamReader` methods except `read` run on the driver (in Spark's Python
planner process, one long-lived reader per query); `read` runs on executors and must only use
what is pickled into `KafkaPartition`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from jobs.source.log_batches import CommittedRange, Records
from jobs.source.offset_log import Offsets, checkpointed_end

if TYPE_CHECKING:
    from jobs.source.kafka_log import ClientOptions, FetchResult, LogClient

# The Kafka client (jobs/source/kafka_log.py) and Redis are imported where they are used: Spark
# starts several short-lived Python processes that only plan with this module's classes (look the
# source up, create it, plan its reads), and each paid ~1 s of imports for them.

#: Data source options of this prefix are Kafka client settings (`--kafka-option`).
CLIENT_PREFIX = "kafka."

__all__ = [
    "ARROW_SCHEMA",
    "CLIENT_PREFIX",
    "SCHEMA",
    "KafkaDataSource",
    "KafkaPartition",
    "KafkaRanges",
    "KafkaStreamReader",
    "balance_ranges",
    "group_ranges",
    "ranges_of",
    "read_range",
    "read_ranges",
    "split_limit",
    "true_end_offsets",
]

log = logging.getLogger(__name__)

#: Rows of the raw source, like Spark's Kafka source (minus topic/headers).
SCHEMA = "partition int, offset long, timestamp timestamp, key binary, value binary"

#: The same rows as Arrow: what the parser (jobs/parse/parser.py) takes.
ARROW_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)


def split_limit(start: Mapping[str, int], end: Mapping[str, int], limit: int) -> Offsets:
    """Cap a batch at `limit` records in all, shared between partitions by what each has.

    Each partition takes the same fraction of what it has available (largest remainders get
    the records integer division leaves; ties: lower partition number first), as Spark's own
    Kafka source shares `maxOffsetsPerTrigger`. A backlog's partitions hold the same span of
    event time however unevenly keys spread records over them, so taking the same fraction of
    each moves them through event time together: an equal share instead would run the
    emptier partitions ahead, and the watermark they push would make the fuller ones' records
    late. Pure and deterministic, so a test can predict batch boundaries from the same inputs.
    """
    avail = {p: max(0, end[p] - start.get(p, 0)) for p in end}
    out = {p: start.get(p, 0) for p in end}
    total = sum(avail.values())
    if total <= limit:
        return {p: out[p] + avail[p] for p in end}
    takes = {p: limit * avail[p] // total for p in end}
    left = limit - sum(takes.values())
    by_remainder = sorted(end, key=lambda p: (-(limit * avail[p] % total), int(p)))
    for p in by_remainder[:left]:
        takes[p] += 1
    return {p: out[p] + takes[p] for p in end}


def true_end_offsets(bootstrap: str, topic: str, options: ClientOptions = ()) -> Offsets:
    """Where committed data ends in every partition of `topic` now (its last stable offsets).

    What `--trigger available-now` processes and where `startingOffsets=latest` starts.
    `options`: the `--kafka-option`s (tidegauge/core/kafka_options.py).
    """
    from jobs.source.kafka_log import LogClient

    client = LogClient(bootstrap, topic, "tidegauge-planner", options)
    try:
        return _stable_end(client)
    finally:
        client.close()


def _stable_end(client: LogClient) -> Offsets:
    ends = client.stable_end_offsets(client.partitions())
    return {str(p): off for p, off in ends.items()}


#: How long the planner keeps asking a broker that does not answer (a request timed out, the
#: connection lost) for the offsets of the next batch before the query fails: a broker paused
#: or restarted for a while delays the batches, it does not end the job.
BROKER_RETRY_FOR_MS = 300_000

T = TypeVar("T")


def retrying(
    what: str,
    ask: Callable[[], T],
    retry_for_ms: int = BROKER_RETRY_FOR_MS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`ask()`, asked again every second while Kafka's error is retriable, for `retry_for_ms`.

    A retriable error (kafka-python's `retriable`: a timeout, a lost connection, no leader
    yet) is asked again, logged at the first attempt and then every 30 s (as the sink's
    retries are); any other error, or one after the budget, is raised.
    """
    from kafka.errors import KafkaError

    started = clock()
    deadline = started + retry_for_ms / 1000
    attempt, logged = 0, None
    while True:
        try:
            return ask()
        except KafkaError as e:
            if not getattr(e, "retriable", False) or clock() >= deadline:
                raise
            attempt += 1
            if logged is None or clock() - logged >= 30:
                logged = clock()
                log.warning(
                    "the broker did not answer %s (%s): asking again every second (attempt %d, "
                    "%.0f s so far)",
                    what,
                    e,
                    attempt,
                    logged - started,
                )
            sleep(1.0)


class KafkaPartition(InputPartition):
    """One Kafka partition's offset range [start, end) for one micro-batch (picklable)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
        poll_timeout_ms: int = 30_000,
        options: ClientOptions = (),
    ) -> None:
        super().__init__(value=(partition, start, end))
        self.bootstrap = bootstrap
        self.topic = topic
        self.options = options  # the client settings (TLS, SASL): never printed
        self.partition = partition
        self.start = start
        self.end = end
        self.poll_timeout_ms = poll_timeout_ms


class KafkaRanges(InputPartition):
    """Offset ranges of several Kafka partitions, read one after another by one task."""

    def __init__(self, ranges: list[KafkaPartition]) -> None:
        super().__init__(value=[r.value for r in ranges])
        self.ranges = ranges


def group_ranges(ranges: list[KafkaPartition], min_records: int) -> list[InputPartition]:
    """Consecutive ranges joined into tasks of at least `min_records` records (pure).

    A task costs a Python round trip or two whatever it reads, and two cores run three tasks in
    two waves: at low rates one task reading every partition's few records beats one task per
    partition; at high rates each task still gets a partition or more. Ranges are taken in
    order, a task closes once it holds `min_records`, and a short remainder joins the last task.
    Deterministic, so a replayed batch reads the same tasks.
    """
    groups: list[list[KafkaPartition]] = []
    size = 0
    for r in ranges:
        if not groups or size >= min_records:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += r.end - r.start
    if len(groups) > 1 and size < min_records:
        groups[-2].extend(groups.pop())
    return [g[0] if len(g) == 1 else KafkaRanges(g) for g in groups]


def balance_ranges(
    ranges: list[KafkaPartition], min_records: int, max_tasks: int
) -> list[InputPartition]:
    """The ranges cut into equal tasks: as many as fit `min_records` each, at most `max_tasks`.

    `group_ranges` keeps each partition's range whole, so a batch of three partitions on two
    cores runs its read tasks in two waves, one core idle in the second (a third of the read
    stage at high rates, measured). Here the batch's records are shared out in offset order,
    a partition's range cut where a task is full: with `max_tasks` = the cores, one wave of equal
    tasks. A cut inside a transaction is safe: each side reads on to the transaction's marker
    (jobs/source/log_batches.py). Pure and deterministic, so a replayed batch reads the same tasks.
    """
    total = sum(r.end - r.start for r in ranges)
    k = max(1, min(max_tasks, total // max(min_records, 1)))
    share = -(-total // k)
    tasks: list[list[KafkaPartition]] = [[]]
    room = share
    for r in ranges:
        start = r.start
        while start < r.end:
            if room == 0:
                tasks.append([])
                room = share
            take = min(r.end - start, room)
            tasks[-1].append(
                KafkaPartition(
                    r.bootstrap,
                    r.topic,
                    r.partition,
                    start,
                    start + take,
                    r.poll_timeout_ms,
                    r.options,
                )
            )
            start += take
            room -= take
    return [t[0] if len(t) == 1 else KafkaRanges(t) for t in tasks if t]


def ranges_of(partition: InputPartition) -> list[KafkaPartition]:
    """The offset ranges one input partition (a task) reads, in order."""
    if isinstance(partition, KafkaRanges):
        return partition.ranges
    assert isinstance(partition, KafkaPartition)
    return [partition]


def read_range(part: KafkaPartition, chunk: int = 20_000) -> Iterator[pa.RecordBatch]:
    """Executor side: the committed records of [start, end) of one partition, as Arrow batches.

    `read_ranges` of one range.
    """
    return read_ranges([part], chunk)


class _Cursor:
    """Where reading one range stands, and its rows not yet handed out."""

    def __init__(self, part: KafkaPartition) -> None:
        self.part = part
        self.committed = CommittedRange(part.start, part.end)
        self.pos = part.start
        self.quiet_since = time.monotonic()
        self.runs: list[Records] = []  # rows not yet handed out, `held` in all
        self.held = 0
        self.ready: list[pa.RecordBatch] = []

    def done(self) -> bool:
        return self.committed.complete(self.pos)

    def take(self, result: FetchResult, chunk: int) -> None:
        """Feed one fetch answer; the range's rows go to `ready` whenever `chunk` are held."""
        part = self.part
        for batch in result.batches:
            if batch.next_offset <= self.pos:
                continue  # the batch holding `pos` may start before it
            run: Records | None = self.committed.feed(batch)
            while run:
                room = chunk - self.held
                piece, run = (run, None) if len(run) <= room else (run[:room], run[room:])
                self.runs.append(piece)
                self.held += len(piece)
                if self.held >= chunk:
                    self.ready.append(self.flush())
            self.pos = batch.next_offset
            self.quiet_since = time.monotonic()
        if not result.batches and time.monotonic() - self.quiet_since > part.poll_timeout_ms / 1000:
            what = (
                f"offsets {self.pos}..{part.end} not readable"
                if self.pos < part.end
                else f"transactions of producers {sorted(self.committed.waiting)} not ended "
                f"at offset {self.pos}"
            )
            from jobs.source.kafka_log import SourceError

            raise SourceError(
                f"{part.topic}[{part.partition}]: {what} after {part.poll_timeout_ms} ms "
                f"(last stable offset {result.last_stable_offset}; deleted by retention, "
                "or broker down?)"
            )

    def flush(self) -> pa.RecordBatch:
        rows = Records.joined(self.runs)
        self.runs, self.held = [], 0
        n = len(rows)
        ms = rows.timestamps_ms
        known = ms >= 0
        micros = pa.array(ms * 1000, pa.int64(), mask=None if known.all() else ~known)
        arrays = [
            pa.array(np.full(n, self.part.partition, dtype=np.int32)),
            pa.array(rows.offsets, pa.int64()),
            micros.cast(ARROW_SCHEMA.field("timestamp").type),
            rows.keys,
            rows.values,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _in_order(cursors: list[_Cursor], shown: int) -> Generator[pa.RecordBatch, None, int]:
    """Hand out ready rows in the order of the ranges; returns how many cursors are finished.

    Never in the order fetches happen to answer: a task's batches are the same on every replay.
    """
    while shown < len(cursors):
        c = cursors[shown]
        yield from c.ready
        c.ready = []
        if not c.done():
            break
        if c.held:
            yield c.flush()
        shown += 1
    return shown


def read_ranges(parts: list[KafkaPartition], chunk: int = 20_000) -> Iterator[pa.RecordBatch]:
    """Executor side: the committed records of several ranges, as Arrow batches.

    Every round fetches all unfinished ranges in one request (`LogClient.fetch_many`), one
    range per partition at a time. Reads batch by batch (`jobs/source/kafka_log.py`) and lets
    `CommittedRange` decide which records count: records of aborted transactions never do, and
    reading goes on past a range's end until every transaction with records in it has ended.
    Transaction markers take offsets but are never rows. Batches hold one range's rows each,
    `chunk` at most, and come in the order of `parts`. A range the broker does not
    serve within the poll timeout is an error, as is a batch that cannot be decoded
    (`SourceError`, one line: codec, partition, offset, remedy). All ranges share one topic.

    The next round's fetch is asked for before a round's rows are handed out: the broker
    answers and the response is received and decoded (in a thread of this worker) while the
    caller parses those rows, instead of after. Which offsets a round asks for depends only on
    the rounds before it, so the rows are the same.
    """
    if not parts:
        return
    first = parts[0]
    key = (first.bootstrap, first.topic, first.options)
    client = _reader_client(*key)
    cursors = [_Cursor(p) for p in parts]
    shown = 0  # cursors before this one have handed out all their rows
    ahead: Future[dict[int, FetchResult]] | None = None  # the next round's fetch
    ok = False
    try:
        active = _next_round(cursors)
        while active:
            if ahead is None:
                results = client.fetch_many({p: c.pos for p, c in active.items()})
            else:
                results, ahead = ahead.result(), None
            for p, c in active.items():
                c.take(results[p], chunk)
            active = _next_round(cursors)  # handing out rows moves no cursor
            if active:
                ahead = _fetcher().submit(client.fetch_many, {p: c.pos for p, c in active.items()})
            shown = yield from _in_order(cursors, shown)
        yield from _in_order(cursors, shown)
        ok = True
    finally:
        if not ok:  # a failed or abandoned read may leave a half-read response: start afresh
            _drop_reader_client(*key, once_done=ahead)


def _next_round(cursors: list[_Cursor]) -> dict[int, _Cursor]:
    """Partition -> the first unfinished range of each partition: what the next fetch reads."""
    active: dict[int, _Cursor] = {}
    for c in cursors:
        if not c.done() and c.part.partition not in active:
            active[c.part.partition] = c
    return active


#: Executor side: the thread that fetches a read's next round while its rows are parsed (one per
#: Python worker, made on first use: a worker forked from the zygote has no threads of its own).
_FETCHER: ThreadPoolExecutor | None = None


def _fetcher() -> ThreadPoolExecutor:
    global _FETCHER
    if _FETCHER is None:
        _FETCHER = ThreadPoolExecutor(1, thread_name_prefix="tidegauge-fetch")
    return _FETCHER


#: Executor side: one client per (bootstrap, topic, options) and Python worker, kept across
#: tasks and micro-batches (Spark reuses its Python workers): connecting and fetching metadata
#: cost 20-130 ms, paid once per worker instead of once per partition and batch.
_READERS: dict[tuple[str, str, ClientOptions], LogClient] = {}


def _reader_client(bootstrap: str, topic: str, options: ClientOptions = ()) -> LogClient:
    client = _READERS.get((bootstrap, topic, options))
    if client is None:
        from jobs.source.kafka_log import LogClient

        client = _READERS[(bootstrap, topic, options)] = LogClient(
            bootstrap, topic, f"tidegauge-read-{os.getpid()}", options
        )
    return client


def _drop_reader_client(
    bootstrap: str,
    topic: str,
    options: ClientOptions = (),
    once_done: Future[Any] | None = None,
) -> None:
    """Forget the worker's client and close it (once `once_done`, a fetch of its, has ended)."""
    client = _READERS.pop((bootstrap, topic, options), None)
    if client is None:
        return
    if once_done is None:
        client.close()
    else:
        once_done.add_done_callback(lambda _: client.close())


class KafkaStreamReader(DataSourceStreamReader):
    """Driver-side planner: decides each micro-batch's offset range."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.topic = options["topic"]
        # `kafka.KEY` options: client settings (one Spark option each, so Spark's redaction
        # of secret-looking option names hides passwords in plans and the UI)
        self.client_options: ClientOptions = tuple(
            sorted(
                (k[len(CLIENT_PREFIX) :], v)
                for k, v in options.items()
                if k.startswith(CLIENT_PREFIX)
            )
        )
        self.starting = options.get("startingOffsets", "earliest")
        limit = options.get("maxRecordsPerTrigger")
        self.limit = int(limit) if limit else None
        ending = options.get("endingOffsets")
        self.ending: Offsets | None = json.loads(ending) if ending else None
        self.poll_timeout_ms = int(options.get("pollTimeoutMs", "30000"))
        self.checkpoint = options.get("checkpoint")
        min_task = options.get("minRecordsPerTask")
        self.min_task_records = int(min_task) if min_task else None
        max_tasks = options.get("maxTasks")
        self.max_tasks = int(max_tasks) if max_tasks else None
        self._log: LogClient | None = None
        self._pos: Offsets | None = None
        self._initial: Offsets | None = None
        self.control_url = options.get("controlRedis")
        self.control_key = options.get("controlKey")
        self.control_field = options.get("controlField")
        self._redis: Any = None

    def _client(self) -> LogClient:
        if self._log is None:
            from jobs.source.kafka_log import LogClient

            self._log = LogClient(
                self.bootstrap, self.topic, "tidegauge-planner", self.client_options
            )
        return self._log

    def _true_end(self) -> Offsets:
        return retrying("for the latest offsets", lambda: _stable_end(self._client()))

    def initialOffset(self) -> dict:
        """Where a new query starts: every partition's earliest or true latest offset."""
        if self._initial is None:
            if self.starting == "latest":
                self._initial = self._true_end()
            else:
                client = self._client()
                begin = retrying(
                    "for the earliest offsets",
                    lambda: client.beginning_offsets(client.partitions()),
                )
                self._initial = {str(p): off for p, off in begin.items()}
        return dict(self._initial)

    def paused_until(self) -> int | None:
        """Epoch ms until which a pause was requested through Redis, if it is still ahead."""
        if not (self.control_url and self.control_key and self.control_field):
            return None
        try:
            # the store's own modules stay out of the planner process: importing them made a
            # fresh job's first `latestOffset` 0.25-0.4 s slower than redis-py alone does
            if self._redis is None:
                import redis

                self._redis = redis.Redis.from_url(self.control_url, socket_timeout=2)
            raw = self._redis.hget(self.control_key, self.control_field)
        except Exception as e:  # control is best effort: never stop the stream for it
            log.warning("cannot read the pause request from Redis: %s", e)
            return None
        until = int(raw) if raw else 0
        return until if until > time.time() * 1000 else None

    def latestOffset(self) -> dict:
        """The end of the next batch: the true end, capped by endingOffsets and the rate limit.

        While a pause is requested, the end is where the last batch ended: no new data.
        """
        end = self._true_end()
        if self.ending is not None:
            end = {p: min(v, self.ending.get(p, v)) for p, v in end.items()}
        if self._pos is None:
            self._pos = checkpointed_end(self.checkpoint) or self.initialOffset()
        base = {p: self._pos.get(p, 0) for p in end}
        if self.paused_until() is not None:
            return base
        end = {p: max(v, base[p]) for p, v in end.items()}
        if self.limit is not None:
            end = split_limit(base, end, self.limit)
        return end

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One input partition per Kafka partition that has records in [start, end).

        With `minRecordsPerTask`, small ranges share a task (`group_ranges`); with `maxTasks`
        too, the batch is cut into that many equal tasks at most (`balance_ranges`).
        """
        self._pos = {p: int(v) for p, v in end.items()}
        ranges: list[KafkaPartition] = [
            KafkaPartition(
                self.bootstrap,
                self.topic,
                int(p),
                int(start.get(p, 0)),
                int(e),
                self.poll_timeout_ms,
                self.client_options,
            )
            for p, e in sorted(end.items(), key=lambda kv: int(kv[0]))
            if int(e) > int(start.get(p, 0))
        ]
        if self.min_task_records and self.max_tasks:
            return balance_ranges(ranges, self.min_task_records, self.max_tasks)
        if self.min_task_records:
            return group_ranges(ranges, self.min_task_records)
        return list(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the records of one partition range, or of several one after another."""
        return read_ranges(ranges_of(partition))

    def commit(self, end: dict) -> None:
        """Spark finished everything up to `end`; remember it as the base for the next batch."""
        if self._pos is None:
            self._pos = {p: int(v) for p, v in end.items()}

    def stop(self) -> None:
        """Close the planner's consumer."""
        if self._log is not None:
            self._log.close()
            self._log = None


class KafkaDataSource(DataSource):
    """`spark.readStream.format("tidegauge-kafka").option("bootstrap", ...).option("topic", ...)`.

    Options: bootstrap, topic, startingOffsets (earliest|latest), maxRecordsPerTrigger,
    minRecordsPerTask (small ranges share a task, see `group_ranges`), maxTasks (with it,
    ranges are cut into at most that many equal tasks, see `balance_ranges`),
    endingOffsets (JSON offsets dict), pollTimeoutMs, checkpoint (the query's checkpoint dir),
    controlRedis, controlKey and controlField (where pause requests are read, see
    `paused_until`),
    `kafka.KEY` (a kafka-python client setting such as `kafka.security_protocol`).
    """

    @classmethod
    def name(cls) -> str:
        """Format name used with `spark.readStream.format`."""
        return "tidegauge-kafka"

    def schema(self) -> str:
        """Raw record schema; parsing into events happens downstream (jobs/parse/parser.py)."""
        return SCHEMA

    #: Options a query must give this source, and the planner class it gets.
    required_options: tuple[str, ...] = ("bootstrap", "topic")
    reader_class: type[KafkaStreamReader] = KafkaStreamReader

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The planner for one query; a clear error for a missing required option."""
        for required in self.required_options:
            if not self.options.get(required):
                raise ValueError(f"{self.name()} source needs option {required!r}")
        return self.reader_class(self.options)
