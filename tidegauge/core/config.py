"""Configuration in one place: frozen, validated objects built once from flags and environment.

Every process (job, generator, dashboard, query) receives one of these objects; nothing else reads
environment variables. Cross-field rules are checked when the object is built, so a bad
combination fails before Spark or Kafka is touched.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tidegauge.core.dimensions import (
    DEFAULT_VALUES,
    Dimension,
    parse_dimensions,
    register_dimension_fields,
)
from tidegauge.core.durations import format_duration, parse_duration
from tidegauge.core.formats import RecordFormat
from tidegauge.core.kafka_options import ClientKind, client_config, parse_kafka_options
from tidegauge.core.retention import (
    DEFAULT_RETENTION,
    DEFAULT_RETENTION_SIZE,
    Retention,
    parse_size,
)
from tidegauge.core.windows import SLIDING_NEEDS_STEP, WindowSpec, is_sliding_text

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_MAX_RECORDS_PER_TRIGGER",
    "DEFAULT_REDIS_URL",
    "DEFAULT_TOPIC",
    "ENV_BOOTSTRAP",
    "ENV_PLUGINS",
    "ENV_REDIS_URL",
    "ENV_TOPIC",
    "add_kafka_options",
    "MIN_REFRESH_MS",
    "DashboardSettings",
    "JobConfig",
    "KafkaSettings",
    "RedisSettings",
    "default_shuffle_partitions",
    "plugins_from_env",
    "dashboard_settings_from_args",
    "given",
    "job_config_from_args",
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
#: Records one batch reads at most: a backlog is taken in batches of a few seconds each, every
#: one committed and on the page as it ends (BENCHMARKS.md, catch-up), instead of in one batch
#: that holds the page still for minutes.
DEFAULT_MAX_RECORDS_PER_TRIGGER = 500_000


def given(
    flag_value: str | None, variable: str, flag: str, env: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """A setting the user gave, as (value, where from): the flag wins over the variable.

    None when neither is set, so the caller falls back to its own (the demo starts a local
    broker or Redis then).
    """
    if flag_value:
        return flag_value, flag
    env = os.environ if env is None else env
    value = env.get(variable)
    return (value, variable) if value else None


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
    #: Client settings (`--kafka-option KEY=VALUE`, tidegauge/core/kafka_options.py): TLS, SASL,
    #: timeouts. Never in `repr`: they may hold secrets.
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def client_config(self, kind: ClientKind) -> dict[str, Any]:
        """The keyword arguments of one kind of kafka-python client, from `options`."""
        return client_config(self.options, kind)

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
        options: Sequence[str] = (),
    ) -> KafkaSettings:
        """Flags win over the environment, which wins over defaults.

        TIDEGAUGE_KAFKA_BOOTSTRAP, TIDEGAUGE_TOPIC, TIDEGAUGE_KAFKA_OPTIONS; `options` are the
        `--kafka-option` flags, added to (and winning over) the variable's.
        """
        env = os.environ if env is None else env
        return cls(
            bootstrap=bootstrap or env.get(ENV_BOOTSTRAP) or DEFAULT_BOOTSTRAP,
            topic=topic or env.get(ENV_TOPIC) or DEFAULT_TOPIC,
            options=parse_kafka_options(options, env),
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
    #: Records one batch reads at most (None: no limit): a backlog is taken in steps.
    max_records_per_trigger: int | None = DEFAULT_MAX_RECORDS_PER_TRIGGER
    master: str = "local[*]"
    shuffle_partitions: int = 4
    dead_letter_max: int = 100_000
    #: Move device times onto the broker's clock (receive - sent) before windowing.
    correct_clock_skew: bool = False
    #: What the records are: the contract's own JSON, access logs through a field map or
    #: OTLP spans (`--format`, `--field`, `--span-kind`; tidegauge/core/formats.py).
    record_format: RecordFormat = field(default_factory=RecordFormat)
    #: Serve Prometheus metrics, /healthz and /readyz on this port (None: off; 0: any free one).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: Late events kept in the late store (newest by broker time).
    late_events_max: int = 10_000
    #: Event-state groups: services are hashed onto this many; fixed for a checkpoint.
    state_shards: int = 4
    #: Processes of the driver that run the state shards side by side (0: the driver alone;
    #: None: one per core, at most one per shard).
    state_workers: int | None = None
    #: Drop events whose event_id was already accepted (jobs/panes/dedup.py); `--no-dedup` is
    # False.
    dedup: bool = True
    #: Services tracked at once (a cardinality guard; 0: no limit): further names count under
    #: "(other)". The state shards share it out batch by batch (docs/events.md).
    max_services: int = 1_000
    #: How long a tracked service name without events keeps its slot (event time).
    service_idle_ms: int = 3_600_000
    #: What each window is also sliced by (`--dimension`; tidegauge/core/dimensions.py).
    dimensions: tuple[Dimension, ...] = ()
    #: Values with a slice of their own per (service, dimension) (`--dimension-values`).
    dimension_values: int = DEFAULT_VALUES
    #: The service catalog's topic, joined to events as of their time (`--catalog`; None: off).
    catalog_topic: str | None = None
    #: How long the sink retries an unreachable Redis before the job stops (`--sink-retry-for`).
    sink_retry_ms: int = 600_000
    #: Spark settings given with `--conf KEY=VALUE`, applied over Tidegauge's own
    # (jobs/runtime/session.py).
    spark_conf: tuple[tuple[str, str], ...] = ()
    #: How long windows are kept and the roll-up tiers after them (`--retention`).
    retention: Retention = field(default_factory=lambda: Retention.parse(DEFAULT_RETENTION))
    #: Bytes the job's stores may take together once full (`--retention-size`; None: no budget).
    retention_size: int | None = field(default_factory=lambda: parse_size(DEFAULT_RETENTION_SIZE))

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
            raise ValueError(
                "--max-records-per-trigger must be positive (0 on the command line: no limit)"
            )
        if not self.checkpoint:
            raise ValueError(
                "--checkpoint is required (a directory Spark keeps offsets and state in)"
            )
        scheme = urlsplit(self.checkpoint).scheme
        if len(scheme) > 1:  # (one letter: a Windows drive)
            raise ValueError(
                f"--checkpoint {self.checkpoint}: not a {scheme}: URI but a path of the "
                "driver's file system (a local disk, a volume or an NFS mount; for file: the "
                "path itself): the job writes its state log beside Spark's offsets with plain "
                'file access (docs/deploy.md, "The checkpoint where the driver writes it")'
            )
        if self.shuffle_partitions <= 0:
            raise ValueError("shuffle partitions must be positive")
        if self.dead_letter_max <= 0:
            raise ValueError("--dead-letter-max must be positive")
        if self.late_events_max < 0:
            raise ValueError("--late-events-max must be >= 0")
        if not 1 <= self.state_shards <= 1024:
            raise ValueError("--state-shards must be between 1 and 1024")
        if self.state_workers is not None and not 0 <= self.state_workers <= 256:
            raise ValueError("--state-workers must be between 0 and 256")
        if self.sink_retry_ms < 0:
            raise ValueError("--sink-retry-for must be >= 0")
        if self.max_services < 0:
            raise ValueError("--max-services must be 0 (no limit) or positive")
        if not 1 <= self.dimension_values <= 10_000:
            raise ValueError("--dimension-values must be between 1 and 10000")
        for key, _ in self.spark_conf:
            if not key.startswith("spark."):
                raise ValueError(f"--conf {key}: Spark settings start with 'spark.'")
        self.retention.for_source(self.rollup_source_ms)

    @property
    def rollup_source_ms(self) -> int | None:
        """Size of the spec the retention tiers roll up: the smallest tumbling window, if any."""
        return min((w.size_ms for w in self.windows if w.kind == "tumbling"), default=None)


#: Fastest refresh accepted: every refresh is a handful of Redis round trips per open browser tab.
MIN_REFRESH_MS = 250


@dataclass(frozen=True)
class DashboardSettings:
    """What the Streamlit app needs. Durations are integer milliseconds."""

    redis: RedisSettings
    refresh_ms: int = 1_000
    window_range_ms: int = 15 * 60_000
    #: None: 3 of the job's report intervals (its trigger, at least 1 s), as the job states.
    stale_after_ms: int | None = None
    demo_controls: bool = False

    def __post_init__(self) -> None:
        if self.refresh_ms < MIN_REFRESH_MS:
            raise ValueError(f"--refresh must be at least {format_duration(MIN_REFRESH_MS)}")
        if self.window_range_ms <= 0:
            raise ValueError("--window-range must be positive")
        if self.stale_after_ms is not None and self.stale_after_ms <= 0:
            raise ValueError("--stale-after must be positive")

    def app_argv(self) -> list[str]:
        """The app's own flags (to pass after `--`); the Redis URL is left to the environment."""
        argv = [
            f"--redis-prefix={self.redis.prefix}",
            f"--refresh={format_duration(self.refresh_ms)}",
            f"--window-range={format_duration(self.window_range_ms)}",
        ]
        if self.stale_after_ms is not None:
            argv.append(f"--stale-after={format_duration(self.stale_after_ms)}")
        if self.demo_controls:
            argv.append("--demo-controls")
        return argv


