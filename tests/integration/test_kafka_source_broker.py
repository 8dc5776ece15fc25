"""The Kafka source (jobs/source/kafka_source.py) against the real Kafka-protocol broker (Tansu).

Records are produced in multi-record batches on purpose (linger_ms, large batch_size): that is
when the broker's ListOffsets(latest) answers "base offset of the last batch + 1", short of the
truth (docs/architecture.md, "Stable end offsets"). Each test checks that its batches really
were multi-record, so none passes by luck of batch sizes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from jobs.source.kafka_log import LogClient
from jobs.source.kafka_source import (
    KafkaPartition,
    KafkaStreamReader,
    read_range,
    read_ranges,
    true_end_offsets,
)
from tidegauge.core.config import KafkaSettings

T0 = 1_800_000_000_000  # record timestamps (epoch ms)

Record = tuple[int, int, bytes | None, bytes | None, int]  # partition, offset, key, value, ts ms

SOURCE_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)


class Topic:
    """A fresh topic plus the records produced to it so far, by partition, in offset order."""

    def __init__(self, kafka: KafkaSettings, partitions: int) -> None:
        self.kafka = kafka
        self.partitions = partitions
        self.records: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        self._seq = 0

    @property
    def tps(self) -> list[TopicPartition]:
        return [TopicPartition(self.kafka.topic, p) for p in range(self.partitions)]

    def counts(self) -> dict[int, int]:
        return {p: len(rs) for p, rs in self.records.items()}

    def produce(self, per_partition: dict[int, int]) -> None:
        """Send records round-robin over the partitions, batched by the producer, then flush."""
        producer = KafkaProducer(
            bootstrap_servers=self.kafka.bootstrap, linger_ms=50, batch_size=1 << 20, acks=1
        )
        try:
            left = dict(per_partition)
            futures = []
            while any(left.values()):
                for p in sorted(left):
                    if not left[p]:
                        continue
                    left[p] -= 1
                    i = self._seq
                    self._seq += 1
                    key = None if i % 11 == 0 else f"k{p}-{i}".encode()
                    tombstone = i % 997 == 5 and key is not None  # Kafka needs key or value
                    value = None if tombstone else json.dumps({"i": i, "p": p}).encode()
                    ts = T0 + i
                    fut = producer.send(
                        self.kafka.topic, key=key, value=value, partition=p, timestamp_ms=ts
                    )
                    futures.append((p, key, value, ts, fut))
            producer.flush()
            for p, key, value, ts, fut in futures:
                meta = fut.get(timeout=10)
                self.records[p].append((p, meta.offset, key, value, ts))
        finally:
            producer.close()
        for p, rs in self.records.items():
            rs.sort(key=lambda r: r[1])
            assert [r[1] for r in rs] == list(range(len(rs))), f"partition {p} has gaps"


@pytest.fixture
def make_topic(topic_factory: Callable[..., KafkaSettings]) -> Callable[[int], Topic]:
    def make(partitions: int = 4) -> Topic:
        return Topic(topic_factory(partitions), partitions)

    return make


@pytest.fixture
def consumer(broker: Any) -> Iterator[KafkaConsumer]:
    c = KafkaConsumer(bootstrap_servers=broker.address, enable_auto_commit=False, group_id=None)
    yield c
    c.close()


def assert_listoffsets_short(consumer: KafkaConsumer, topic: Topic) -> dict[int, int]:
    """ListOffsets never overshoots; the test only counts if it undershoots somewhere."""
    listed = {tp.partition: v for tp, v in consumer.end_offsets(topic.tps).items()}
    counts = topic.counts()
    for p in counts:
        assert listed[p] <= counts[p]
    assert any(listed[p] < counts[p] for p in counts), (
        f"precondition: the last batches should hold several records (listed {listed}, "
        f"true {counts}); otherwise this test would pass by luck"
    )
    return listed


# --- true_end_offsets -----------------------------------------------------------------------


def true_ends(topic: Topic) -> dict[int, int]:
    ends = true_end_offsets(topic.kafka.bootstrap, topic.kafka.topic)
    return {int(p): v for p, v in ends.items()}


def test_true_end_offsets_exact_where_listoffsets_is_short(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    topic = make_topic(4)
    topic.produce({0: 2_000, 1: 1_800, 2: 1_200})  # 5,000 records; partition 3 stays empty
    assert_listoffsets_short(consumer, topic)
    assert true_ends(topic) == {0: 2_000, 1: 1_800, 2: 1_200, 3: 0}


def test_stable_end_offsets_again_on_the_same_client_after_more_data(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    # the planner keeps one client for the query's life: stale fetch state must not leak
    topic = make_topic(3)
    topic.produce({0: 700, 1: 300})
    client = LogClient(topic.kafka.bootstrap, topic.kafka.topic, client_id="test")
    try:
        assert client.stable_end_offsets([0, 1, 2]) == {0: 700, 1: 300, 2: 0}
        topic.produce({0: 450, 2: 800})
        assert_listoffsets_short(consumer, topic)
        second = client.stable_end_offsets([0, 1, 2])
        assert second == {0: 1_150, 1: 300, 2: 800}
        assert client.stable_end_offsets([0, 1, 2]) == second  # nothing new: same answer
    finally:
        client.close()


def test_true_end_offsets_of_an_empty_topic(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    topic = make_topic(3)
    started = time.monotonic()
    assert true_ends(topic) == {0: 0, 1: 0, 2: 0}
    assert time.monotonic() - started < 3  # nothing to wait for


# --- read_range ----------------------------------------------------------------------------


def read(
    topic: Topic,
    partition: int,
    start: int,
    end: int,
    chunk: int = 20_000,
    poll_timeout_ms: int = 10_000,
) -> tuple[list[Record], list[pa.RecordBatch]]:
    part = KafkaPartition(
        topic.kafka.bootstrap, topic.kafka.topic, partition, start, end, poll_timeout_ms
    )
    batches = list(read_range(part, chunk=chunk))
    rows: list[Record] = []
    for b in batches:
        assert b.schema == SOURCE_SCHEMA
        us = b.column("timestamp").cast(pa.int64()).to_pylist()
        for r, t in zip(b.to_pylist(), us, strict=True):
            assert t % 1000 == 0  # µs from a ms timestamp
            rows.append((r["partition"], r["offset"], r["key"], r["value"], t // 1000))
    return rows, batches


def test_read_range_returns_exactly_the_range(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    topic = make_topic(3)
    topic.produce({0: 2_000, 1: 1_800, 2: 1_200})
    listed = assert_listoffsets_short(consumer, topic)
    counts = topic.counts()
    p = next(p for p in counts if counts[p] - listed[p] >= 3)  # last batch has >= 4 records
    # listed[p] - 1 is the base offset of the last batch: [listed, end - 1) starts and ends
    # inside that batch
    ranges = [
        (p, 0, counts[p]),
        (p, listed[p], counts[p] - 1),
        (p, 1, 1_234),
        (p, counts[p] - 1, counts[p]),
        (1, 17, 18),
        (2, 999, 1_200),
    ]
    for part, start, end in ranges:
        rows, _ = read(topic, part, start, end)
        assert rows == topic.records[part][start:end], (part, start, end)


def test_read_range_keeps_nulls_and_timestamps(make_topic: Callable[[int], Topic]) -> None:
    topic = make_topic(1)
    topic.produce({0: 1_200})
    expected = topic.records[0]
    assert any(r[2] is None for r in expected) and any(r[3] is None for r in expected)
    rows, _ = read(topic, 0, 0, 1_200)
    assert rows == expected
    assert [r[4] for r in rows] == [T0 + i for i in range(1_200)]


def test_read_range_in_chunks(make_topic: Callable[[int], Topic]) -> None:
    topic = make_topic(1)
    topic.produce({0: 1_000})
    rows, batches = read(topic, 0, 5, 995, chunk=100)
    assert rows == topic.records[0][5:995]
    assert len(batches) >= 5
    assert all(b.num_rows < 200 for b in batches)


def test_read_ranges_of_several_partitions_in_order(make_topic: Callable[[int], Topic]) -> None:
    """One task's ranges, fetched together: each range's rows, in the order of the ranges,
    batches never mixing two ranges; a partition named twice is read range after range."""
    topic = make_topic(3)
    topic.produce({0: 900, 1: 700, 2: 500})
    spec = [(2, 10, 480), (0, 0, 900), (1, 100, 101), (0, 900, 900), (1, 200, 650), (1, 650, 700)]
    parts = [
        KafkaPartition(topic.kafka.bootstrap, topic.kafka.topic, p, a, b, 10_000)
        for p, a, b in spec
    ]
    batches = list(read_ranges(parts, chunk=128))
    assert all(b.num_rows <= 128 for b in batches)
    rows = [
        (r["partition"], r["offset"], r["key"], r["value"]) for b in batches for r in b.to_pylist()
    ]
    expected = [r[:4] for p, a, b in spec for r in topic.records[p][a:b]]
    assert rows == expected
    for b in batches:  # one range per batch
        offsets = b.column("offset").to_pylist()
        assert len(set(b.column("partition").to_pylist())) == 1
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def test_fetch_many_answers_every_partition_asked(make_topic: Callable[[int], Topic]) -> None:
    topic = make_topic(3)
    topic.produce({0: 300, 1: 200, 2: 100})
    client = LogClient(topic.kafka.bootstrap, topic.kafka.topic, client_id="test-fetch-many")
    try:
        answers = client.fetch_many({0: 250, 1: 0, 2: 99})
        assert sorted(answers) == [0, 1, 2]
        for p, hw in ((0, 300), (1, 200), (2, 100)):
            assert answers[p].high_watermark == hw
            assert answers[p].last_stable_offset == hw
            assert answers[p].batches and answers[p].batches[-1].next_offset == hw
        assert client.stable_end_offsets([0, 1, 2]) == {0: 300, 1: 200, 2: 100}
    finally:
        client.close()


def test_read_range_empty_range(make_topic: Callable[[int], Topic]) -> None:
    topic = make_topic(1)
    topic.produce({0: 10})
    started = time.monotonic()
    rows, batches = read(topic, 0, 4, 4)
    assert rows == [] and batches == []
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    ("start_delta", "end_delta"),
    [
        pytest.param(5, 10, id="entirely-beyond-the-end"),
        pytest.param(-3, 2, id="straddling-the-end"),
    ],
)
def test_read_range_beyond_the_end_fails_clearly(
    make_topic: Callable[[int], Topic], start_delta: int, end_delta: int
) -> None:
    topic = make_topic(1)
    topic.produce({0: 300})
    timeout_ms = 1_500
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"not readable after 1500 ms") as e:
        read(topic, 0, 300 + start_delta, 300 + end_delta, poll_timeout_ms=timeout_ms)
    elapsed = time.monotonic() - started
    assert topic.kafka.topic in str(e.value)
    assert f"..{300 + end_delta}" in str(e.value)
    # the poll timeout, plus one 500 ms poll and connection set-up; never the 30 s default
    assert elapsed < timeout_ms / 1000 + 2.5, elapsed


def test_read_range_ends_on_a_transaction_marker(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    # A transactional producer (Kafka Streams, Flink, Debezium, ...) writes a commit marker after
    # each transaction; it takes an offset but is never delivered as a record. Here offsets 10
    # and 21 are markers and the true end is 22, so [0, 22) holds 20 records and ends on one.
    topic = make_topic(1)
    producer = KafkaProducer(
        bootstrap_servers=topic.kafka.bootstrap,
        transactional_id=f"tx-{topic.kafka.topic}",
        enable_idempotence=True,
    )
    try:
        producer.init_transactions()
        for _ in range(2):
            producer.begin_transaction()
            for i in range(10):
                producer.send(topic.kafka.topic, value=b"v%d" % i, partition=0)
            producer.commit_transaction()
    finally:
        producer.close()
    end = true_ends(topic)[0]
    assert end == 22
    started = time.monotonic()
    rows, _ = read(topic, 0, 0, end, poll_timeout_ms=3_000)
    assert [r[1] for r in rows] == [*range(0, 10), *range(11, 21)]
    assert time.monotonic() - started < 2.5  # done when the range is, not after a timeout
    # a range of markers only is empty, not an error
    rows, _ = read(topic, 0, 21, 22, poll_timeout_ms=3_000)
    assert rows == []


# --- KafkaStreamReader ----------------------------------------------------------------------


def reader_for(topic: Topic, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader(
        {"bootstrap": topic.kafka.bootstrap, "topic": topic.kafka.topic, **options}
    )


def total(start: dict[str, int], end: dict[str, int]) -> int:
    return sum(end[p] - start.get(p, 0) for p in end)


def test_reader_caps_batches_and_continues_from_the_last_end(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    topic = make_topic(4)
    topic.produce({0: 300, 1: 250, 2: 87})  # 637 records, partition 3 empty
    assert_listoffsets_short(consumer, topic)
    true_end = {str(p): n for p, n in topic.counts().items()}
    reader = reader_for(topic, maxRecordsPerTrigger="100")
    try:
        start = reader.initialOffset()
        assert start == {"0": 0, "1": 0, "2": 0, "3": 0}
        batches = 0
        while True:
            end = reader.latestOffset()
            assert reader.latestOffset() == end  # asking again does not move it
            assert set(end) == set(true_end)
            for p in end:
                assert start[p] <= end[p] <= true_end[p]
            n = total(start, end)
            if n == 0:
                break
            # 100 in all until the topic runs dry
            assert n == min(100, total(start, true_end))
            parts = reader.partitions(start, end)
            assert [(pt.partition, pt.start, pt.end) for pt in parts] == [  # type: ignore[attr-defined]
                (int(p), start[p], end[p]) for p in sorted(end, key=int) if end[p] > start[p]
            ]
            if batches < 2:  # read the first batches through the reader, as an executor would
                got = []
                for pt in parts:
                    for b in reader.read(pt):
                        got.extend((r["partition"], r["offset"]) for r in b.to_pylist())
                assert got == [
                    (int(p), o) for p in sorted(end, key=int) for o in range(start[p], end[p])
                ]
            reader.commit(end)
            start = end
            batches += 1
        assert start == true_end
        assert batches == 7  # ceil(637 / 100)
    finally:
        reader.stop()


def test_reader_never_goes_past_ending_offsets(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    topic = make_topic(4)
    topic.produce({0: 400, 1: 400, 2: 40})
    assert_listoffsets_short(consumer, topic)
    ending = {"0": 150, "1": 399, "2": 10_000, "3": 0}  # 10,000: beyond the topic's end
    reader = reader_for(topic, maxRecordsPerTrigger="100", endingOffsets=json.dumps(ending))
    try:
        start = reader.initialOffset()
        cap = {"0": 150, "1": 399, "2": 40, "3": 0}
        for _ in range(20):
            end = reader.latestOffset()
            for p in end:
                assert start[p] <= end[p] <= cap[p]
            assert total(start, end) == min(100, total(start, cap))
            if end == start:
                break
            reader.partitions(start, end)
            start = end
        assert start == cap
        # more data arrives: partitions at their endingOffsets stay there, partition 2 (whose
        # endingOffsets lies beyond the data) follows the topic
        topic.produce({0: 100, 1: 100, 2: 100})
        assert reader.latestOffset() == {"0": 150, "1": 399, "2": 140, "3": 0}
    finally:
        reader.stop()


def test_reader_starting_latest_starts_at_the_true_end(
    make_topic: Callable[[int], Topic], consumer: KafkaConsumer
) -> None:
    topic = make_topic(3)
    topic.produce({0: 1_000, 1: 900, 2: 800})
    listed = assert_listoffsets_short(consumer, topic)
    reader = reader_for(topic, startingOffsets="latest")
    try:
        initial = reader.initialOffset()
        assert initial == {"0": 1_000, "1": 900, "2": 800}
        assert initial != {str(p): v for p, v in listed.items()}  # not ListOffsets' answer
        assert reader.latestOffset() == initial  # nothing new yet: an empty batch
        topic.produce({1: 37, 2: 5})
        end = reader.latestOffset()
        assert end == {"0": 1_000, "1": 937, "2": 805}
        parts = reader.partitions(initial, end)
        assert [(pt.partition, pt.start, pt.end) for pt in parts] == [  # type: ignore[attr-defined]
            (1, 900, 937),
            (2, 800, 805),
        ]
    finally:
        reader.stop()


def test_reader_resumes_from_the_checkpointed_offsets(
    make_topic: Callable[[int], Topic], tmp_path: Path
) -> None:
    # a restarted query: Spark may ask for the latest offset before saying where it stopped
    topic = make_topic(3)
    topic.produce({0: 300, 1: 300, 2: 300})
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for batch_id, end in enumerate([{"0": 10, "1": 10, "2": 10}, {"0": 200, "1": 40, "2": 290}]):
        (offsets / str(batch_id)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{T0},"conf":{{}}}}\n' + json.dumps(end)
        )
    reader = reader_for(topic, maxRecordsPerTrigger="100", checkpoint=str(tmp_path))
    try:
        base = {"0": 200, "1": 40, "2": 290}
        end = reader.latestOffset()
        # available: 100, 260, 10 (370) -> in proportion: 27.0, 70.3, 2.7, and the one left
        # to the largest remainder (p2)
        assert end == {"0": 227, "1": 110, "2": 293}
        assert total(base, end) == 100
    finally:
        reader.stop()


# --- transactions ---------------------------------------------------------------------------


def transactional_producer(topic: Topic, name: str) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=topic.kafka.bootstrap,
        transactional_id=f"{name}-{topic.kafka.topic}",
        enable_idempotence=True,
    )
    producer.init_transactions()
    return producer


def test_read_range_drops_aborted_transactions_and_reads_ahead_to_markers(
    make_topic: Callable[[int], Topic],
) -> None:
    # offsets: 0-4 plain | 5-9 producer A (txn) | 10-14 producer B (txn) | 15 abort A |
    #          16-18 plain | 19 commit B | 20-21 plain
    topic = make_topic(1)
    t = topic.kafka.topic
    plain = KafkaProducer(bootstrap_servers=topic.kafka.bootstrap)
    a = transactional_producer(topic, "a")
    b = transactional_producer(topic, "b")
    try:
        for i in range(5):
            plain.send(t, value=b"plain%d" % i, partition=0).get(10)
        a.begin_transaction()
        b.begin_transaction()
        for i in range(5):
            a.send(t, value=b"a%d" % i, partition=0).get(10)
        for i in range(5):
            b.send(t, value=b"b%d" % i, partition=0).get(10)
        a.abort_transaction()
        for i in range(5, 8):
            plain.send(t, value=b"plain%d" % i, partition=0).get(10)
        b.commit_transaction()
        for i in range(8, 10):
            plain.send(t, value=b"plain%d" % i, partition=0).get(10)
    finally:
        for p in (plain, a, b):
            p.close()
    assert true_ends(topic) == {0: 22}

    def values(start: int, end: int) -> list[bytes]:
        rows, _ = read(topic, 0, start, end, poll_timeout_ms=3_000)
        return [r[3] for r in rows]

    whole = values(0, 22)
    assert sorted(whole) == sorted(
        [b"plain%d" % i for i in range(10)] + [b"b%d" % i for i in range(5)]
    )
    # any split into ranges gives the same records, each once: replays stay exact
    for cuts in ([0, 7, 12, 17, 22], [0, 1, 2, 15, 16, 20, 22], [0, 11, 22]):
        parts = [values(s, e) for s, e in zip(cuts, cuts[1:], strict=False)]
        assert sorted(v for part in parts for v in part) == sorted(whole), cuts
    # a range inside B's transaction waits for B's commit, past its own end
    assert values(10, 12) == [b"b0", b"b1"]
    # a range inside A's transaction is empty: A aborted
    assert values(5, 10) == []


def test_an_open_transaction_holds_the_end_back(make_topic: Callable[[int], Topic]) -> None:
    topic = make_topic(1)
    t = topic.kafka.topic
    plain = KafkaProducer(bootstrap_servers=topic.kafka.bootstrap)
    tx = transactional_producer(topic, "open")
    try:
        for i in range(4):
            plain.send(t, value=b"p%d" % i, partition=0).get(10)
        tx.begin_transaction()
        for i in range(3):
            tx.send(t, value=b"t%d" % i, partition=0).get(10)
        plain.send(t, value=b"p4", partition=0).get(10)
        # offsets 0-3 plain, 4-6 the open transaction, 7 plain: committed data ends at 4
        assert true_ends(topic) == {0: 4}
        rows, _ = read(topic, 0, 0, 4, poll_timeout_ms=3_000)
        assert [r[3] for r in rows] == [b"p0", b"p1", b"p2", b"p3"]
        tx.commit_transaction()  # marker at 8
        assert true_ends(topic) == {0: 9}
        rows, _ = read(topic, 0, 4, 9, poll_timeout_ms=3_000)
        assert [r[3] for r in rows] == [b"p4", b"t0", b"t1", b"t2"]
    finally:
        plain.close()
        tx.close()


def test_reads_reuse_one_client_per_topic_and_a_failed_read_starts_afresh(
    make_topic: Callable[[int], Topic],
) -> None:
    """Executors keep their connection across micro-batches; a failure does not poison it."""
    from jobs.source import kafka_source

    topic = make_topic(2)
    topic.produce({0: 500, 1: 500})
    key = (topic.kafka.bootstrap, topic.kafka.topic, ())
    kafka_source._drop_reader_client(*key)
    rows, _ = read(topic, 0, 0, 250)
    client = kafka_source._READERS[key]
    for part, start, end in [(1, 0, 500), (0, 250, 500)]:
        rows, _ = read(topic, part, start, end)
        assert rows == topic.records[part][start:end]
        assert kafka_source._READERS[key] is client
    with pytest.raises(RuntimeError, match="not readable"):
        read(topic, 0, 600, 700, poll_timeout_ms=500)
    assert key not in kafka_source._READERS
    rows, _ = read(topic, 1, 10, 20)
    assert rows == topic.records[1][10:20]
    assert kafka_source._READERS[key] is not client


def test_the_next_fetch_is_asked_while_the_rows_before_it_are_parsed(
    make_topic: Callable[[int], Topic],
) -> None:
    """The second round's fetch is on its way (in the worker's fetch thread) once the first
    round's rows are handed out; abandoning the read then drops the client, which is closed
    once that fetch has ended, and the next read starts afresh with the same rows."""
    import threading

    from jobs.source import kafka_source

    topic = make_topic(1)
    topic.produce({0: 900})
    key = (topic.kafka.bootstrap, topic.kafka.topic, ())
    kafka_source._drop_reader_client(*key)
    client = kafka_source._reader_client(*key)
    asked: list[tuple[str, dict[int, int]]] = []
    fetch = client.fetch_many

    def recorded(offsets: dict[int, int], *args: Any, **kwargs: Any) -> Any:
        asked.append((threading.current_thread().name, dict(offsets)))
        return fetch(offsets, *args, **kwargs)

    client.fetch_many = recorded  # type: ignore[method-assign]
    parts = [
        KafkaPartition(topic.kafka.bootstrap, topic.kafka.topic, 0, a, b, 10_000)
        for a, b in [(0, 450), (450, 900)]
    ]
    reading = read_ranges(parts, chunk=100)
    first = next(reading)
    assert first.column("offset").to_pylist() == list(range(100))
    deadline = time.monotonic() + 10
    while len(asked) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert asked[0] == (threading.current_thread().name, {0: 0})
    assert asked[1][0].startswith("tidegauge-fetch") and asked[1][1] == {0: 450}
    reading.close()
    assert key not in kafka_source._READERS
    rows = [r for b in read_ranges(parts, chunk=100) for r in b.to_pylist()]
    assert [(r["offset"], r["value"]) for r in rows] == [r[1:4:2] for r in topic.records[0]]
