"""The catalog topic: a compacted Kafka topic keyed by service, written and read whole.

Compaction (`cleanup.policy=compact`) keeps at least the newest record of every key, so the
topic is the catalog itself and any reader rebuilds it from offset 0, the way a changelog feeds
a derived view; a tombstone (null value) removes a key. Older versions stay until the broker
compacts them away: the history the job can join against is what the topic still holds.
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from tidegauge.catalog.entry import CatalogEntry
from tidegauge.catalog.history import CatalogRecord
from tidegauge.core.config import KafkaSettings
from tidegauge.core.topics import ensure_topic

__all__ = [
    "DEFAULT_CATALOG_TOPIC",
    "TOPIC_CONFIG",
    "CatalogError",
    "CatalogFollower",
    "read_catalog",
    "write",
]

DEFAULT_CATALOG_TOPIC = "catalog"
#: The topic's settings at creation: compacted, one partition (a few thousand keys at most, read
#: whole; one partition keeps every service's records in one order).
TOPIC_CONFIG = {"cleanup.policy": "compact"}


class CatalogError(RuntimeError):
    """The catalog topic cannot be reached, created, written or read."""


def write(
    kafka: KafkaSettings,
    changes: list[tuple[str, CatalogEntry | None]],
    timeout_s: float = 30,
) -> list[CatalogRecord]:
    """Write (service, entry) records, None a tombstone, in order; return them as stored.

    Creates the topic (compacted, one partition) if missing. Every record is acknowledged by
    the broker before this returns (CatalogError if one is not).
    """
    try:
        ensure_topic(kafka, 1, timeout_s=timeout_s, configs=TOPIC_CONFIG)
    except (KafkaError, RuntimeError) as e:
        raise CatalogError(f"cannot create the catalog topic {kafka.topic!r}: {e}") from None
    try:
        producer = KafkaProducer(
            bootstrap_servers=kafka.bootstrap.split(","),
            acks="all",
            client_id="tidegauge-catalog",
            **kafka.client_config("producer"),
        )
    except KafkaError as e:
        raise CatalogError(f"cannot reach Kafka at {kafka.bootstrap}: {e}") from None
    try:
        futures = [
            (service, value, producer.send(kafka.topic, key=service.encode(), value=value))
            for service, value in ((s, e.to_bytes() if e else None) for s, e in changes)
        ]
        out = []
        for service, value, future in futures:
            meta = future.get(timeout=timeout_s)
            out.append(CatalogRecord(meta.offset, meta.timestamp, service, value))
        return out
    except KafkaError as e:
        raise CatalogError(f"writing to the catalog topic {kafka.topic!r} failed: {e}") from None
    finally:
        producer.close(timeout=5)


def read_catalog(kafka: KafkaSettings, timeout_s: float = 30) -> list[CatalogRecord]:
    """Every record the catalog topic holds, in offset order (empty if there is no topic)."""
    follower = CatalogFollower(kafka)
    try:
        follower.catch_up(timeout_s=timeout_s)
        return follower.records
    finally:
        follower.close()


class CatalogFollower:
    """A reader that stays at the end of the catalog topic: each `catch_up` reads what is new.

    Reads to the high watermark the broker reports in its fetch answers (Tansu's ListOffsets
    can fall short of it: ../shared/NOTES.md). Offsets are `{partition: next offset}`.
    """

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        #: Every record read so far, in (partition, offset) order.
        self.records: list[CatalogRecord] = []
        self._partitions: list[TopicPartition] = []
        try:
            self._consumer = KafkaConsumer(
                bootstrap_servers=kafka.bootstrap.split(","),
                enable_auto_commit=False,
                group_id=None,
                client_id="tidegauge-catalog",
                **kafka.client_config("consumer"),
            )
        except KafkaError as e:
            raise CatalogError(f"cannot reach Kafka at {kafka.bootstrap}: {e}") from None

    def catch_up(
        self, until: dict[int, int] | None = None, timeout_s: float = 30
    ) -> dict[int, int]:
        """Read up to `until` (None: the end as of now); return the offsets read up to."""
        try:
            if not self._partitions:
                found = self._consumer.partitions_for_topic(self.kafka.topic)
                if not found:
                    return {}
                self._partitions = [TopicPartition(self.kafka.topic, p) for p in sorted(found)]
                self._consumer.assign(self._partitions)
                self._consumer.seek_to_beginning(*self._partitions)
            deadline = time.monotonic() + timeout_s
            while True:
                positions = {tp.partition: self._consumer.position(tp) for tp in self._partitions}
                if until is not None and all(positions.get(p, 0) >= o for p, o in until.items()):
                    return dict(until)
                if until is None:
                    ends = {tp.partition: self._consumer.highwater(tp) for tp in self._partitions}
                    if all(e is not None and positions[p] >= e for p, e in ends.items()):
                        return positions
                if time.monotonic() > deadline:
                    raise CatalogError(
                        f"reading the catalog topic {self.kafka.topic!r} did not finish in "
                        f"{timeout_s:g}s"
                    )
                for tp, got in self._consumer.poll(timeout_ms=200).items():
                    for r in got:
                        key = r.key.decode("utf-8", "replace") if r.key is not None else ""
                        self.records.append(
                            CatalogRecord(r.offset, r.timestamp, key, r.value, tp.partition)
                        )
        except KafkaError as e:
            raise CatalogError(
                f"reading the catalog topic {self.kafka.topic!r} failed: {e}"
            ) from None

    def below(self, offsets: dict[int, int]) -> list[CatalogRecord]:
        """The records read that lie below `offsets` (a batch's share of the catalog)."""
        return [r for r in self.records if r.offset < offsets.get(r.partition, 0)]

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()
