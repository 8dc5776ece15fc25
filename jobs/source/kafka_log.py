"""A Kafka partition's log, fetched and decoded record batch by record batch.

kafka-python's consumer hands out records and hides the batches they came in: it cannot say
which records belong to a transaction, and it relies on the broker's abort index to drop aborted
ones (which not every Kafka-protocol broker sends, see `jobs/source/log_batches.py`). So the source
fetches with the Fetch API itself, through kafka-python's network client (connections, metadata,
leader lookup and, later, TLS/SASL stay kafka-python's), and decodes each batch with
kafka-python's record classes, or, for an uncompressed data batch, with
`jobs/source/record_decode.py`
(the same records, ~4x faster). What that buys:

* the batch attributes: producer id, transactional flag, control batches and their markers;
* a decoding failure pinned to one batch: the codec, the partition and the batch's offset, in a
  `SourceError` whose one-line message says what to install;
* the last stable offset of each partition (where read-committed data ends), from the same
  fetch responses.

Uses kafka-python 3.0's `KafkaConsumer` internals (`_client.cluster` for leaders, `_manager` and
`_net` to send a request on its IO loop) and its protocol classes; the version is pinned in
pyproject.toml, and `tests/integration/test_kafka_source_broker.py` reads real batches through
them, so an upgrade that moves them fails there.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer import FetchRequest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import calc_crc32c

from jobs.source.log_batches import LogBatch, LogRecord, Records, control_type
from jobs.source.record_decode import BATCH_HEAD, CODEC_MASK, CONTROL, TRANSACTIONAL, decode_many
from tidegauge.core.codecs import codec_by_id, missing_library
from tidegauge.core.kafka_options import client_config

__all__ = ["FetchResult", "LogClient", "SourceError", "decode_batches"]

#: Isolation level READ_COMMITTED in the Fetch API: the broker returns data up to the last
#: stable offset only, so the reader never sees the inside of a transaction still open.
_READ_COMMITTED = 1
#: Fetch v4 brought isolation levels and the last stable offset; every broker since Kafka 0.11
#: has it, and Kafka 4 still does.
_FETCH_MIN_VERSION = 4
_FETCH_MAX_VERSION = 11


class SourceError(RuntimeError):
    """The source cannot go on; the message is one line that says why and what to do.

    `tidegauge job` finds this class's name in a failed query's text and prints the message
    alone, not the executor's traceback around it.
    """


@dataclass(frozen=True)
class FetchResult:
    """One partition's answer to one fetch: decoded batches and the partition's end offsets."""

    batches: list[LogBatch]
    high_watermark: int
    last_stable_offset: int


def _decode_one(raw: Any, topic: str, partition: int, fast: Records | None = None) -> LogBatch:
    """A kafka-python batch object as a `LogBatch`, or a `SourceError` naming what failed.

    `fast` is its records as `jobs.source.record_decode` decoded them from the batch's bytes (an
    uncompressed data batch, ~4x faster); anything else is decoded by kafka-python.
    """
    base = raw.base_offset
    magic = raw.magic
    try:
        if magic >= 2 and raw.is_control_batch:
            markers = [control_type(r.key) for r in raw]
            marker = next((m for m in markers if m is not None), None)
            if marker is None:  # a control batch of a kind we do not know: skip its offsets
                return LogBatch(base, raw.next_offset)
            return LogBatch(base, raw.next_offset, raw.producer_id, True, marker)
        records = (
            fast
            if fast is not None
            else [
                LogRecord(
                    r.offset,
                    r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None,
                    r.key,
                    r.value,
                )
                for r in raw
            ]
        )
    except kafka_errors.UnsupportedCodecError as e:
        codec = codec_by_id(raw.compression_type)
        if codec is None:
            why = (
                f"compressed with codec id {raw.compression_type}, which Kafka does not define "
                "(a corrupt batch, or a newer Kafka?)"
            )
        else:
            why = f"compressed with {codec.name}, and {missing_library(codec) or e}"
        raise SourceError(
            f"cannot decode {topic}[{partition}]: the record batch at offset {base} is {why}"
        ) from None
    except kafka_errors.CorruptRecordError as e:
        raise SourceError(
            f"cannot decode {topic}[{partition}]: the record batch at offset {base} is corrupt: {e}"
        ) from None
    codec = codec_by_id(raw.compression_type)
    codec_name = codec.name if codec is not None else str(raw.compression_type)
    if magic >= 2:
        return LogBatch(
            base,
            raw.next_offset,
            raw.producer_id,
            bool(raw.is_transactional),
            None,
            records,
            codec_name,
        )
    # Message formats 0 and 1 (before Kafka 0.11): no producers, no transactions.
    end = records[-1].offset + 1 if records else base + 1
    return LogBatch(base, end, records=records, codec=codec_name)


def decode_batches(
    data: bytes, topic: str, partition: int, check_crc: bool = True
) -> list[LogBatch]:
    """The complete record batches in a fetch response's `records` bytes.

    A batch cut off at the end of the response (fetch size limit) is left out; the next fetch
    starts at it. With `check_crc`, a batch whose CRC does not match is a `SourceError`.

    Batches of message format 2 (every Kafka since 0.11) are framed from their headers here and
    their plain records decoded together (`decode_many`); kafka-python's batch objects cost
    ~30 µs per batch, as much as decoding 30 records, and producers at high rates send batches
    of a few dozen records. Compressed and control batches, records the fast decoder leaves,
    and responses holding an older format go through kafka-python as before.
    """
    frames: list[tuple[int, tuple[Any, ...]]] = []  # (position, v2 header) of each batch
    view = memoryview(data)
    pos, size = 0, len(data)
    while size - pos >= 12:
        end = pos + 12 + int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if end > size:
            break  # cut off by the fetch size limit
        if end - pos < BATCH_HEAD.size or data[pos + 16] != 2:
            return _decode_with_kafka_python(data, topic, partition, check_crc)
        head = BATCH_HEAD.unpack_from(data, pos)
        if check_crc and calc_crc32c(view[pos + 21 : end]) != head[4]:
            raise SourceError(
                f"cannot decode {topic}[{partition}]: the record batch at offset "
                f"{head[0]} fails its CRC check (corrupt on the broker or on the wire)"
            )
        frames.append((pos, head))
        pos = end
    # views, not copies: `decode_many` copies the bodies once, into one buffer
    wires = [view[at : at + 12 + head[1]] for at, head in frames]
    plain = [
        w if not head[5] & (CODEC_MASK | CONTROL) else memoryview(b"")
        for w, (_, head) in zip(wires, frames, strict=True)
    ]
    out = []
    for wire, (_, head), records in zip(wires, frames, decode_many(plain), strict=True):
        base, attrs, last_delta, producer = head[0], head[5], head[6], head[9]
        if records is None:
            out.append(_decode_one(DefaultRecordBatch(wire), topic, partition))
        else:
            transactional = bool(attrs & TRANSACTIONAL)
            out.append(
                LogBatch(base, base + last_delta + 1, producer, transactional, None, records)
            )
    return out


def _decode_with_kafka_python(
    data: bytes, topic: str, partition: int, check_crc: bool
) -> list[LogBatch]:
    """`decode_batches` through kafka-python's batch objects, for responses of older formats."""
    records = MemoryRecords(data)
    raws, wires = [], []
    pos = 0  # where `raw` starts in `data`: batches follow each other, 12 + length bytes each
    raw = records.next_batch()
    while raw is not None:
        if check_crc and not raw.validate_crc():
            raise SourceError(
                f"cannot decode {topic}[{partition}]: the record batch at offset "
                f"{raw.base_offset} fails its CRC check (corrupt on the broker or on the wire)"
            )
        size = 12 + int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        wire = bytes(data[pos : pos + size])
        raws.append(raw)
        # the fast decoder only where the bytes are this batch's (magic 2: the first field
        # of every format is the base offset)
        same = int.from_bytes(wire[:8], "big", signed=True) == raw.base_offset
        wires.append(wire if same else b"")
        pos += size
        raw = records.next_batch()
    fast = decode_many(wires)
    return [_decode_one(r, topic, partition, f) for r, f in zip(raws, fast, strict=True)]


