"""`tidegauge produce`: its flags, the `GeneratorConfig` they build, and the command itself."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tidegauge.core.codecs import CODECS
from tidegauge.core.config import KafkaSettings, RedisSettings, add_kafka_options
from tidegauge.core.durations import parse_duration, parse_instant
from tidegauge.core.signals import stop_on_signals
from tidegauge.traffic.config import (
    DEFAULT_SERVICES,
    PRODUCED_FORMATS,
    SCENARIOS,
    SKEWED_CLOCKS_FRACTION,
    GeneratorConfig,
    parse_latency,
    parse_services,
)
from tidegauge.traffic.producer import ProduceError, produce

__all__ = ["add_arguments", "config_from_args", "run"]

_T = TypeVar("_T")
#: The producer's logger: what it does while running (live commands, Redis trouble) goes to stderr.
log = logging.getLogger("tidegauge.traffic.producer")


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Wrap a parser so argparse shows its ValueError message instead of 'invalid value'."""

    def wrapped(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    wrapped.__name__ = parse.__name__
    return wrapped


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge produce`. Durations take 250ms, 5s, 2m, ..."""
    d = _arg(parse_duration)
    g = p.add_argument_group("kafka")
    g.add_argument("--bootstrap", help="Kafka HOST:PORT (env TIDEGAUGE_KAFKA_BOOTSTRAP)")
    add_kafka_options(g)
    g.add_argument("--topic", help="topic name (env TIDEGAUGE_TOPIC, default events)")
    g.add_argument(
        "--partitions",
        type=int,
        default=3,
        help="partitions of the topic if it is created (default 3)",
    )
    g.add_argument(
        "--connect-timeout",
        type=d,
        default=parse_duration("5s"),
        metavar="DURATION",
        help="give up when the broker cannot be reached in this long (default 5s)",
    )
    g.add_argument(
        "--compression",
        choices=[c.name for c in CODECS],
        default="none",
        help="compress record batches with this codec, as production producers do (default none)",
    )
    p.add_argument(
        "--format",
        choices=PRODUCED_FORMATS,
        default="tidegauge",
        help="what each event is written as: tidegauge (the event contract's JSON, default), "
        "access-log (nginx's JSON access log line, the README's log_format) or otlp_proto / "
        "otlp_json (one OpenTelemetry server span per record, as the Collector's Kafka "
        "exporter writes them, with http.route, method, cloud.region and service.version for "
        "--dimension); "
        "the last three send no heartbeats; for tidegauge job --format of the same name",
    )
    g = p.add_argument_group("volume and pace")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument(
        "--rate", type=float, default=200.0, help="events per second of event time (default 200)"
    )
    g.add_argument("--duration", type=d, metavar="DURATION", help="event time to cover")
    g.add_argument("--count", type=int, help="number of events (incl. malformed) to make")
    g.add_argument(
        "--pace",
        choices=("realtime", "fast"),
        default="realtime",
        help="realtime: send on the wall clock; fast: as fast as possible",
    )
    g.add_argument(
        "--start-time",
        metavar="TIME",
        help="fast pace: event time of the start (epoch ms or ISO; default now)",
    )
    g = p.add_argument_group("traffic shape")
    g.add_argument(
        "--services",
        type=_arg(parse_services),
        default=DEFAULT_SERVICES,
        metavar="NAME:WEIGHT,...",
        help="services and weights (default api:5,web:3,search:2,auth:1,payments:1)",
    )
    g.add_argument("--users", type=int, default=10_000, help="distinct users (default 10000)")
    g.add_argument("--zipf", type=float, default=1.1, help="user popularity exponent (default 1.1)")
    g.add_argument(
        "--anonymous-fraction",
        type=float,
        default=0.02,
        metavar="F",
        help="events without user_id (default 0.02)",
    )
    g.add_argument(
        "--latency",
        type=_arg(parse_latency),
        default=(),
        metavar="NAME=MS[:SIGMA],...",
        help="lognormal latency median (ms) and sigma per service",
    )
    g.add_argument(
        "--error-rate", type=float, default=0.01, metavar="F", help="5xx fraction (default 0.01)"
    )
    g.add_argument(
        "--routes",
        type=int,
        default=7,
        metavar="N",
        help="routes per service (default 7, built-in shares; more follow Zipf's law)",
    )
    g.add_argument(
        "--regions", type=int, default=3, metavar="N", help="regions services run in (default 3)"
    )
    g.add_argument(
        "--attributes",
        action="store_true",
        help="the contract's JSON carries each request's route, method, region and version "
        "(for tidegauge job --dimension; OpenTelemetry spans always do)",
    )
    g = p.add_argument_group("disorder")
    g.add_argument(
        "--out-of-order-fraction",
        type=float,
        default=0.05,
        metavar="F",
        help="events sent up to --max-delay late (default 0.05)",
    )
    g.add_argument(
        "--max-delay",
        type=d,
        default=parse_duration("5s"),
        metavar="DURATION",
        help="longest out-of-order delay (default 5s)",
    )
    g.add_argument(
        "--late-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="events delayed by (lateness, 2*lateness] (default 0)",
    )
    g.add_argument(
        "--lateness",
        type=d,
        default=parse_duration("30s"),
        metavar="DURATION",
        help="the allowed lateness late events exceed (default 30s)",
    )
    g.add_argument(
        "--skew-fraction",
        type=float,
        default=None,  # None: "not given", so --scenario skewed-clocks may choose
        metavar="F",
        help="users whose device clock is off by up to --max-skew "
        f"(default 0; {SKEWED_CLOCKS_FRACTION} with --scenario skewed-clocks)",
    )
    g.add_argument(
        "--max-skew",
        type=d,
        default=parse_duration("2m"),
        metavar="DURATION",
        help="largest device clock offset, either way (default 2m)",
    )
    g.add_argument(
        "--duplicate-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="events sent twice, as producer retries do (default 0)",
    )
    g.add_argument(
        "--duplicate-other-partition",
        type=float,
        default=0.0,
        metavar="F",
        help="share of the duplicates sent to a random partition, not the one of their key "
        "(default 0)",
    )
    g.add_argument(
        "--duplicate-late-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="share of the duplicates re-sent after --lateness, when their original's window "
        "has closed (default 0)",
    )
    g.add_argument(
        "--malformed-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="records that break the contract (default 0)",
    )
    g.add_argument(
        "--fuzz",
        action="store_true",
        help="malformed records of every fuzzing kind: random bytes, deep nesting, NaN and "
        "Infinity, booleans, duplicate keys, nulls, oversized and 1 MB records, names too long, "
        "empty key and value (default: the basic 14 kinds)",
    )
    g.add_argument(
        "--iso-fraction",
        type=float,
        default=0.1,
        metavar="F",
        help="events with ISO-8601 times instead of epoch ms (default 0.1)",
    )
    g.add_argument(
        "--network-delay",
        type=d,
        default=parse_duration("50ms"),
        metavar="DURATION",
        help="longest delay from send to broker receipt, the Kafka timestamp (default 50ms)",
    )
    g.add_argument(
        "--heartbeat-interval",
        type=d,
        default=None,
        metavar="DURATION",
        help="event time between heartbeat rounds to every partition; 0 disables (default 1s; "
        "none with --format access-log)",
    )
    g.add_argument(
        "--heartbeat-tail",
        type=d,
        default=0,
        metavar="DURATION",
        help="keep sending heartbeats this long after the last event, so the last windows "
        "close (default 0)",
    )
    g = p.add_argument_group("scenarios (docs/events.md)")
    g.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        default=None,
        metavar="NAME",
        help=f"a preset lesson; repeatable: {', '.join(SCENARIOS)}",
    )
    g.add_argument(
        "--burst-at",
        type=d,
        metavar="DURATION",
        help="late-burst: when the device comes back, after the start "
        "(default half of --duration, else 60s)",
    )
    g.add_argument(
        "--burst-span",
        type=d,
        metavar="DURATION",
        help="late-burst: how long the device was offline, buffering (default 1h)",
    )
    g.add_argument(
        "--burst-rate",
        type=float,
        metavar="R",
        help="late-burst: events per second the device buffered (default 1)",
    )
    g.add_argument(
        "--backlog-at",
        type=d,
        metavar="DURATION",
        help="backlog: when the job pauses, after the start (default a third of --duration, "
        "else 20s)",
    )
    g.add_argument(
        "--backlog-pause",
        type=d,
        metavar="DURATION",
        help="backlog: how long the job pauses (default 30s)",
    )
    g.add_argument(
        "--live-commands",
        action="store_true",
        help="take demo commands (latency incident, late burst) from the Redis hash "
        "PREFIX:control while running, about once a second; needs --pace realtime",
    )
    g.add_argument(
        "--redis",
        metavar="URL",
        help="backlog, --live-commands: Redis the job reads its pause from and the commands "
        "live in (env TIDEGAUGE_REDIS_URL)",
    )
    g.add_argument(
        "--redis-prefix",
        default="tg",
        metavar="PREFIX",
        help="backlog, --live-commands: the job's Redis key prefix (default tg)",
    )
    g = p.add_argument_group("output")
    g.add_argument("--truth", metavar="PATH", help="write ground truth JSON lines here")
    g.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace, now_ms: int | None = None) -> GeneratorConfig:
    """Build the config from parsed flags; raises ValueError naming the bad flag.

    `now_ms` (default: the wall clock) resolves the fast pace's default start (now, rounded
    down to the second) and relative --start-time values such as "15m". Scenario presets are
    resolved here, where "the flag was not given" is still known: `skewed-clocks` sets
    --skew-fraction to 0.3 only when that flag is absent.
    """
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    start: int | None = None
    if args.start_time is not None:
        start = parse_instant(args.start_time, now_ms)
    elif args.pace == "fast":
        start = now_ms - now_ms % 1000
    scenarios = tuple(args.scenario or ())
    # A scenario's knobs given without the scenario would be silently ignored: refuse instead.
    for flag, value, scenario in (
        ("--burst-at", args.burst_at, "late-burst"),
        ("--burst-span", args.burst_span, "late-burst"),
        ("--burst-rate", args.burst_rate, "late-burst"),
        ("--backlog-at", args.backlog_at, "backlog"),
        ("--backlog-pause", args.backlog_pause, "backlog"),
    ):
        if value is not None and scenario not in scenarios:
            raise ValueError(f"{flag} only applies to --scenario {scenario}")
    skew_fraction = args.skew_fraction
    if skew_fraction is None:
        skew_fraction = SKEWED_CLOCKS_FRACTION if "skewed-clocks" in scenarios else 0.0
    defaults = GeneratorConfig()
    return GeneratorConfig(
        seed=args.seed,
        rate=args.rate,
        duration_ms=args.duration,
        count=args.count,
        pace=args.pace,
        start_time_ms=start,
        partitions=args.partitions,
        services=args.services,
        users=args.users,
        zipf=args.zipf,
        anonymous_fraction=args.anonymous_fraction,
        latency=args.latency,
        error_rate=args.error_rate,
        out_of_order_fraction=args.out_of_order_fraction,
        max_delay_ms=args.max_delay,
        late_fraction=args.late_fraction,
        lateness_ms=args.lateness,
        skew_fraction=skew_fraction,
        max_skew_ms=args.max_skew,
        duplicate_fraction=args.duplicate_fraction,
        duplicate_other_partition=args.duplicate_other_partition,
        duplicate_late_fraction=args.duplicate_late_fraction,
        malformed_fraction=args.malformed_fraction,
        fuzz=args.fuzz,
        iso_fraction=args.iso_fraction,
        heartbeat_interval_ms=_given(
            args.heartbeat_interval, ONE_SECOND if args.format == "tidegauge" else 0
        ),
        heartbeat_tail_ms=args.heartbeat_tail,
        network_delay_ms=args.network_delay,
        scenarios=scenarios,
        burst_at_ms=args.burst_at,
        burst_span_ms=_given(args.burst_span, defaults.burst_span_ms),
        burst_rate=_given(args.burst_rate, defaults.burst_rate),
        backlog_at_ms=args.backlog_at,
        backlog_pause_ms=_given(args.backlog_pause, defaults.backlog_pause_ms),
        live_commands=args.live_commands,
        record_format=args.format,
        routes=args.routes,
        regions=args.regions,
        attributes=args.attributes,
    )


ONE_SECOND = 1_000


def _given(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def run(args: argparse.Namespace) -> int:
    """`tidegauge produce`: send the stream, print a summary.

    Exit status: 0 when done or stopped by SIGINT/SIGTERM, 1 on Kafka (or, with
    `--scenario backlog` or `--live-commands`, Redis at the start) errors, 2 on bad flags.
    """
    # Our own messages say what failed; kafka-python's log lines would only repeat it as noise.
    logging.getLogger("kafka").addHandler(logging.NullHandler())
    # Ours (live commands carried out, Redis trouble while running) go to stderr as they happen.
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tidegauge produce: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    try:
        kafka = KafkaSettings.from_env(
            bootstrap=args.bootstrap, topic=args.topic, options=args.kafka_option
        )
        config = config_from_args(args)
        redis_settings = None
        if "backlog" in config.scenarios or config.live_commands:  # only then is Redis used
            redis_settings = RedisSettings.from_env(url=args.redis, prefix=args.redis_prefix)
    except ValueError as e:
        print(f"tidegauge produce: error: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            summary = produce(
                config,
                kafka,
                truth_path=args.truth,
                progress=not args.quiet,
                stop=stop,
                connect_timeout_ms=args.connect_timeout,
                redis_settings=redis_settings,
                compression=args.compression,
            )
    except (ProduceError, OSError) as e:
        print(f"tidegauge produce: error: {e}", file=sys.stderr)
        return 1
    print(summary.format(), flush=True)
    return 0
