"""The Kafka edge of `tidegauge produce`: send `generate()`'s records and write the ground truth.

All decisions about the traffic live in the pure `tidegauge.traffic.generator`; this module only
paces, sends, and records where every record landed (partition and offset from the broker's
acknowledgement), so the ground-truth file can be checked against the topic record by record.

Each record goes out with its Kafka timestamp set to the generator's `receive_ms`, standing in
for the broker's receive time. Control records (`--scenario backlog`) are not sent: they are
executed, by writing the job's pause into Redis.

With `--live-commands`, a thread reads the demo commands (`tidegauge.core.control`) from Redis about
once a second and the sending loop hands each change to the generator between two records; what
the generator did with them is logged as it happens and counted in the summary. A Redis that
goes away while running costs a warning, not the run: the last commands read stay in force.
"""

from __future__ import annotations

import collections
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import redis
from kafka import KafkaProducer
from kafka.errors import KafkaError
from redis.backoff import NoBackoff
from redis.retry import Retry
from tqdm import tqdm

from tidegauge.core.codecs import codec_by_name, missing_library
from tidegauge.core.config import KafkaSettings, RedisSettings, redact_url
from tidegauge.core.control import DemoCommands, read_commands, request_pause
from tidegauge.core.durations import format_duration, to_iso
from tidegauge.traffic.config import GeneratorConfig
from tidegauge.traffic.generator import generate
from tidegauge.traffic.live import Applied, LiveCommands
from tidegauge.traffic.records import Record
from tidegauge.traffic.topics import ensure_topic

__all__ = ["ProduceError", "Summary", "produce"]

# Batching matters: one record per request topped out near 17k records/s on our 2-core machines.
_PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "retries": 5,
    "linger_ms": 20,
    "batch_size": 256 * 1024,
    "client_id": "tidegauge-produce",
}
# Acknowledgements are collected in send order; at most this many records wait for theirs, so
# memory stays bounded however long the run.
_MAX_PENDING = 20_000
_ACK_TIMEOUT_S = 60.0
#: After a stop signal the records still pending get this long to be acknowledged: a supervisor
#: that stops everything at once stops the broker too, and the demo kills what has not exited
#: within its grace (15 s).
_STOP_ACK_TIMEOUT_S = 5.0
#: How often live commands are read from Redis, and how long one read may take: an outage then
#: costs the polling thread a second per try and the sending loop nothing.
_POLL_INTERVAL_S = 1.0
_POLL_TIMEOUT_S = 1.0

_log = logging.getLogger(__name__)


class ProduceError(RuntimeError):
    """Sending failed (broker unreachable, record not acknowledged); the message says why."""


@dataclass(frozen=True)
class Summary:
    """What one run sent. Intents count events (originals, not their duplicates).

    `records` counts what went to Kafka; `controls` counts control records, which were
    executed instead. `start_ms`/`end_ms` are the generator clock (epoch ms, UTC) at the start
    and at the last record; `elapsed_s` is wall time from the first send to the last
    acknowledgement.
    """

    topic: str
    partitions: int
    records: int
    events: int
    duplicates: int
    malformed: int
    heartbeats: int
    in_order: int
    out_of_order: int
    late: int
    elapsed_s: float
    start_ms: int
    end_ms: int
    interrupted: bool = False
    buffered: int = 0
    controls: int = 0
    commands: tuple[Applied, ...] = ()

    @property
    def records_per_s(self) -> float:
        """Records sent (all kinds) per second of wall time."""
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def format(self) -> str:
        """A few lines for the terminal."""
        stopped = " (stopped early)" if self.interrupted else ""
        lines = [
            f"sent {self.records:,} records to {self.topic!r} ({self.partitions} partitions) in "
            f"{self.elapsed_s:.2f} s, {self.records_per_s:,.0f} records/s{stopped}",
            f"  events      {self.events:>10,}   in-order {self.in_order:,}, "
            f"out-of-order {self.out_of_order:,}, late {self.late:,}"
            + (f", buffered {self.buffered:,}" if self.buffered else ""),
            f"  duplicates  {self.duplicates:>10,}",
            f"  malformed   {self.malformed:>10,}",
            f"  heartbeats  {self.heartbeats:>10,}",
        ]
        if self.controls:
            lines.append(f"  controls    {self.controls:>10,}   executed in Redis, not sent")
        if self.commands:
            kinds = collections.Counter(c.kind for c in self.commands)
            burst_events = sum(c.events for c in self.commands if c.kind == "late_burst")
            lines.append(
                f"  commands    {len(self.commands):>10,}   live from Redis: "
                f"incidents {kinds['incident']}, late bursts {kinds['late_burst']} "
                f"({burst_events:,} events), pauses seen {kinds['pause']}"
            )
        lines.append(
            f"  event time  {to_iso(self.start_ms)} .. {to_iso(self.end_ms)} "
            f"({format_duration(self.end_ms - self.start_ms)})"
        )
        return "\n".join(lines)


