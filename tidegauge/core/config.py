"""Configuration in one place: frozen, validated objects built once from flags and environment.

Every process (job, generator, dashboard, query) receives one of these objects; nothing else reads
environment variables. Cross-field rules are checked when the object is built, so a bad
combination fails before Spark or Kafka is touched.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tidegauge.core.windows import WindowSpec

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_REDIS_URL",
    "DEFAULT_TOPIC",
    "ENV_BOOTSTRAP",
    "ENV_PLUGINS",
    "ENV_REDIS_URL",
    "ENV_TOPIC",
    "JobConfig",
    "KafkaSettings",
    "RedisSettings",
    "plugins_from_env",
    "redact_url",
]

ENV_BOOTSTRAP = "TIDEGAUGE_KAFKA_BOOTSTRAP"
ENV_REDIS_URL = "TIDEGAUGE_REDIS_URL"
ENV_TOPIC = "TIDEGAUGE_TOPIC"
#: Comma-separated modules that register event fields and metrics (docs/extending.md).
ENV_PLUGINS = "TIDEGAUGE_PLUGINS"

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_TOPIC = "events"


def plugins_from_env(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The plugin modules named in `TIDEGAUGE_PLUGINS` (comma-separated), in order."""
    env = os.environ if env is None else env
    return tuple(p.strip() for p in env.get(ENV_PLUGINS, "").split(",") if p.strip())


def redact_url(url: str) -> str:
    """Hide the password of a URL so it can be logged or shown."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*"
        )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


@dataclass(frozen=True)
class KafkaSettings:
    """Where the events live. `bootstrap` is HOST:PORT[,HOST:PORT...]."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    topic: str = DEFAULT_TOPIC

    def __post_init__(self) -> None:
        for server in self.bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            ok = bool(host) and re.fullmatch(r"[A-Za-z0-9._\-\[\]:]+", host) is not None
            if not ok or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
                raise ValueError(f"--bootstrap wants HOST:PORT (port 1-65535), got {server!r}")
        if not self.topic:
            raise ValueError("--topic must not be empty")

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        bootstrap: str | None = None,
        topic: str | None = None,
    ) -> KafkaSettings:
        """Flags win over TIDEGAUGE_KAFKA_BOOTSTRAP / TIDEGAUGE_TOPIC, which win over defaults."""
        env = os.environ if env is None else env
        return cls(
            bootstrap=bootstrap or env.get(ENV_BOOTSTRAP) or DEFAULT_BOOTSTRAP,
            topic=topic or env.get(ENV_TOPIC) or DEFAULT_TOPIC,
        )


@dataclass(frozen=True)
class RedisSettings:
    """Where results go. The URL may carry a password; `repr` never shows it."""

    url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    prefix: str = "tg"

    def __post_init__(self) -> None:
        if urlsplit(self.url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"--redis wants a redis:// URL, got {redact_url(self.url)!r}")
        if not self.prefix or ":" in self.prefix:
            raise ValueError("redis key prefix must be non-empty and contain no ':'")

    def __repr__(self) -> str:
        return f"RedisSettings(url={redact_url(self.url)!r}, prefix={self.prefix!r})"

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        url: str | None = None,
        prefix: str | None = None,
    ) -> RedisSettings:
        """Flags win over `TIDEGAUGE_REDIS_URL`, which wins over the default."""
        env = os.environ if env is None else env
        return cls(url=url or env.get(ENV_REDIS_URL) or DEFAULT_REDIS_URL, prefix=prefix or "tg")


TriggerKind = Literal["processing-time", "available-now"]


@dataclass(frozen=True)
class JobConfig:
    """Everything `tidegauge job` needs. Durations are integer milliseconds."""

    kafka: KafkaSettings
    redis: RedisSettings
    checkpoint: str
    windows: tuple[WindowSpec, ...] = (WindowSpec.tumbling(10_000),)
    allowed_lateness_ms: int = 30_000
    trigger: TriggerKind = "processing-time"
    trigger_interval_ms: int = 1_000
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_records_per_trigger: int | None = None
    master: str = "local[*]"
    shuffle_partitions: int = 4
    dead_letter_max: int = 100_000
    #: Move device times onto the broker's clock (receive - sent) before windowing.
    correct_clock_skew: bool = False
    #: Late events kept in the late store (newest by broker time).
    late_events_max: int = 10_000
    #: Event-state groups: services are hashed onto this many; fixed for a checkpoint.
    state_shards: int = 4

    def __post_init__(self) -> None:
        if not self.windows:
            raise ValueError("at least one --window is needed")
        if len({w.key for w in self.windows}) != len(self.windows):
            raise ValueError("--window given twice with the same size and slide")
        if self.allowed_lateness_ms < 0:
            raise ValueError("--allowed-lateness must be >= 0")
        if self.trigger_interval_ms < 0:
            raise ValueError("trigger interval must be >= 0")
        if self.starting_offsets not in ("earliest", "latest"):
            raise ValueError("--starting-offsets is earliest or latest")
        if self.max_records_per_trigger is not None and self.max_records_per_trigger <= 0:
            raise ValueError("--max-records-per-trigger must be positive")
        if not self.checkpoint:
            raise ValueError(
                "--checkpoint is required (a directory Spark keeps offsets and state in)"
            )
        if self.shuffle_partitions <= 0:
            raise ValueError("shuffle partitions must be positive")
        if self.dead_letter_max <= 0:
            raise ValueError("--dead-letter-max must be positive")
        if self.late_events_max < 0:
            raise ValueError("--late-events-max must be >= 0")
        if not 1 <= self.state_shards <= 1024:
            raise ValueError("--state-shards must be between 1 and 1024")