def dashboard_settings_from_args(
    args: argparse.Namespace, env: Mapping[str, str]
) -> DashboardSettings:
    """The dashboard's settings from its flags (dashboard/run.py) and the environment."""
    return DashboardSettings(
        redis=RedisSettings.from_env(env, url=args.redis, prefix=args.prefix),
        refresh_ms=args.refresh,
        window_range_ms=args.window_range,
        stale_after_ms=args.stale_after,
        demo_controls=args.demo_controls,
    )


# --- `tidegauge job` ----------------------------------------------------------------------------


def _window_specs(
    texts: list[str], slide: str | None, session_gap: str | None
) -> tuple[WindowSpec, ...]:
    sliding = [t for t in texts if is_sliding_text(t)]
    specs = [WindowSpec.parse(t) for t in texts if t not in sliding]
    if sliding:
        # Sliding rows follow the primary window: the smallest tumbling one.
        step = min((s.size_ms for s in specs if s.kind == "tumbling"), default=None)
        if step is None:
            raise ValueError(SLIDING_NEEDS_STEP)
        specs += [WindowSpec.parse(t, step) for t in sliding]
        if len({s.key for s in specs}) != len(specs):
            raise ValueError("the same --window is given twice")
    if slide is not None:
        if len(specs) != 1 or specs[0].kind != "tumbling":
            raise ValueError("--slide goes with exactly one --window SIZE (or write SIZE/SLIDE)")
        specs = [WindowSpec(specs[0].size_ms, parse_duration(slide))]
    if session_gap is not None:
        gap = parse_duration(session_gap)
        if gap <= 0:
            raise ValueError("--session-gap must be positive")
        bucket = min((s.size_ms for s in specs if s.kind == "tumbling"), default=specs[0].slide_ms)
        specs.append(WindowSpec.session(gap, bucket))
    return tuple(specs)


