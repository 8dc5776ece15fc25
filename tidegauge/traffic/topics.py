"""`tidegauge topic`: create the events topic (tidegauge/core/topics.py does the work)."""

from __future__ import annotations

import argparse

from tidegauge.core.config import KafkaSettings, add_kafka_options
from tidegauge.core.topics import DEFAULT_PARTITIONS, ensure_topic

__all__ = ["DEFAULT_PARTITIONS", "add_arguments", "ensure_topic", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge topic`."""
    p.add_argument("--bootstrap", help="Kafka HOST:PORT (env TIDEGAUGE_KAFKA_BOOTSTRAP)")
    p.add_argument("--topic", help="topic name (default events)")
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    add_kafka_options(p)


def run(args: argparse.Namespace) -> int:
    """Create the topic and say how many partitions it has."""
    kafka = KafkaSettings.from_env(
        bootstrap=args.bootstrap, topic=args.topic, options=args.kafka_option
    )
    n = ensure_topic(kafka, args.partitions)
    print(f"topic {kafka.topic!r} on {kafka.bootstrap}: {n} partitions")
    return 0