def _compression_type(compression: str) -> str | None:
    """kafka-python's `compression_type` for a `--compression` name; ProduceError if unusable."""
    try:
        codec = codec_by_name(compression)
    except ValueError as e:
        raise ProduceError(str(e)) from None
    why = missing_library(codec)
    if why is not None:
        raise ProduceError(f"--compression {compression}: {why}")
    return None if codec.name == "none" else codec.name


def _connect(kafka: KafkaSettings, connect_timeout_ms: int, compression: str) -> KafkaProducer:
    compression_type = _compression_type(compression)
    try:
        config: dict[str, Any] = {
            "bootstrap_timeout_ms": connect_timeout_ms,
            "compression_type": compression_type,
            **_PRODUCER_CONFIG,
            **kafka.client_config("producer"),  # --kafka-option wins
        }
        return KafkaProducer(bootstrap_servers=kafka.bootstrap.split(","), **config)
    except KafkaError as e:
        raise ProduceError(
            f"cannot reach Kafka at {kafka.bootstrap} within "
            f"{format_duration(connect_timeout_ms)}: {e}"
        ) from None


def _connect_redis(settings: RedisSettings, connect_timeout_ms: int, why: str) -> redis.Redis:
    timeout_s = connect_timeout_ms / 1000
    client = redis.Redis.from_url(
        settings.url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
    )
    try:
        client.ping()
    except redis.RedisError as e:
        client.close()
        url = redact_url(settings.url)
        raise ProduceError(f"{why}: cannot reach Redis at {url}: {e}") from None
    return client