def default_shuffle_partitions(master: str, cores: int | None = None) -> int:
    """Spark's shuffle partitions when `--shuffle-partitions` is not given.

    One per core of a local master (`local[N]`: N, `local`/`local[*]`: this machine's cores),
    4 for a cluster master, whose cores are not known here. The job's own plan has no shuffle
    (its stateful step runs in the driver); the setting is Spark's, for other queries.
    """
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return 4
    if m.group(1) and m.group(1) != "*":
        return max(1, int(m.group(1)))
    return max(1, cores if cores is not None else (os.cpu_count() or 1))


def add_kafka_options(p: argparse._ActionsContainer) -> None:
    """`--kafka-option KEY=VALUE` (repeatable), for every command that talks to Kafka."""
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a kafka-python client setting for every Kafka client (repeatable; env "
        "TIDEGAUGE_KAFKA_OPTIONS=K=V,K=V), e.g. security_protocol=SSL ssl_cafile=ca.pem "
        "(docs/deploy.md)",
    )


def parse_conf(text: str) -> tuple[str, str]:
    """`KEY=VALUE` of `--conf` (as spark-submit takes it) as a pair; ValueError otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--conf {text!r}: expected KEY=VALUE, e.g. spark.ui.enabled=false")
    return key.strip(), value


def _record_format(args: argparse.Namespace) -> RecordFormat:
    """`--format` with its `--field` entries and `--span-kind`s."""
    fmt = RecordFormat.parse(args.format or "tidegauge", args.field or (), args.span_kind or ())
    if not fmt.own and args.correct_clock_skew:
        raise ValueError("--correct-clock-skew needs the contract's sent_time: --format tidegauge")
    return fmt


def job_config_from_args(args: argparse.Namespace) -> JobConfig:
    """The one validated JobConfig of `tidegauge job`, from its flags and the environment.

    The flags are declared in jobs/cli.py; connection settings may come from the environment.
    """
    available_now = args.trigger.strip().lower() in ("available-now", "availablenow", "once")
    dimensions = parse_dimensions(args.dimension or ())
    register_dimension_fields(dimensions)  # fields a --field map may fill
    return JobConfig(
        kafka=KafkaSettings.from_env(
            bootstrap=args.bootstrap, topic=args.topic, options=args.kafka_option
        ),
        redis=RedisSettings.from_env(url=args.redis, prefix=args.redis_prefix),
        checkpoint=args.checkpoint,
        windows=_window_specs(args.window or ["10s"], args.slide, args.session_gap),
        allowed_lateness_ms=parse_duration(args.allowed_lateness),
        trigger="available-now" if available_now else "processing-time",
        trigger_interval_ms=1000 if available_now else parse_duration(args.trigger),
        starting_offsets=args.starting_offsets,
        max_records_per_trigger=args.max_records_per_trigger or None,
        master=args.master,
        shuffle_partitions=default_shuffle_partitions(args.master)
        if args.shuffle_partitions is None
        else args.shuffle_partitions,
        dead_letter_max=args.dead_letter_max,
        correct_clock_skew=args.correct_clock_skew,
        record_format=_record_format(args),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_bind,
        late_events_max=args.late_events_max,
        state_shards=args.state_shards,
        state_workers=args.state_workers,
        dedup=not args.no_dedup,
        max_services=args.max_services,
        service_idle_ms=parse_duration(args.service_idle),
        dimensions=dimensions,
        dimension_values=args.dimension_values,
        catalog_topic=args.catalog,
        sink_retry_ms=parse_duration(args.sink_retry_for),
        spark_conf=tuple(parse_conf(c) for c in args.conf or ()),
        retention=Retention.parse(args.retention),
        retention_size=parse_size(args.retention_size),
    )