#: Client settings as (kafka-python name, text value) pairs (tidegauge/core/kafka_options.py).
ClientOptions = tuple[tuple[str, str], ...]


class LogClient:
    """Metadata, offsets and batch-level fetches for one topic, on one kafka-python client."""

    def __init__(
        self, bootstrap: str, topic: str, client_id: str, options: ClientOptions = ()
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._consumer = KafkaConsumer(
            **client_config(options, "consumer"),  # TLS, SASL, timeouts: --kafka-option
            bootstrap_servers=bootstrap.split(","),
            enable_auto_commit=False,
            group_id=None,
            client_id=client_id,
            # Its own ListOffsets must answer the high watermark (some brokers answer 0 for
            # read_committed while a transaction is open); fetches set their isolation level.
            isolation_level="read_uncommitted",
        )

    def close(self) -> None:
        """Close the connections."""
        self._consumer.close()

    def partitions(self, timeout_s: float = 30.0) -> list[int]:
        """The topic's partition numbers; waits for a topic still being created."""
        deadline = time.monotonic() + timeout_s
        while True:
            parts = self._consumer.partitions_for_topic(self.topic)
            if parts:
                return sorted(parts)
            if time.monotonic() > deadline:
                raise SourceError(f"topic {self.topic!r} not found on {self.bootstrap}")
            time.sleep(0.5)

    def beginning_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """The first offset still in the log of each partition."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        return {tp.partition: off for tp, off in self._consumer.beginning_offsets(tps).items()}

    def stable_end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """Where committed data ends in each partition now: the last stable offset.

        That is the high watermark unless a transaction is open; then it is the open
        transaction's first offset, and nothing at or after it is read until it ends. Taken from
        a fetch response: ListOffsets(latest) is not exact on every broker (some answer "base
        offset of the last batch + 1"), the fetch response's offsets are. The fetch starts one
        before that answer, so it returns at most the last batch. (A wait of 0 ms made the test
        broker answer without the partition; 10 ms costs nothing when data is there.)
        """
        parts = list(partitions)
        tps = [TopicPartition(self.topic, p) for p in parts]
        listed = {tp.partition: off for tp, off in self._consumer.end_offsets(tps).items()}
        out = {p: max(listed[p], 0) for p in parts if listed[p] <= 0}
        asked = {p: listed[p] - 1 for p in parts if listed[p] > 0}
        if asked:
            answers = self.fetch_many(asked, max_bytes=1024 * 1024, max_wait_ms=10, decode=False)
            out.update({p: r.last_stable_offset for p, r in answers.items()})
        return out

    def _leader(self, partition: int, timeout_s: float) -> Any:
        """The node id of the partition's leader, refreshing metadata until one is known."""
        client = self._consumer._client
        tp = TopicPartition(self.topic, partition)
        deadline = time.monotonic() + timeout_s
        while True:
            leader = client.cluster.leader_for_partition(tp)
            if leader is not None and leader != -1:
                return leader
            if time.monotonic() > deadline:
                raise SourceError(
                    f"{self.topic}[{partition}] has no leader on {self.bootstrap} "
                    f"after {timeout_s:.0f} s"
                )
            self._consumer.partitions_for_topic(self.topic)
            client.cluster.request_update()
            time.sleep(0.2)

    def _request(self, node_id: Any, request: Any, timeout_ms: int) -> Any:
        """Send one request to `node_id` on the consumer's IO loop and wait for the response.

        The consumer runs its network on a thread of its own; requests go through that loop
        (`net.run`), as the consumer's own calls do, never around it.
        """
        manager = self._consumer._manager

        async def send() -> Any:
            return await manager.wait_for(manager.send(request, node_id=node_id), timeout_ms)

        return self._consumer._net.run(send)

    def fetch(
        self,
        partition: int,
        offset: int,
        max_bytes: int = 8 * 1024 * 1024,
        max_wait_ms: int = 500,
        timeout_s: float = 30.0,
        decode: bool = True,
    ) -> FetchResult:
        """The batches from the one holding `offset` on (read committed), up to ~`max_bytes`.

        One partition of `fetch_many`, which says what is retried and what is an error.
        """
        return self.fetch_many({partition: offset}, max_bytes, max_wait_ms, timeout_s, decode)[
            partition
        ]

    def fetch_many(
        self,
        offsets: Mapping[int, int],
        max_bytes: int = 8 * 1024 * 1024,
        max_wait_ms: int = 500,
        timeout_s: float = 30.0,
        decode: bool = True,
    ) -> dict[int, FetchResult]:
        """Several partitions at once: one Fetch request per leader, not one per partition.

        Each partition gets batches from the one holding its offset on (read committed), up to
        ~`max_bytes` (the response as a whole too). One request instead of one per partition is
        what a read task of several partitions spends least on at a low rate (each round trip
        costs milliseconds of waiting, BENCHMARKS.md). Retries while a partition has no leader
        or the leader moves; a partition the broker leaves out of its answer is asked for again;
        an offset the log no longer holds (deleted by retention) is a `SourceError`, never a
        silent jump. With `decode=False` only the offsets are wanted: no batches are decoded
        (the planner asks so, and never needs the codecs).
        """
        deadline = time.monotonic() + timeout_s
        out: dict[int, FetchResult] = {}
        todo = dict(offsets)
        why: dict[int, str] = {}
        while todo:
            by_leader: dict[Any, list[int]] = {}
            for p in sorted(todo):
                leader = self._leader(p, max(0.0, deadline - time.monotonic()))
                by_leader.setdefault(leader, []).append(p)
            retry = False
            for leader, parts in by_leader.items():
                request = self._fetch_request({p: todo[p] for p in parts}, max_bytes, max_wait_ms)
                response = self._request(leader, request, timeout_ms=max_wait_ms + 30_000)
                answers = {
                    pd.partition_index: pd for t in response.responses for pd in t.partitions
                }
                for p in parts:
                    data = answers.get(p)
                    if data is None:  # left out: nothing to say yet, ask again
                        continue
                    result = self._fetch_result(p, todo[p], data, decode)
                    if result is None:
                        retry = True
                        why[p] = f"{kafka_errors.for_code(data.error_code).__name__}, retried"
                        continue
                    out[p] = result
                    del todo[p]
            if todo:
                if time.monotonic() > deadline:
                    first = min(todo)
                    raise SourceError(
                        f"{self.topic}[{first}]: no fetch answer for offset {todo[first]} "
                        f"after {timeout_s:.0f} s ({why.get(first, 'left out of every answer')})"
                    )
                if retry:
                    self._consumer._client.cluster.request_update()
                time.sleep(0.2 if retry else 0.05)
        return out

    def _fetch_request(self, offsets: Mapping[int, int], max_bytes: int, max_wait_ms: int) -> Any:
        return FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=_READ_COMMITTED,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=self.topic,
                    partitions=[
                        FetchRequest.FetchTopic.FetchPartition(
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=off,
                            last_fetched_epoch=-1,
                            partition_max_bytes=max_bytes,
                        )
                        for p, off in sorted(offsets.items())
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
            min_version=_FETCH_MIN_VERSION,
            max_version=_FETCH_MAX_VERSION,
        )

    def _fetch_result(
        self, partition: int, offset: int, data: Any, decode: bool
    ) -> FetchResult | None:
        """One partition's answer, None for a retriable error, `SourceError` for the others."""
        error = kafka_errors.for_code(data.error_code)
        if error is kafka_errors.NoError:
            hw = data.high_watermark
            lso = data.last_stable_offset
            raw = data.records or b""
            return FetchResult(
                decode_batches(raw, self.topic, partition) if decode else [],
                hw,
                lso if lso is not None and lso >= 0 else hw,
            )
        if error is kafka_errors.OffsetOutOfRangeError:
            raise SourceError(
                f"{self.topic}[{partition}]: offset {offset} is out of range on the broker "
                "(deleted by retention?); the checkpoint points at data that no longer "
                "exists: start over with a new --checkpoint"
            )
        if not getattr(error, "retriable", False):
            raise SourceError(
                f"{self.topic}[{partition}]: fetch at offset {offset} failed: {error.__name__}"
            )
        return None