class _CommandPoller:
    """Reads the live commands about once a second, in a thread of its own.

    The sending loop only looks at `snapshot` (a (version, commands) pair, replaced whole, so
    reading it needs no lock); a slow or absent Redis holds up this thread, never the sending.
    Failures are logged once per outage (or per distinct junk in the hash), not once a second,
    and the last commands read stay in force.
    """

    def __init__(
        self,
        settings: RedisSettings,
        initial: DemoCommands | None,
        problem: tuple[str, str] | None = None,
    ) -> None:
        from tidegauge.core.store import Keys  # the Redis layout, only imported when it is needed

        self._keys = Keys(settings.prefix)
        self._url = redact_url(settings.url)
        # Short timeouts and no retries: each poll fails fast, and the next one is a retry.
        self._client = redis.Redis.from_url(
            settings.url,
            socket_connect_timeout=_POLL_TIMEOUT_S,
            socket_timeout=_POLL_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        self.snapshot: tuple[int, DemoCommands | None] = (0, initial)
        self._problem = problem  # (kind, detail) of the failure already warned about
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidegauge-commands", daemon=True)

    def start(self) -> None:
        """Start polling in the background."""
        self._thread.start()

    def close(self) -> None:
        """Stop polling and close the connection."""
        self._stop.set()
        self._thread.join(timeout=5 * _POLL_TIMEOUT_S)
        self._client.close()

    def poll(self) -> None:
        """One read of the commands; on failure, warn (once per problem) and keep the last."""
        try:
            commands = read_commands(self._client, self._keys)
        except redis.RedisError as e:
            # One outage, one warning: its error text changes as the connection goes away.
            self._trouble(
                ("redis", ""), f"cannot read live commands from Redis at {self._url}: {e}"
            )
            return
        except ValueError as e:
            self._trouble(
                ("junk", str(e)), f"ignoring the live commands in {self._keys.control}: {e}"
            )
            return
        if self._problem is not None:
            _log.info("live commands: reading %s again", self._keys.control)
            self._problem = None
        version, last = self.snapshot
        if commands != last:
            self.snapshot = (version + 1, commands)

    def _trouble(self, problem: tuple[str, str], message: str) -> None:
        if problem != self._problem:
            _log.warning("%s; keeping the last commands and sending on", message)
            self._problem = problem

    def _run(self) -> None:
        while not self._stop.wait(_POLL_INTERVAL_S):
            self.poll()


def _no_controls(record: Record) -> None:
    raise ProduceError(f"control record {record.seq} needs Redis (--scenario backlog)")


def _control_executor(
    settings: RedisSettings, client: redis.Redis, clock: Callable[[], float]
) -> Callable[[Record], None]:
    """What carrying out a control record means: today, one pause of the job, set in Redis."""
    from tidegauge.core.store import (
        Keys,  # the Redis layout, only imported when a scenario needs it
    )

    keys = Keys(settings.prefix)

    def execute(record: Record) -> None:
        command = json.loads(record.value)
        if command.get("control") != "pause":
            raise ProduceError(f"unknown control record {record.value!r}")
        # The job compares pause_until with its own wall clock, so it is wall time, not the
        # generator clock (the two agree in realtime pace, the only pace with a backlog).
        try:
            request_pause(client, keys, int(clock() * 1000), int(command["pause_ms"]))
        except redis.RedisError as e:
            raise ProduceError(
                f"cannot write the pause to Redis at {redact_url(settings.url)}: {e}"
            ) from None

    return execute


def produce(
    config: GeneratorConfig,
    kafka: KafkaSettings,
    *,
    truth_path: str | Path | None = None,
    progress: bool = False,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.time,
    connect_timeout_ms: int = 5_000,
    redis_settings: RedisSettings | None = None,
    compression: str = "none",
) -> Summary:
    """Send `config`'s stream to `kafka.topic` and return what was sent.

    Creates the topic (`config.partitions`) if missing; heartbeats go to every partition the
    topic really has. In realtime pace, event time starts at `clock()` (seconds, UTC) and each
    record waits for its send time; in fast pace it starts at `config.start_time_ms` (default:
    `clock()` rounded down to the second) and records go out as fast as the broker takes them.
    Every record's Kafka timestamp is its `receive_ms`. Control records are executed, not
    sent: `--scenario backlog` writes `pause_until` (wall clock `clock()` + the pause, epoch
    ms) into the hash `Keys(prefix).control` of `redis_settings`, which must be reachable
    before anything is sent. With `config.live_commands`, that Redis must be reachable at the
    start too; the same hash is then read about once a second (`tidegauge.core.control`) and the
    generator applies what it holds. The summary lists what it did (`Summary.commands`).
    Setting `stop` (or Ctrl-C) ends the run cleanly: pending records are flushed and
    acknowledged, and the truth file is complete for everything sent; what the broker has not
    acknowledged 5 s after the stop (it was stopped too) raises `ProduceError`, the truth file
    then holding the acknowledged records.
    Record batches are compressed with `compression` (`none`, `gzip`, `snappy`, `lz4`, `zstd`).
    Raises `ProduceError` when the broker or a needed Redis cannot be reached, a record is not
    acknowledged, or the codec is unknown or its library missing (checked before anything else).
    """
    _compression_type(compression)
    if stop is None:
        stop = threading.Event()
    client: redis.Redis | None = None
    execute: Callable[[Record], None] = _no_controls
    poller: _CommandPoller | None = None
    live: LiveCommands | None = None
    needs = [
        flag
        for flag, on in (
            ("--scenario backlog", "backlog" in config.scenarios),
            ("--live-commands", config.live_commands),
        )
        if on
    ]
    # Fail before sending anything, not at the pause or the first command.
    if needs and redis_settings is None:
        raise ProduceError(f"{needs[0]} needs Redis (--redis or TIDEGAUGE_REDIS_URL)")
    try:
        if needs:
            assert redis_settings is not None
            client = _connect_redis(redis_settings, connect_timeout_ms, " and ".join(needs))
            execute = _control_executor(redis_settings, client, clock)
        if config.live_commands:
            assert redis_settings is not None and client is not None
            live, poller = _start_live_commands(redis_settings, client)
        return _produce(
            config,
            kafka,
            truth_path,
            progress,
            stop,
            clock,
            connect_timeout_ms,
            execute,
            live,
            poller,
            compression,
        )
    finally:
        if poller is not None:
            poller.close()
        if client is not None:
            client.close()


def _start_live_commands(
    settings: RedisSettings, client: redis.Redis
) -> tuple[LiveCommands, _CommandPoller]:
    """The commands in force at the start, and the thread that reads what changes after.

    A late burst requested before the start is not sent: it was meant for an earlier run.
    """
    from tidegauge.core.store import Keys

    key = Keys(settings.prefix).control
    initial: DemoCommands | None = None
    problem = None
    try:
        initial = read_commands(client, Keys(settings.prefix))
    except redis.RedisError as e:
        raise ProduceError(
            f"--live-commands: cannot read {key} from Redis at {redact_url(settings.url)}: {e}"
        ) from None
    except ValueError as e:  # junk left in the hash must not keep the demo from starting
        _log.warning("ignoring the live commands in %s: %s; sending on", key, e)
        problem = ("junk", str(e))
    _log.info("live commands: reading %s at %s about once a second", key, redact_url(settings.url))
    poller = _CommandPoller(settings, initial, problem)
    poller.start()
    return LiveCommands(initial), poller


def _produce(
    config: GeneratorConfig,
    kafka: KafkaSettings,
    truth_path: str | Path | None,
    progress: bool,
    stop: threading.Event,
    clock: Callable[[], float],
    connect_timeout_ms: int,
    execute: Callable[[Record], None],
    live: LiveCommands | None,
    poller: _CommandPoller | None,
    compression: str,
) -> Summary:
    producer = _connect(kafka, connect_timeout_ms, compression)
    try:
        try:
            partitions = ensure_topic(kafka, config.partitions, timeout_s=connect_timeout_ms / 1000)
        except (KafkaError, RuntimeError) as e:
            raise ProduceError(
                f"cannot create topic {kafka.topic!r} on {kafka.bootstrap}: {e}"
            ) from None
        if partitions != config.partitions:
            config = replace(config, partitions=partitions)
        now_ms = int(clock() * 1000)
        start_ms = now_ms - now_ms % 1000
        if config.pace == "realtime":
            start_ms = now_ms
        elif config.start_time_ms is not None:
            start_ms = config.start_time_ms
        with _truth_writer(truth_path) as write_truth:
            return _send(
                config,
                kafka,
                producer,
                start_ms,
                write_truth,
                progress,
                stop,
                execute,
                live,
                poller,
            )
    finally:
        _close(producer, timeout_s=1 if stop.is_set() else 5)


def _close(producer: KafkaProducer, timeout_s: float) -> None:
    """Close, dropping what the broker has not taken within `timeout_s` (already reported).

    kafka-python's `close` raises when its flush times out and leaves the sender running, so its
    `__del__` would raise again at exit: force the sender closed instead.
    """
    try:
        producer.close(timeout=timeout_s)
    except KafkaError:
        sender = getattr(producer, "_sender", None)  # kafka-python 3.0: pinned in pyproject
        if sender is not None:
            sender.force_close()
            sender.join(timeout_s)
        with suppress(KafkaError):
            producer.close(timeout=0)


@contextmanager
def _truth_writer(
    path: str | Path | None,
) -> Iterator[Callable[[Record, int | None, int | None], None] | None]:
    if path is None:
        yield None
        return
    with open(path, "w", encoding="utf-8") as f:
        yield _line_writer(f)


def _line_writer(f: IO[str]) -> Callable[[Record, int | None, int | None], None]:
    dumps = json.dumps

    def write(record: Record, partition: int | None, offset: int | None) -> None:
        f.write(dumps(record.truth(partition, offset), separators=(",", ":")) + "\n")

    return write


def _send(
    config: GeneratorConfig,
    kafka: KafkaSettings,
    producer: KafkaProducer,
    start_ms: int,
    write_truth: Callable[[Record, int | None, int | None], None] | None,
    progress: bool,
    stop: threading.Event,
    execute: Callable[[Record], None],
    live: LiveCommands | None = None,
    poller: _CommandPoller | None = None,
) -> Summary:
    counts = collections.Counter[str]()
    intents = collections.Counter[str]()
    # (record, future); a control record has no future: it is done once executed, and waits
    # here only so the truth file stays in send order.
    pending: collections.deque[tuple[Record, Any]] = collections.deque()
    expected = config.count
    if expected is None and config.duration_ms is not None:
        expected = round(config.rate * config.duration_ms / 1000)
    bar = tqdm(
        total=expected,
        unit="event",
        file=sys.stderr,
        dynamic_ncols=True,
        disable=not progress or not sys.stderr.isatty(),
    )

    def settle(block: bool, acknowledged_only: bool = False) -> None:
        while pending and (block or pending[0][1] is None or pending[0][1].is_done):
            if acknowledged_only and pending[0][1] is not None and pending[0][1].failed():
                return
            record, future = pending.popleft()
            if future is None:
                if write_truth is not None:
                    write_truth(record, None, None)
                continue
            try:
                meta = future.get(timeout=_ACK_TIMEOUT_S)
            except KafkaError as e:
                raise ProduceError(
                    f"record {record.seq} ({record.kind}) was not acknowledged: {e}"
                ) from None
            if write_truth is not None:
                write_truth(record, meta.partition, meta.offset)

    applied: list[Applied] = []
    seen_version = 0

    def hand_over_commands(update: bool = True) -> None:
        """Give the generator the commands read since the last record; log what it did."""
        nonlocal seen_version
        if live is None or poller is None:
            return
        version, commands = poller.snapshot
        if update and version != seen_version and commands is not None:
            seen_version = version
            live.update(commands)
        if live.applied:
            for a in live.take_applied():
                _log.info("live command at %s: %s", to_iso(a.at_ms), a.text)
                applied.append(a)

    realtime = config.pace == "realtime"
    topic = kafka.topic
    send = producer.send
    last_ms = start_ms
    interrupted = False
    unreported = 0
    t_start = time.monotonic()
    try:
        for record in generate(config, start_ms, live):
            if realtime:
                wait_s = t_start + (record.send_ms - start_ms) / 1000 - time.monotonic()
                if wait_s > 0 and stop.wait(wait_s):
                    interrupted = True
                    break
            if stop.is_set():
                interrupted = True
                break
            kind = record.kind
            if kind == "control":
                execute(record)
                pending.append((record, None))
            else:
                try:
                    future = send(
                        topic,
                        value=record.value,
                        key=record.key,
                        partition=record.partition,
                        timestamp_ms=record.receive_ms,
                    )
                except KafkaError as e:
                    raise ProduceError(f"sending to {topic!r} failed: {e}") from None
                pending.append((record, future))
            last_ms = record.send_ms
            counts[kind] += 1
            if kind == "event":
                intents[record.intent or ""] += 1
            # The bar counts arrivals, as --count and --duration do; a burst comes on top.
            if kind == "malformed" or (kind == "event" and record.intent != "buffered"):
                unreported += 1
                if unreported >= 512:
                    bar.update(unreported)
                    unreported = 0
            settle(block=len(pending) >= _MAX_PENDING)
            hand_over_commands()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.update(unreported)
        bar.close()
    hand_over_commands(update=False)  # what the generator did after the last handover
    flush_s = _STOP_ACK_TIMEOUT_S if interrupted else _ACK_TIMEOUT_S
    try:
        producer.flush(timeout=flush_s)
    except KafkaError as e:
        if interrupted:
            settle(block=False, acknowledged_only=True)
            unconfirmed = sum(future is not None for _, future in pending)
            raise ProduceError(
                f"stopped, but {unconfirmed:,} records sent to {topic!r} were not acknowledged "
                f"within {flush_s:.0f}s (is the broker still there?); the truth file lists the "
                "acknowledged ones"
            ) from None
        raise ProduceError(f"flushing to {topic!r} failed: {e}") from None
    settle(block=True)
    return Summary(
        topic=topic,
        partitions=config.partitions,
        records=sum(counts.values()) - counts["control"],
        events=counts["event"],
        duplicates=counts["duplicate"],
        malformed=counts["malformed"],
        heartbeats=counts["heartbeat"],
        in_order=intents["in_order"],
        out_of_order=intents["out_of_order"],
        late=intents["late"],
        elapsed_s=time.monotonic() - t_start,
        start_ms=start_ms,
        end_ms=last_ms,
        interrupted=interrupted,
        buffered=intents["buffered"],
        controls=counts["control"],
        commands=tuple(applied),
    )
