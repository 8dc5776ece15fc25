"""Topic administration: make sure a topic exists with the partitions (and settings) we expect."""

from __future__ import annotations

import time
from collections.abc import Mapping

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from tidegauge.core.config import KafkaSettings

__all__ = ["DEFAULT_PARTITIONS", "ensure_topic"]

DEFAULT_PARTITIONS = 3


def ensure_topic(
    kafka: KafkaSettings,
    partitions: int = DEFAULT_PARTITIONS,
    timeout_s: float = 30,
    configs: Mapping[str, str] | None = None,
) -> int:
    """Create `kafka.topic` if missing; return its partition count (existing topics are kept).

    `configs`: the topic's settings at creation (`cleanup.policy` ...).
    """
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=kafka.bootstrap,
                client_id="tidegauge-admin",
                **kafka.client_config("admin"),
            )
        except KafkaError as e:  # broker still starting
            last = e
            time.sleep(0.5)
            continue
        try:
            try:
                admin.create_topics(
                    [NewTopic(kafka.topic, partitions, 1, topic_configs=dict(configs or {}))]
                )
            except TopicAlreadyExistsError:
                pass
            for _ in range(50):
                meta = admin.describe_topics([kafka.topic])
                parts = meta[0].get("partitions") if meta else None
                if parts:
                    return len(parts)
                time.sleep(0.1)
            raise RuntimeError(f"topic {kafka.topic!r} has no partitions after creation")
        finally:
            admin.close()
    raise RuntimeError(f"cannot reach Kafka at {kafka.bootstrap}: {last}")
