"""The Kafka source's executor read path alone: records/s of `read_range`, per codec, no Spark.

    .venv/bin/python benchmarks/bench_source.py [--records 200000] [--rounds 3] [--codec none lz4]
        [--batch-bytes 262144]

Starts its own broker (Tansu), writes `--records` generator-shaped JSON events (~200 bytes) to a
one-partition topic per codec with a batching kafka-python producer, then reads the whole range
with `jobs.source.kafka_source.read_range` (what one Spark task does) `--rounds` times and prints
the best and median records/s and CPU seconds per 100k records. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaProducer  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import start_broker  # noqa: E402
from jobs.source.kafka_source import KafkaPartition, read_range  # noqa: E402
from tidegauge.core.config import KafkaSettings  # noqa: E402
from tidegauge.traffic.topics import ensure_topic  # noqa: E402

T0 = 1_795_341_600_000


def fill(
    bootstrap: str, topic: str, records: int, codec: str, batch_bytes: int = 256 * 1024
) -> None:
    ensure_topic(KafkaSettings(bootstrap=bootstrap, topic=topic), 1)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=20,
        batch_size=batch_bytes,
        compression_type=None if codec == "none" else codec,
    )
    for i in range(records):
        value = json.dumps(
            {
                "event_id": f"7-{i:09d}",
                "event_time": T0 + i * 5,
                "service": ("api", "web", "search", "auth", "payments")[i % 5],
                "user_id": f"u{i * 7919 % 10_000:06d}",
                "latency_ms": round(20 + (i * 37 % 500) / 3, 3),
                "status": 500 if i % 97 == 0 else 200,
                "sent_time": T0 + i * 5 + 40,
            },
            separators=(",", ":"),
        ).encode()
        producer.send(topic, value=value, key=b"u%d" % (i % 10_000), partition=0)
    producer.flush()
    producer.close()


def read_once(bootstrap: str, topic: str, records: int) -> tuple[float, float, int]:
    part = KafkaPartition(bootstrap, topic, 0, 0, records)
    wall, cpu = time.perf_counter(), time.process_time()
    rows = sum(b.num_rows for b in read_range(part))
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--codec", nargs="+", default=["none", "lz4", "zstd"])
    ap.add_argument(
        "--batch-bytes",
        type=int,
        default=256 * 1024,
        help="the producer's batch size; 6600 makes batches of ~33 records, as five producers "
        "sending 100k events/s to three partitions with a 5 ms linger do",
    )
    args = ap.parse_args()
    print(describe(("kafka-python", "pyarrow")))
    broker = start_broker()
    try:
        for codec in args.codec:
            topic = f"bench-source-{codec}"
            fill(broker.address, topic, args.records, codec, args.batch_bytes)
            runs = [read_once(broker.address, topic, args.records) for _ in range(args.rounds)]
            assert all(rows == args.records for _, _, rows in runs), runs
            rates = [args.records / wall for wall, _, _ in runs]
            cpu = statistics.median(c for _, c, _ in runs) / args.records * 100_000
            print(
                f"{codec:>5}: best {max(rates):>9,.0f} records/s, median "
                f"{statistics.median(rates):>9,.0f} records/s, {cpu:.2f} s CPU per 100k records"
            )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
