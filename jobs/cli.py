"""`tidegauge job`: its flags, the `JobConfig` they build, and the command itself."""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import time
from typing import Any

import redis

from jobs.pipeline import run_job
from jobs.runtime.session import (
    build_session,
    check_executors,
    quiet_task_failures,
    ran_out_of_memory,
)
from jobs.sink.status import progress_summary
from jobs.source.offset_log import next_watermark
from tidegauge.catalog import SLO_COUNTS_PLUGIN
from tidegauge.core.config import (
    DEFAULT_MAX_RECORDS_PER_TRIGGER,
    JobConfig,
    add_kafka_options,
    job_config_from_args,
    redact_url,
)
from tidegauge.core.dimensions import DEFAULT_VALUES
from tidegauge.core.durations import format_duration, to_iso
from tidegauge.core.formats import FORMATS, SPAN_KINDS
from tidegauge.core.kafka_options import redacted
from tidegauge.core.plugins import load_plugins
from tidegauge.core.retention import DEFAULT_RETENTION, DEFAULT_RETENTION_SIZE, format_size
from tidegauge.core.store import connect
from tidegauge.core.windows import WindowSpec

__all__ = ["add_arguments", "failure_reason", "run"]

log = logging.getLogger("tidegauge.job")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge job` (names are part of the contract with the acceptance tests)."""
    p.add_argument("--bootstrap", help="Kafka HOST:PORT (env TIDEGAUGE_KAFKA_BOOTSTRAP)")
    add_kafka_options(p)
    p.add_argument("--topic", help="topic to read (env TIDEGAUGE_TOPIC, default events)")
    p.add_argument("--redis", help="Redis URL (env TIDEGAUGE_REDIS_URL)")
    p.add_argument("--redis-prefix", default="tg", help="key prefix in Redis (default tg)")
    p.add_argument("--checkpoint", required=True, help="directory for Spark offsets and state")
    p.add_argument(
        "--window",
        action="append",
        metavar="SIZE[/SLIDE]",
        help="event-time window: 10s tumbling, 60s/10s hopping, 60s/sliding (busiest 60 s "
        "and rolling 60 s, per primary window; @RES sets the peak's resolution, default "
        "100ms); repeat for several (default 10s)",
    )
    p.add_argument("--slide", help="slide of the (single) --window: makes it hopping")
    p.add_argument(
        "--session-gap",
        help="also track per-user sessions closed after this much silence (e.g. 30s); "
        "sessions are reported per smallest tumbling window of their last event",
    )
    p.add_argument("--allowed-lateness", default="30s", help="watermark delay (default 30s)")
    p.add_argument(
        "--trigger",
        default="1s",
        help="processing-time interval (default 1s) or available-now (drain the topic, exit)",
    )
    p.add_argument("--starting-offsets", choices=["earliest", "latest"], default="earliest")
    p.add_argument(
        "--max-records-per-trigger",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_TRIGGER,
        metavar="N",
        help=f"records one batch reads at most (default {DEFAULT_MAX_RECORDS_PER_TRIGGER}; 0: "
        "no limit): a backlog is taken in batches of this size, each committed and shown as it "
        "ends, instead of in one batch (docs/deploy.md)",
    )
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--shuffle-partitions",
        type=int,
        default=None,
        help="Spark's spark.sql.shuffle.partitions (default: one per core of a local master, "
        "4 on a cluster); the job's own plan has no shuffle (its stateful step runs in the "
        "driver), so only queries of your own in the same session see it",
    )
    p.add_argument(
        "--dead-letter-max", type=int, default=100_000, help="dead letters kept (newest)"
    )
    p.add_argument(
        "--late-events-max",
        type=int,
        default=10_000,
        help="late events kept in the late store (newest by broker time), and at most this many "
        "per state shard and batch (default 10000)",
    )
    p.add_argument(
        "--correct-clock-skew",
        action="store_true",
        help="estimate each device's clock offset (broker receive time - sent_time) and move "
        "event times onto the broker's clock before windowing (off by default; docs/time.md)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="tidegauge",
        help="what the topic's records are: tidegauge (the event contract's JSON, default), "
        "access-log (JSON access logs, nginx or Envoy, read through --field entries) or "
        "otlp_proto / otlp_json (OpenTelemetry spans as the Collector's Kafka exporter writes "
        "them); docs/events.md",
    )
    p.add_argument(
        "--span-kind",
        action="append",
        choices=tuple(SPAN_KINDS),
        help="with --format otlp_*: the spans that are requests (repeat it; default server and "
        "consumer)",
    )
    p.add_argument(
        "--field",
        action="append",
        metavar="TARGET=SOURCE[:UNIT]",
        help="with --format access-log: where a contract field comes from, e.g. "
        "event_time=msec:s service=host latency_ms=request_time:s status=status "
        "user_id=remote_user event_id=request_id (repeat it; docs/events.md)",
    )
    p.add_argument(
        "--no-dedup",
        action="store_true",
        help="count every event, also one whose event_id was already counted (de-duplication "
        "by event_id is on by default; docs/time.md)",
    )
    p.add_argument(
        "--sink-retry-for",
        default="10m",
        metavar="DURATION",
        help="how long to retry writing to an unreachable Redis (with back-off) before the job "
        "stops with an error; a restart resumes from the checkpoint (default 10m)",
    )
    p.add_argument(
        "--max-services",
        type=int,
        default=1_000,
        metavar="N",
        help="services tracked at once (default 1000; 0: no limit); events of further names "
        "count under the service '(other)', and the names are counted (docs/events.md)",
    )
    p.add_argument(
        "--service-idle",
        default="1h",
        metavar="DURATION",
        help="how long a tracked service name without events keeps its --max-services slot, "
        "in event time (default 1h)",
    )
    p.add_argument(
        "--dimension",
        action="append",
        metavar="NAME",
        help="also slice every window by this event attribute (repeatable): a field of the "
        "event, an OpenTelemetry attribute (route, method, region, version, environment, or "
        "its own name, e.g. http.route), status_class, or a combination such as route+method "
        "(docs/dimensions.md)",
    )
    p.add_argument(
        "--catalog",
        nargs="?",
        const="catalog",
        metavar="TOPIC",
        help="join each event to the service catalog (default topic: catalog) as of its event "
        "time, for --dimension team and --dimension tier (docs/catalog.md)",
    )
    p.add_argument(
        "--dimension-values",
        type=int,
        default=DEFAULT_VALUES,
        metavar="N",
        help=f"values kept per service and dimension: the busiest N (default {DEFAULT_VALUES}); "
        "the rest count under '(other)'",
    )
    p.add_argument(
        "--state-shards",
        type=int,
        default=4,
        help="state shards the services are hashed onto (default 4; fixed for a checkpoint)",
    )
    p.add_argument(
        "--state-workers",
        type=int,
        default=None,
        metavar="N",
        help="processes of the driver that run the state shards side by side (default: one "
        "per core, at most --state-shards; 0: in the driver's own process)",
    )
    p.add_argument(
        "--conf",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark setting, as spark-submit takes it (repeat for several); applied over "
        "Tidegauge's own, Java options are added to Tidegauge's (docs/deploy.md)",
    )
    p.add_argument(
        "--retention",
        default=DEFAULT_RETENTION,
        metavar="RAW_TTL[,SIZE:TTL...]",
        help=f"how long windows are kept, then rolled up into coarser windows kept longer, in "
        f"event time behind the watermark (default {DEFAULT_RETENTION}: 10s windows for 6h, "
        "1m and 10m roll-ups for 7d, 1h roll-ups for 90d; 'forever' keeps everything; "
        "docs/redis.md)",
    )
    p.add_argument(
        "--retention-size",
        default=DEFAULT_RETENTION_SIZE,
        metavar="SIZE",
        help=f"bytes the job's stores (the services' and each --dimension's) may take once "
        f"their tiers are full (default "
        f"{DEFAULT_RETENTION_SIZE}; 'none': no limit): when the windows' measured sizes say "
        "--retention would not fit, all its TTLs are shortened by one factor (docs/redis.md)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics (/metrics), /healthz and /readyz on this port "
        "(off by default; docs/deploy.md)",
    )
    p.add_argument(
        "--metrics-bind",
        default="127.0.0.1",
        metavar="HOST",
        help="the address the metrics port listens on (default 127.0.0.1; 0.0.0.0 for a "
        "Prometheus on another machine)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log every batch")


def _window_text(w: WindowSpec) -> str:
    if w.kind == "session":
        return f"sessions (gap {format_duration(w.gap_ms)})"
    if w.kind == "tumbling":
        return format_duration(w.size_ms)
    if w.kind == "sliding":
        return f"{format_duration(w.size_ms)}/sliding@{format_duration(w.resolution_ms)}"
    return f"{format_duration(w.size_ms)}/{format_duration(w.slide_ms)}"


def failure_reason(text: str) -> str:
    """The one line worth printing of a failed query's text (Spark wraps errors in tracebacks).

    A `SourceError` raised on an executor (an undecodable batch, an offset gone) is found in the
    Python traceback Spark embeds and returned alone; any other Python error Spark embeds is
    returned as its exception line (Spark's own first line only says a traceback follows);
    anything else is the text's first line.
    """
    found = re.findall(r"(?:SourceError|SinkError): (.+)", text)
    if found:
        return str(found[-1]).strip()
    raised = re.findall(
        r"Traceback \(most recent call last\):\n(?:[ \t]+[^\n]*\n)+(\S[^\n]*)", text
    )
    # The worker's own error, not the wrappers Spark and py4j raise around it.
    raised = [x.strip() for x in raised if not x.startswith(("pyspark.", "py4j."))]
    if raised:
        return f"{raised[-1]} (--verbose shows where)"
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def _trigger_text(cfg: JobConfig) -> str:
    if cfg.trigger == "available-now":
        return cfg.trigger
    return format_duration(cfg.trigger_interval_ms)


def _retried_by_kafka(record: logging.LogRecord) -> bool:
    """Log kafka-python's failed metadata refreshes as warnings: it retries them itself.

    Its refresh loop backs off and asks again (a connection the broker closed cancels the
    request in flight), yet it logs each failure as an error. The job's own errors stay errors.
    """
    if record.levelno == logging.ERROR and record.msg == "Metadata refresh: failed %s":
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


def run(args: argparse.Namespace) -> int:
    """CLI entry: validate, connect, run until done or Ctrl-C/SIGTERM."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    log.setLevel(logging.INFO)
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("kafka.cluster").addFilter(_retried_by_kafka)
    if not args.verbose:
        # py4j logs a failed foreachBatch call's traceback; the query's failure says it once.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    if args.catalog:  # the exact SLO counts, loaded as plugins are (on executors too)
        load_plugins([SLO_COUNTS_PLUGIN])
    try:
        cfg = job_config_from_args(args)
    except ValueError as e:
        print(f"tidegauge job: {e}", file=sys.stderr)
        return 2
    try:
        connect(cfg.redis).ping()
    except redis.RedisError as e:
        print(
            f"tidegauge job: cannot reach Redis at {redact_url(cfg.redis.url)}: {e}",
            file=sys.stderr,
        )
        return 1
    stopping = {"flag": False}

    def _stop(signum: int, frame: Any) -> None:
        stopping["flag"] = True
        if not args.verbose:
            # py4j logs a lost JVM connection on the root logger: when a supervisor stops the
            # JVM too, the stop line below says it once instead (our own logger keeps going)
            logging.getLogger().setLevel(logging.CRITICAL)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(
        f"tidegauge job: {cfg.kafka.topic}@{cfg.kafka.bootstrap} -> {redact_url(cfg.redis.url)}; "
        f"windows {', '.join(_window_text(w) for w in cfg.windows)}, allowed lateness "
        f"{format_duration(cfg.allowed_lateness_ms)}, trigger "
        f"{_trigger_text(cfg)}"
        f"{', clock-skew correction on' if cfg.correct_clock_skew else ''}"
        f"{', ' + cfg.record_format.describe() if not cfg.record_format.own else ''}"
        f"{'' if cfg.dedup else ', de-duplication off'}"
        f"{', dimensions ' + ', '.join(d.name for d in cfg.dimensions) if cfg.dimensions else ''}"
        f"{', catalog ' + cfg.catalog_topic + ' as of event time' if cfg.catalog_topic else ''}"
        f", retention {cfg.retention.for_source(cfg.rollup_source_ms).text()}"
        f"{' within ' + format_size(cfg.retention_size) if cfg.retention_size else ''}"
        f"{'; kafka ' + redacted(cfg.kafka.options) if cfg.kafka.options else ''}",
        flush=True,
    )
    started = time.monotonic()
    try:
        spark = build_session(
            cfg.master,
            shuffle_partitions=cfg.shuffle_partitions,
            conf=cfg.spark_conf,
            checkpoint=cfg.checkpoint,
        )
        if not args.verbose:
            quiet_task_failures(spark)
        if not cfg.master.strip().startswith("local"):
            hosts = check_executors(spark)
            print(
                f"tidegauge job: {spark.sparkContext.defaultParallelism} executor cores on "
                f"{', '.join(hosts)} ({cfg.master}), each running tidegauge",
                flush=True,
            )
        query = run_job(cfg, spark, stop=lambda: stopping["flag"])
    except Exception as e:  # a clear one-line reason, not a JVM stack trace
        if stopping["flag"]:
            # Stopped while Spark's JVM was stopped too (a supervisor that signals every
            # process, as systemd does): the batch in progress, if any, was not committed and
            # the next start from the checkpoint does it again (docs/reliability.md).
            print(
                f"tidegauge job: stopped after {time.monotonic() - started:.1f}s with Spark's "
                "JVM; the next start redoes any batch in progress "
                "(`tidegauge query status` has the batches' records and freshness)",
                flush=True,
            )
            return 0
        reason = failure_reason(str(e))
        if ran_out_of_memory(e):
            reason = (
                "Spark's JVM ran out of heap (java.lang.OutOfMemoryError; its log above says "
                "where). Give it more (--conf spark.driver.memory=4g in local mode, "
                "spark.executor.memory on a cluster), or hand it less at a time: a lower "
                "--max-records-per-trigger or fewer dimensions (the JVM holds each batch's "
                'summaries on their way to the driver; docs/dimensions.md, "What it costs"). '
                "The next start resumes from the checkpoint"
            )
        print(f"tidegauge job: failed: {reason}", file=sys.stderr)
        return 1
    last = query.lastProgress
    print(
        f"tidegauge job: stopped after {time.monotonic() - started:.1f}s; last batch "
        f"{last.batchId if last else '-'}; {_next_watermark_text(cfg, last)} "
        "(`tidegauge query status` has the batches' records and freshness)",
        flush=True,
    )
    return 0


def _next_watermark_text(cfg: JobConfig, last: Any) -> str:
    """Where event time stands for the next run from this checkpoint, for the stop line.

    From Spark's commit log when the checkpoint is local (what a restart really reads), else
    from the last batch's progress (its watermark advanced by what it saw).
    """
    ms = next_watermark(cfg.checkpoint)
    if ms is None and last is not None:
        ms = progress_summary(json.loads(last.json), cfg.allowed_lateness_ms)["watermark"]
    if not ms:
        return "no watermark yet (no event time seen)"
    return f"the next run starts at watermark {to_iso(ms)}"
