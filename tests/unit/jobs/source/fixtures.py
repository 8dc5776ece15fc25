"""What the source's unit tests share: v2 record batches built and read back by kafka-python."""

from __future__ import annotations

import random

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from jobs.source.log_batches import LogRecord
from tests.fixtures import T


def build(
    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]],
    codec: int = 0,
    base_offset: int = 0,
    transactional: bool = False,
) -> bytes:
    """A v2 batch of (offset delta, timestamp, key, value, headers), as kafka-python writes it."""
    builder = DefaultRecordBatchBuilder(
        2, codec, transactional, 7 if transactional else -1, 0, -1, 1 << 24
    )
    for delta, ts, key, value, headers in records:
        builder.append(delta, ts, key, value, headers)
    wire = bytearray(builder.build())
    wire[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(wire)


def kafka_python(wire: bytes) -> list[LogRecord]:
    batch = DefaultRecordBatch(wire)
    return [
        LogRecord(r.offset, r.timestamp if r.timestamp >= 0 else None, r.key, r.value)
        for r in batch
    ]


def random_records(rng: random.Random, n: int) -> list[tuple]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 40]))
        size = rng.choice([0, 1, 63, 64, 150, 8_191, 8_192, 20_000])
        value = None if rng.random() < 0.1 else rng.randbytes(size)
        ts = T + rng.randint(-5_000, 5_000)  # deltas of both signs against the first
        out.append((i, ts, key, value, []))
    return out


def text_records(rng: random.Random, n: int) -> list[tuple]:
    """Records as the project's producers write them: JSON text values, no zero byte."""
    out = []
    for i in range(n):
        key = None if rng.random() < 0.5 else f"svc-{rng.randrange(9)}".encode()
        pad = "x" * rng.choice([0, 50, 130, 9_000])
        value = f'{{"event_id":"e{i}","pad":"{pad}"}}'
        out.append((i, T + rng.randint(-5_000, 5_000), key, value.encode(), []))
    return out
