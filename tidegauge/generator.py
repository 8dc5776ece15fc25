"""Synthetic traffic for Tidegauge: a pure, seeded generator of Kafka records in send order.

The generator is the pipeline's ground truth. It decides every record's event time, the instant it
is sent, the instant the broker receives it and the disorder it carries (out-of-order, late,
skewed, duplicated, malformed, buffered), so a test can compute the exact answer the job should
give. Everything here is pure: no Kafka, no wall
clock. The start of event time is passed in, and the randomness comes from a numpy `Generator`
seeded by `GeneratorConfig.seed`. `tidegauge.producer` is the thin I/O edge that sends the
records and writes the ground truth file; this module also holds the `tidegauge produce` flags.

Time is epoch milliseconds (UTC) everywhere. The generator keeps a clock: the instant (in event
time) at which the simulated devices send each record. In `--pace realtime` that clock is pinned
to the wall clock; in `--pace fast` it only exists in the records.

Scenarios (`--scenario`) are named presets that stage one lesson each for demos and tests:
`skewed-clocks` (device clocks that lie), `late-burst` (a device back online with an hour of
buffered events) and `backlog` (the job pauses, then catches up). The last one is not traffic but
a *control* record: the pure generator says when and for how long; the producer carries it out.

Live commands (`--live-commands`, the dashboard's demo buttons) come from outside while the stream
runs: the producer reads them from Redis (`tidegauge.control`) into a `LiveCommands` object that
`generate()` consults at every arrival. Without one, nothing changes; with one, the stream is a
pure function of the arguments and of the points at which the commands were updated.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from tidegauge.codecs import CODECS
from tidegauge.control import ALL_SERVICES, DemoCommands, Incident, LateBurstRequest
from tidegauge.durations import format_duration, parse_duration, parse_instant, to_iso
from tidegauge.events import (
    MAX_TIME_MS,
    MIN_TIME_MS,
    Event,
    Heartbeat,
    Reason,
    encode_event,
    encode_heartbeat,
)

__all__ = [
    "DEFAULT_LATENCY",
    "CONTROL_KEY",
    "DEFAULT_SERVICES",
    "HEARTBEAT_KEY",
    "HEARTBEAT_SOURCE",
    "MALFORMED_KINDS",
    "SCENARIOS",
    "SKEWED_CLOCKS_FRACTION",
    "Applied",
    "GeneratorConfig",
    "Intent",
    "Kind",
    "LiveCommands",
    "Pace",
    "Record",
    "add_arguments",
    "burst_event_id",
    "config_from_args",
    "event_id",
    "generate",
    "live_burst_event_id",
    "parse_latency",
    "parse_services",
    "run",
]

Pace = Literal["realtime", "fast"]
Kind = Literal["event", "duplicate", "malformed", "heartbeat", "control"]
Intent = Literal["in_order", "out_of_order", "late", "buffered"]

#: The names `--scenario` accepts, in the order the docs describe them.
SCENARIOS: tuple[str, ...] = ("skewed-clocks", "late-burst", "backlog")
#: --skew-fraction under `--scenario skewed-clocks` unless the flag is given.
SKEWED_CLOCKS_FRACTION = 0.3

#: name -> relative weight of its traffic (the `--services` default).
DEFAULT_SERVICES: tuple[tuple[str, float], ...] = (
    ("api", 5.0),
    ("web", 3.0),
    ("search", 2.0),
    ("auth", 1.0),
    ("payments", 1.0),
)
#: name -> (median ms, sigma) of the lognormal latency; other services get `_FALLBACK_LATENCY`.
DEFAULT_LATENCY: dict[str, tuple[float, float]] = {
    "api": (40.0, 0.6),
    "web": (120.0, 0.6),
    "search": (80.0, 0.6),
    "auth": (25.0, 0.6),
    "payments": (200.0, 0.6),
}
_FALLBACK_LATENCY = (50.0, 0.6)

HEARTBEAT_KEY = b"__heartbeat__"
HEARTBEAT_SOURCE = "tidegauge-produce"
#: Key of control records. They never reach Kafka (the producer executes them), but the key keeps
#: their truth lines shaped like every other record's.
CONTROL_KEY = b"__control__"

# The late-burst device is never one of this many most popular users: a burst from u000001
# would hide in its ordinary traffic instead of standing out.
_BURST_TOP_USERS = 100

# During a live incident, matching events fail with probability --error-rate x factor, capped
# here (and never below --error-rate): a slow service also errs more, as real ones do, but the
# error panel should not drown the latency spike the incident is about.
_INCIDENT_MAX_ERROR_RATE = 0.25

# Status mix: success codes (mostly 200) and, with probability --error-rate, a 5xx.
_OK_CODES = (200, 201, 204, 304, 404)
_OK_WEIGHTS = (0.86, 0.05, 0.03, 0.04, 0.02)
_ERROR_CODES = (500, 502, 503, 504)
_ERROR_WEIGHTS = (0.55, 0.2, 0.15, 0.1)

_T = TypeVar("_T")

# Random numbers are drawn this many arrivals at a time: vectorised, and independent of the
# config, so the same seed gives the same stream whatever --count or --duration says.
_CHUNK = 4096

# Runs of None for the Record fields a kind does not use.
_NONE7: tuple[None, ...] = (None,) * 7
_NONE8: tuple[None, ...] = (None,) * 8
_NONE12: tuple[None, ...] = (None,) * 12


@dataclass(frozen=True)
class GeneratorConfig:
    """What traffic to make. Durations and times are integer ms; fractions are in [0, 1].

    `count` counts arrivals (events plus malformed records); duplicates, heartbeats, the
    late-burst's buffered events and control records come on top. With neither `count` nor
    `duration_ms` the stream never ends. `burst_at_ms` and `backlog_at_ms` are offsets from the
    start of event time; None means the documented default (`burst_offset_ms`,
    `backlog_offset_ms`). `live_commands` says the producer feeds `generate()` a `LiveCommands`
    from Redis (realtime pace only); the stream itself changes only when commands arrive.
    """

    seed: int = 0
    rate: float = 200.0
    duration_ms: int | None = None
    count: int | None = None
    pace: Pace = "realtime"
    start_time_ms: int | None = None
    partitions: int = 3
    services: tuple[tuple[str, float], ...] = DEFAULT_SERVICES
    users: int = 10_000
    zipf: float = 1.1
    anonymous_fraction: float = 0.02
    latency: tuple[tuple[str, float, float], ...] = ()
    error_rate: float = 0.01
    out_of_order_fraction: float = 0.05
    max_delay_ms: int = 5_000
    late_fraction: float = 0.0
    lateness_ms: int = 30_000
    skew_fraction: float = 0.0
    max_skew_ms: int = 120_000
    duplicate_fraction: float = 0.0
    malformed_fraction: float = 0.0
    iso_fraction: float = 0.1
    heartbeat_interval_ms: int = 1_000
    heartbeat_tail_ms: int = 0
    network_delay_ms: int = 50
    scenarios: tuple[str, ...] = ()
    burst_at_ms: int | None = None
    burst_span_ms: int = 3_600_000
    burst_rate: float = 1.0
    backlog_at_ms: int | None = None
    backlog_pause_ms: int = 30_000
    live_commands: bool = False
    source: str = field(default=HEARTBEAT_SOURCE)

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--seed must be an integer >= 0, got {self.seed!r}")
        if not math.isfinite(self.rate) or self.rate <= 0:
            raise ValueError(f"--rate must be positive (events per second), got {self.rate}")
        if self.duration_ms is not None and self.count is not None:
            raise ValueError("give --duration or --count, not both")
        if self.duration_ms is not None and self.duration_ms <= 0:
            raise ValueError(f"--duration must be positive, got {self.duration_ms} ms")
        if self.count is not None and self.count <= 0:
            raise ValueError(f"--count must be positive, got {self.count}")
        if self.pace not in ("realtime", "fast"):
            raise ValueError(f"--pace is realtime or fast, got {self.pace!r}")
        if self.start_time_ms is not None:
            if self.pace == "realtime":
                raise ValueError("--start-time only applies to --pace fast (realtime starts now)")
            if not MIN_TIME_MS <= self.start_time_ms < MAX_TIME_MS:
                raise ValueError(
                    f"--start-time must be epoch ms between 2000 and 2100, got {self.start_time_ms}"
                )
        if self.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {self.partitions}")
        if not self.services:
            raise ValueError("--services must name at least one service")
        names = [name for name, _ in self.services]
        if len(set(names)) != len(names):
            raise ValueError(f"--services names a service twice: {','.join(names)}")
        for name, weight in self.services:
            if not name:
                raise ValueError("--services: a service name is empty")
            if not math.isfinite(weight) or weight <= 0:
                raise ValueError(f"--services: weight of {name!r} must be positive, got {weight}")
        if self.users < 1:
            raise ValueError(f"--users must be >= 1, got {self.users}")
        if not math.isfinite(self.zipf) or self.zipf < 0:
            raise ValueError(f"--zipf must be >= 0, got {self.zipf}")
        for name, median, sigma in self.latency:
            if name not in names:
                raise ValueError(f"--latency: {name!r} is not in --services ({','.join(names)})")
            if not math.isfinite(median) or median <= 0:
                raise ValueError(f"--latency: median of {name!r} must be positive ms, got {median}")
            if not math.isfinite(sigma) or sigma < 0:
                raise ValueError(f"--latency: sigma of {name!r} must be >= 0, got {sigma}")
        for flag, value in (
            ("--anonymous-fraction", self.anonymous_fraction),
            ("--error-rate", self.error_rate),
            ("--out-of-order-fraction", self.out_of_order_fraction),
            ("--late-fraction", self.late_fraction),
            ("--skew-fraction", self.skew_fraction),
            ("--duplicate-fraction", self.duplicate_fraction),
            ("--malformed-fraction", self.malformed_fraction),
            ("--iso-fraction", self.iso_fraction),
        ):
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{flag} must be between 0 and 1, got {value}")
        if self.out_of_order_fraction + self.late_fraction > 1.0:
            raise ValueError("--out-of-order-fraction plus --late-fraction must not exceed 1")
        if self.max_delay_ms < 0:
            raise ValueError(f"--max-delay must be >= 0, got {self.max_delay_ms} ms")
        if self.out_of_order_fraction > 0 and self.max_delay_ms < 1:
            raise ValueError("--max-delay must be at least 1ms when --out-of-order-fraction > 0")
        if self.lateness_ms < 0:
            raise ValueError(f"--lateness must be >= 0, got {self.lateness_ms} ms")
        if self.late_fraction > 0 and self.lateness_ms < 1:
            raise ValueError("--lateness must be at least 1ms when --late-fraction > 0")
        if self.max_skew_ms < 0:
            raise ValueError(f"--max-skew must be >= 0, got {self.max_skew_ms} ms")
        if self.heartbeat_interval_ms < 0:
            raise ValueError(
                f"--heartbeat-interval must be >= 0 (0 disables), got {self.heartbeat_interval_ms}"
            )
        if self.heartbeat_tail_ms < 0:
            raise ValueError(f"--heartbeat-tail must be >= 0, got {self.heartbeat_tail_ms} ms")
        if self.heartbeat_tail_ms > 0 and self.heartbeat_interval_ms == 0:
            raise ValueError("--heartbeat-tail needs heartbeats: set --heartbeat-interval > 0")
        if self.network_delay_ms < 0:
            raise ValueError(f"--network-delay must be >= 0, got {self.network_delay_ms} ms")
        self._check_scenarios()

    def _check_scenarios(self) -> None:
        for name in self.scenarios:
            if name not in SCENARIOS:
                raise ValueError(f"--scenario: unknown {name!r} (one of {', '.join(SCENARIOS)})")
        if len(set(self.scenarios)) != len(self.scenarios):
            raise ValueError(f"--scenario names a scenario twice: {','.join(self.scenarios)}")
        # The scenario knobs are checked even when their scenario is off: a config is either
        # valid or not, whatever is switched on later with dataclasses.replace.
        if self.burst_at_ms is not None and self.burst_at_ms < 0:
            raise ValueError(
                f"--burst-at must be >= 0 (after the start), got {self.burst_at_ms} ms"
            )
        if self.burst_span_ms <= 0:
            raise ValueError(f"--burst-span must be positive, got {self.burst_span_ms} ms")
        if not math.isfinite(self.burst_rate) or self.burst_rate <= 0:
            raise ValueError(
                f"--burst-rate must be positive (events per second), got {self.burst_rate}"
            )
        if self.burst_count < 1:
            raise ValueError("--burst-span times --burst-rate must make at least one event")
        if self.backlog_at_ms is not None and self.backlog_at_ms < 0:
            raise ValueError(
                f"--backlog-at must be >= 0 (after the start), got {self.backlog_at_ms} ms"
            )
        if self.backlog_pause_ms <= 0:
            raise ValueError(f"--backlog-pause must be positive, got {self.backlog_pause_ms} ms")
        if "skewed-clocks" in self.scenarios and (self.skew_fraction == 0 or self.max_skew_ms == 0):
            raise ValueError(
                "--scenario skewed-clocks needs --skew-fraction > 0 and --max-skew > 0"
            )
        if "late-burst" in self.scenarios and self.users <= _BURST_TOP_USERS:
            raise ValueError(
                f"--scenario late-burst needs --users > {_BURST_TOP_USERS} (the device is never "
                f"one of the {_BURST_TOP_USERS} most popular users), got {self.users}"
            )
        if "backlog" in self.scenarios and self.pace != "realtime":
            raise ValueError(
                "--scenario backlog needs --pace realtime: a pause of the job only means "
                "something while records arrive on the wall clock"
            )
        if self.live_commands and self.pace != "realtime":
            raise ValueError(
                "--live-commands needs --pace realtime: demo commands are timed on the wall "
                "clock, which only the realtime pace follows"
            )
        if self.live_commands and self.users <= _BURST_TOP_USERS:
            raise ValueError(
                f"--live-commands needs --users > {_BURST_TOP_USERS} (a late burst's device is "
                f"never one of the {_BURST_TOP_USERS} most popular users), got {self.users}"
            )

    def latency_of(self, service: str) -> tuple[float, float]:
        """(median ms, sigma) of `service`'s lognormal latency: --latency, else the default."""
        for name, median, sigma in self.latency:
            if name == service:
                return median, sigma
        return DEFAULT_LATENCY.get(service, _FALLBACK_LATENCY)

    @property
    def max_send_delay_ms(self) -> int:
        """The longest any event waits between its event time and its send time."""
        delay = self.max_delay_ms if self.out_of_order_fraction > 0 else 0
        burst = self.burst_span_ms if "late-burst" in self.scenarios else 0
        return max(delay, 2 * self.lateness_ms if self.late_fraction > 0 else 0, burst)

    @property
    def burst_offset_ms(self) -> int:
        """When the late-burst device comes back online, in ms after the start of event time.

        --burst-at, else half of --duration (the burst lands mid-run, where a chart shows it),
        else 60s.
        """
        if self.burst_at_ms is not None:
            return self.burst_at_ms
        return self.duration_ms // 2 if self.duration_ms is not None else 60_000

    @property
    def burst_count(self) -> int:
        """Buffered events in the late burst: --burst-span times --burst-rate, rounded."""
        return round(self.burst_span_ms * self.burst_rate / 1000)

    @property
    def backlog_offset_ms(self) -> int:
        """When the backlog pause starts, in ms after the start of event time.

        --backlog-at, else a third of --duration (so the catch-up fits in the run), else 20s.
        """
        if self.backlog_at_ms is not None:
            return self.backlog_at_ms
        return self.duration_ms // 3 if self.duration_ms is not None else 20_000


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record the generator sends, with the ground truth about it.

    `send_ms` is the generator clock (true time) when it is sent; records come out of `generate`
    ordered by it. `receive_ms` is when the broker receives it: `send_ms` plus a network delay
    (heartbeats and control records: `send_ms`). The producer makes it the Kafka record
    timestamp, standing in for the ingest gateway's clock, the one clock the docs trust. It is
    not ordered: two records sent in order may be received the other way round.
    `event_time` and `sent_time` are what the record carries (device skew included);
    `true_time` is the instant the event really happened. Fields that do not apply to a kind
    are None: malformed records carry only `key`, `value`, `send_ms`, `receive_ms`,
    `sent_time`, `true_time` and `reason`; heartbeats carry `partition` and their times;
    control records (never sent to Kafka, executed by the producer) carry only `key`, `value`
    and the two clock fields.
    """

    seq: int
    kind: Kind
    key: bytes
    value: bytes
    partition: int | None
    send_ms: int
    receive_ms: int
    event_id: str | None
    event_time: int | None
    true_time: int | None
    sent_time: int | None
    service: str | None
    user_id: str | None
    latency_ms: float | None
    status: int | None
    delay_ms: int | None
    intent: Intent | None
    skew_ms: int | None
    reason: Reason | None

    def truth(self, partition: int | None, offset: int | None) -> dict[str, Any]:
        """The ground-truth line of this record once it landed at (partition, offset).

        A control record never lands anywhere: its partition and offset are None.
        """
        return {
            "seq": self.seq,
            "kind": self.kind,
            "partition": partition,
            "offset": offset,
            "key": self.key.decode("utf-8"),
            "receive_ms": self.receive_ms,
            "event_id": self.event_id,
            "event_time": self.event_time,
            "true_time": self.true_time,
            "sent_time": self.sent_time,
            "service": self.service,
            "user_id": self.user_id,
            "latency_ms": self.latency_ms,
            "status": self.status,
            "delay_ms": self.delay_ms,
            "intent": self.intent,
            "skew_ms": self.skew_ms,
            "reason": None if self.reason is None else self.reason.value,
        }


def event_id(seed: int, seq: int) -> str:
    """The id of arrival number `seq` of the stream seeded with `seed`: unique, reproducible."""
    return f"{seed:x}-{seq:09d}"


def burst_event_id(seed: int, k: int) -> str:
    """The id of buffered event number `k` of the late burst, unique and reproducible.

    The "b" keeps it apart from `event_id`'s, so adding a burst leaves every ordinary id (and
    --count) as it was.
    """
    return f"{seed:x}-b{k:08d}"


def live_burst_event_id(seed: int, request_id: int, k: int) -> str:
    """The id of buffered event number `k` of the live late burst requested as `request_id`.

    The request id (epoch ms of the request) keeps every live burst's ids apart from the other
    bursts' and from ordinary ids, whatever order the bursts come in.
    """
    return f"{seed:x}-r{request_id}-{k:07d}"


# ---------------------------------------------------------------------------------------------
# Live commands: the pure side. tidegauge.control reads and writes them in Redis; the producer
# hands them over; the generator below applies them.


@dataclass(frozen=True)
class Applied:
    """A live command as the generator carried it out, for the producer's log and summary.

    `kind` is `incident` (latencies scaled from now on), `late_burst` (a burst of `events`
    buffered events sent) or `pause` (seen only: the job carries it out). `at_ms` is the
    generator clock (epoch ms) when it took effect; `text` says what happened, for people.
    """

    kind: Literal["incident", "late_burst", "pause"]
    at_ms: int
    text: str
    events: int = 0


class LiveCommands:
    """The live demo commands a running `generate()` consults; by default, none.

    The producer calls `update()` with what it read from Redis, between records and from the
    thread that iterates the generator (this object is not thread-safe). The generator picks a
    change up at its next arrival, so exactly the arrivals after the last record handed out see
    it: given the same updates after the same records, the stream is the same.

    `initial` is what the hash held when the producer started. Its incident is in force (if not
    over yet), but its late burst was requested before this run and is not sent: only a request
    with a new id is. `applied` collects what the generator did, oldest first; the producer
    takes the entries with `take_applied()`.
    """

    def __init__(self, initial: DemoCommands | None = None) -> None:
        self._commands = initial
        burst = None if initial is None else initial.late_burst
        self._seen_burst_id: int | None = None if burst is None else burst.id
        self._bursts: list[LateBurstRequest] = []
        self._version = 0
        self._last_incident: Incident | None = None
        self._last_pause: int | None = None
        self.applied: list[Applied] = []

    def update(self, commands: DemoCommands) -> None:
        """Take in the commands now in the hash: the latest incident, a burst per new id."""
        if commands == self._commands:
            return  # the usual case: one poll a second, nothing new
        self._commands = commands
        burst = commands.late_burst
        if burst is not None and burst.id != self._seen_burst_id:
            self._seen_burst_id = burst.id
            self._bursts.append(burst)
        self._version += 1

    def take_applied(self) -> list[Applied]:
        """The entries of `applied` since the last call (and forget them)."""
        out, self.applied = self.applied, []
        return out

    def _take(self, now_ms: int) -> tuple[Incident | None, bool, list[LateBurstRequest]]:
        """For the generator at clock `now_ms`: (incident, is it new and ahead, bursts to send).

        A new pause still ahead is noted in `applied` here; incidents and bursts are noted by
        the generator, which knows what they do to its stream.
        """
        cmds = self._commands
        incident = None if cmds is None else cmds.incident
        new = (
            incident is not None and incident != self._last_incident and incident.active_at(now_ms)
        )
        self._last_incident = incident
        pause = None if cmds is None else cmds.pause_until_ms
        if pause is not None and pause != self._last_pause and pause > now_ms:
            self.applied.append(
                Applied("pause", now_ms, f"pause of the job until {to_iso(pause)} (seen in Redis)")
            )
        self._last_pause = pause
        bursts, self._bursts = self._bursts, []
        return incident, new, bursts


# ---------------------------------------------------------------------------------------------
# Malformed records: each kind is built from the event it replaces and must be judged by
# tidegauge.events.parse_record with exactly the listed Reason.


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _truncated(obj: dict[str, Any]) -> bytes:
    # A strict prefix of a JSON object is never valid JSON; cut the text (not the bytes) so the
    # result stays valid UTF-8 whatever the service names are.
    text = json.dumps(obj, separators=(",", ":"))
    return text[: max(1, len(text) // 2)].encode("utf-8")


def _without(name: str) -> Callable[[dict[str, Any]], bytes]:
    return lambda obj: _dumps({k: v for k, v in obj.items() if k != name})


def _with(name: str, make: Callable[[Any], Any]) -> Callable[[dict[str, Any]], bytes]:
    return lambda obj: _dumps({**obj, name: make(obj.get(name))})


#: (name, expected Reason, builder from the replaced event's JSON object), in rotation order.
MALFORMED_KINDS: tuple[tuple[str, Reason, Callable[[dict[str, Any]], bytes]], ...] = (
    ("truncated_json", Reason.INVALID_JSON, _truncated),
    ("invalid_utf8", Reason.INVALID_UTF8, lambda obj: b"\xff\xfe" + _dumps(obj)),
    ("json_array", Reason.NOT_AN_OBJECT, lambda obj: _dumps([obj])),
    ("no_service", Reason.MISSING_FIELD, _without("service")),
    ("no_event_id", Reason.MISSING_FIELD, _without("event_id")),
    ("no_event_time", Reason.MISSING_FIELD, _without("event_time")),
    ("latency_string", Reason.WRONG_TYPE, _with("latency_ms", lambda v: str(v))),
    ("status_string", Reason.WRONG_TYPE, _with("status", lambda v: str(v))),
    ("service_number", Reason.WRONG_TYPE, _with("service", lambda v: 42)),
    ("time_word", Reason.INVALID_TIME, _with("event_time", lambda v: "yesterday")),
    ("time_no_zone", Reason.INVALID_TIME, _with("event_time", lambda v: to_iso(v)[:-1])),
    ("time_seconds", Reason.INVALID_TIME, _with("event_time", lambda v: v // 1000)),
    ("negative_latency", Reason.INVALID_VALUE, _with("latency_ms", lambda v: -max(v, 1.0))),
    ("empty", Reason.EMPTY, lambda obj: b""),
)


# ---------------------------------------------------------------------------------------------
# The pure core.


def generate(
    config: GeneratorConfig, start_ms: int | None = None, commands: LiveCommands | None = None
) -> Iterator[Record]:
    """Yield the records of `config`'s stream in send order (ties: heartbeats first).

    Event time starts at `start_ms` (epoch ms), else at `config.start_time_ms`; one of them is
    required, so the output depends on nothing but its arguments. Arrivals form a Poisson
    process of `config.rate` per second of event time. Every `heartbeat_interval_ms` of the
    generator clock a heartbeat goes to each partition; after the last record (and
    `heartbeat_tail_ms` more of the clock), a final round carries the clock at the end.
    Scenarios add records at fixed instants of the clock: the late burst's buffered events and
    the backlog's control record. The clock runs on until both have happened, even when
    --count or --duration ends the arrivals earlier.

    `commands` (needs `config.live_commands`) are the live demo commands, consulted at every
    arrival while arrivals last: an incident in force scales the latency of each matching
    arrival (and raises its error probability to --error-rate x factor, at most 25%); a new
    late-burst request sends a burst like the `late-burst` scenario's, at the arrival's instant,
    drawn from a random stream of its own. Without commands the stream is unchanged, and
    an incident changes nothing but the latency and status of the arrivals it covers.
    """
    t0 = start_ms if start_ms is not None else config.start_time_ms
    if t0 is None:
        raise ValueError("generate() needs a start time: pass start_ms or set start_time_ms")
    if commands is not None and not config.live_commands:
        raise ValueError("generate() got live commands, but config.live_commands is off")
    return _generate(config, t0, commands)


def _cdf(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights, dtype=np.float64)
    return cdf / cdf[-1]


def _pick(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _generate(cfg: GeneratorConfig, t0: int, live: LiveCommands | None) -> Iterator[Record]:
    # One independent stream per concern. Children of a SeedSequence are fixed by their index,
    # so streams added at the end (network, burst, live bursts) leave the first eight, and every
    # field they decide, exactly as they were.
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(11)]
    rng_arrival, rng_user, rng_service, rng_latency, rng_status, rng_intent, rng_flags, rng_skew = (
        streams[:8]
    )
    rng_network, rng_burst, rng_live = streams[8:]
    user_cdf = _cdf(1.0 / np.arange(1, cfg.users + 1, dtype=np.float64) ** cfg.zipf)
    # A device's clock offset is a property of the user, fixed for the whole run.
    skewed = rng_skew.random(cfg.users) < cfg.skew_fraction
    offsets = rng_skew.integers(-cfg.max_skew_ms, cfg.max_skew_ms + 1, cfg.users)
    user_skew = np.where(skewed, offsets, 0).astype(np.int64)

    names = [name for name, _ in cfg.services]
    name_keys = [name.encode("utf-8") for name in names]
    service_json = [json.dumps(name) for name in names]
    service_cdf = _cdf(np.array([w for _, w in cfg.services], dtype=np.float64))
    medians = np.array([cfg.latency_of(n)[0] for n in names], dtype=np.float64)
    sigmas = np.array([cfg.latency_of(n)[1] for n in names], dtype=np.float64)
    ok_cdf = _cdf(np.array(_OK_WEIGHTS))
    err_cdf = _cdf(np.array(_ERROR_WEIGHTS))
    ok_codes = np.array(_OK_CODES)
    err_codes = np.array(_ERROR_CODES)

    mean_gap_ms = 1000.0 / cfg.rate
    end_ms = None if cfg.duration_ms is None else t0 + cfg.duration_ms
    count = cfg.count
    late_cut = cfg.late_fraction
    ooo_cut = cfg.late_fraction + cfg.out_of_order_fraction
    interval = cfg.heartbeat_interval_ms
    net_high = cfg.network_delay_ms + 1
    partitions = range(cfg.partitions)
    seed = cfg.seed

    # Heap items: (send_ms, class, tiebreak, payload). Heartbeats (class 0) go before records
    # (class 1) sent in the same ms; the tiebreak keeps push order, so a duplicate directly
    # follows its original. payload = the Record fields after `seq`.
    heap: list[tuple[int, int, int, tuple[Any, ...]]] = []
    push = heapq.heappush
    pop = heapq.heappop
    tiebreak = 0
    seq = 0  # send order of all records
    g = 0  # arrival number: names events (event_id) and rotates malformed kinds
    n_malformed = 0
    hb_next = t0 + interval if interval > 0 else None
    elapsed = 0.0
    last_t = t0

    def latencies_of(rng: np.random.Generator, svc_idx: np.ndarray) -> np.ndarray:
        z = rng.standard_normal(len(svc_idx))
        return np.round(medians[svc_idx] * np.exp(sigmas[svc_idx] * z), 3)

    def status_draws(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        """(u, ok, err): a status is err where u < the error probability, else ok."""
        u = rng.random(n)
        ok = ok_codes[_pick(ok_cdf, rng.random(n))]
        err = err_codes[_pick(err_cdf, rng.random(n))]
        return u, ok, err

    def statuses_of(rng: np.random.Generator, n: int) -> np.ndarray:
        u, ok, err = status_draws(rng, n)
        return np.where(u < cfg.error_rate, err, ok)

    def heartbeat(at: int, p: int) -> tuple[Any, ...]:
        value = encode_heartbeat(Heartbeat(event_time=at, partition=p, source=cfg.source))
        return ("heartbeat", HEARTBEAT_KEY, value, p, at, at, None, at, at, at, *_NONE8)

    def control(at: int) -> list[tuple[Any, ...]]:
        value = _dumps({"control": "pause", "pause_ms": cfg.backlog_pause_ms})
        return [("control", CONTROL_KEY, value, None, at, at, *_NONE12)]

    def late_burst(
        at: int, span_ms: int, n: int, rng: np.random.Generator, ids: Callable[[int], str]
    ) -> list[tuple[Any, ...]]:
        # One device, offline for the span, sends what it buffered, oldest first, all at `at`.
        # Everything is drawn from `rng`, the burst's own stream, so the rest of the run is
        # unchanged.
        idx = int(rng.integers(_BURST_TOP_USERS, cfg.users))
        user_id = f"u{idx + 1:06d}"
        key = user_id.encode("utf-8")
        skew = int(user_skew[idx])
        trues = np.sort(rng.integers(at - span_ms, at, n)).tolist()
        svc_idx = _pick(service_cdf, rng.random(n))
        lats = latencies_of(rng, svc_idx).tolist()
        stats = statuses_of(rng, n).tolist()
        nets = rng.integers(0, net_high, n).tolist()
        out: list[tuple[Any, ...]] = []
        for k, (t, s) in enumerate(zip(trues, svc_idx.tolist(), strict=True)):
            eid = ids(k)
            et, st = t + skew, at + skew
            ev = Event(eid, et, names[s], user_id, lats[k], stats[k], st)
            out.append(
                (
                    "event",
                    key,
                    encode_event(ev),
                    None,
                    at,
                    at + nets[k],
                    eid,
                    et,
                    t,
                    st,
                    names[s],
                    user_id,
                    lats[k],
                    stats[k],
                    at - t,
                    "buffered",
                    skew,
                    None,
                )
            )
        return out

    def burst(at: int) -> list[tuple[Any, ...]]:
        return late_burst(
            at, cfg.burst_span_ms, cfg.burst_count, rng_burst, lambda k: burst_event_id(seed, k)
        )

    # Scenario records at fixed instants of the clock, in time order (a tie: control first).
    scheduled: list[tuple[int, Callable[[int], list[tuple[Any, ...]]]]] = []
    if "backlog" in cfg.scenarios:
        scheduled.append((t0 + cfg.backlog_offset_ms, control))
    if "late-burst" in cfg.scenarios:
        scheduled.append((t0 + cfg.burst_offset_ms, burst))
    scheduled.sort(key=lambda item: item[0])

    def release_scheduled(before: int | None) -> None:
        """Push the scenario records due before `before` (None: all) onto the heap."""
        nonlocal tiebreak
        while scheduled and (before is None or scheduled[0][0] < before):
            at, build = scheduled.pop(0)
            for payload in build(at):
                push(heap, (at, 1, tiebreak, payload))
                tiebreak += 1

    # The live incident in force: arrivals before `inc_until` of a service with inc_match[s]
    # get inc_factor times their latency and fail with probability inc_error. No incident:
    # inc_until = -1, before every arrival.
    inc_until = -1
    inc_factor = 1.0
    inc_error = cfg.error_rate
    inc_match = [False] * len(names)
    live_version = -1

    def apply_live(t: int) -> None:
        """Pick up changed live commands at arrival time `t`: set the incident, push bursts."""
        nonlocal inc_until, inc_factor, inc_error, inc_match, live_version, tiebreak
        assert live is not None
        live_version = live._version
        incident, new, bursts = live._take(t)
        if incident is None:
            inc_until = -1
        else:
            inc_until, inc_factor = incident.until_ms, incident.factor
            cap = max(cfg.error_rate, _INCIDENT_MAX_ERROR_RATE)
            inc_error = min(max(cfg.error_rate, cfg.error_rate * inc_factor), cap)
            inc_match = [incident.applies_to(name) for name in names]
        if incident is not None and new:
            who = "every service" if incident.service == ALL_SERVICES else repr(incident.service)
            text = (
                f"incident: latency x{incident.factor:g} for {who} "
                f"until {to_iso(incident.until_ms)}"
            )
            if not any(inc_match):
                text += f" changes nothing: this generator makes {', '.join(names)}"
            live.applied.append(Applied("incident", t, text))
        for req in bursts:
            n = max(1, round(req.span_ms * cfg.burst_rate / 1000))
            ids = functools.partial(live_burst_event_id, seed, req.id)
            payloads = late_burst(t, req.span_ms, n, rng_live, ids)
            for payload in payloads:
                push(heap, (t, 1, tiebreak, payload))
                tiebreak += 1
            device = Record(0, *payloads[0]).user_id
            live.applied.append(
                Applied(
                    "late_burst",
                    t,
                    f"late burst {req.id}: {n:,} buffered events of user {device} from "
                    f"the last {format_duration(req.span_ms)}",
                    events=n,
                )
            )

    done = False
    while not done:
        offs = elapsed + np.cumsum(rng_arrival.exponential(mean_gap_ms, _CHUNK))
        elapsed = float(offs[-1])
        times = (t0 + np.floor(offs).astype(np.int64)).tolist()
        anonymous = (rng_user.random(_CHUNK) < cfg.anonymous_fraction).tolist()
        user_idx = _pick(user_cdf, rng_user.random(_CHUNK))
        skews = user_skew[user_idx].tolist()
        users = user_idx.tolist()
        svc_idx = _pick(service_cdf, rng_service.random(_CHUNK))
        services = svc_idx.tolist()
        latencies = latencies_of(rng_latency, svc_idx).tolist()
        u_status, ok_status, err_status = status_draws(rng_status, _CHUNK)
        statuses = np.where(u_status < cfg.error_rate, err_status, ok_status).tolist()
        u_intent = rng_intent.random(_CHUNK).tolist()
        ooo_delays = rng_intent.integers(1, max(cfg.max_delay_ms, 1) + 1, _CHUNK).tolist()
        lo = cfg.lateness_ms + 1
        late_delays = rng_intent.integers(lo, max(2 * cfg.lateness_ms, lo) + 1, _CHUNK).tolist()
        malformed = (rng_flags.random(_CHUNK) < cfg.malformed_fraction).tolist()
        duplicate = (rng_flags.random(_CHUNK) < cfg.duplicate_fraction).tolist()
        iso = (rng_flags.random(_CHUNK) < cfg.iso_fraction).tolist()
        # A retry travels the network again: a duplicate gets a delay of its own.
        nets = rng_network.integers(0, net_high, _CHUNK).tolist()
        dup_nets = rng_network.integers(0, net_high, _CHUNK).tolist()

        for i in range(_CHUNK):
            t = times[i]
            if (count is not None and g >= count) or (end_ms is not None and t >= end_ms):
                done = True
                break
            while hb_next is not None and hb_next < t:
                for p in partitions:
                    push(heap, (hb_next, 0, tiebreak, heartbeat(hb_next, p)))
                    tiebreak += 1
                hb_next += interval
            if scheduled and scheduled[0][0] < t:
                release_scheduled(t)
            while heap and heap[0][0] < t:
                yield Record(seq, *pop(heap)[3])
                seq += 1
            if live is not None and live._version != live_version:
                apply_live(t)

            s = services[i]
            service = names[s]
            if anonymous[i]:
                user_id, key, skew = None, name_keys[s], 0
            else:
                user_id = f"u{users[i] + 1:06d}"
                key, skew = user_id.encode("utf-8"), skews[i]
            latency = latencies[i]
            status = statuses[i]
            if t < inc_until and inc_match[s]:
                latency = round(latency * inc_factor, 3)
                if u_status[i] < inc_error:
                    status = int(err_status[i])
            eid = event_id(seed, g)
            g += 1
            last_t = t

            if malformed[i]:
                _, reason, build = MALFORMED_KINDS[n_malformed % len(MALFORMED_KINDS)]
                n_malformed += 1
                obj = json.loads(encode_event(Event(eid, t, service, user_id, latency, status, t)))
                payload: tuple[Any, ...] = (
                    "malformed",
                    key,
                    build(obj),
                    None,
                    t,
                    t + nets[i],
                    None,
                    None,
                    t,
                    t,
                    *_NONE7,
                    reason,
                )
                push(heap, (t, 1, tiebreak, payload))
                tiebreak += 1
                continue

            u = u_intent[i]
            intent: Intent
            if u < late_cut:
                intent, delay = "late", late_delays[i]
            elif u < ooo_cut:
                intent, delay = "out_of_order", ooo_delays[i]
            else:
                intent, delay = "in_order", 0
            send = t + delay
            et, st = t + skew, send + skew
            # Byte for byte what encode_event() writes (the unit tests hold it to that), without
            # a dict and an encoder per record: this line is the generator's hot path.
            if iso[i]:
                times_json = f'"{to_iso(et)}"', f'"{to_iso(st)}"'
            else:
                times_json = et, st
            user_json = "" if user_id is None else f',"user_id":"{user_id}"'
            value = (
                f'{{"event_id":"{eid}","event_time":{times_json[0]},"service":{service_json[s]}'
                f'{user_json},"latency_ms":{latency!r},"status":{status},'
                f'"sent_time":{times_json[1]}}}'
            ).encode()
            fields = (
                eid,
                et,
                t,
                st,
                service,
                user_id,
                latency,
                status,
                delay,
                intent,
                skew,
                None,
            )
            push(
                heap,
                (send, 1, tiebreak, ("event", key, value, None, send, send + nets[i], *fields)),
            )
            tiebreak += 1
            if duplicate[i]:
                dup = ("duplicate", key, value, None, send, send + dup_nets[i], *fields)
                push(heap, (send, 1, tiebreak, dup))
                tiebreak += 1

    # The stream is finite: drain the delayed and scheduled records (the clock keeps ticking,
    # so do the heartbeats, for --heartbeat-tail longer), then one last round of heartbeats at
    # the end of the clock.
    release_scheduled(None)
    last_send = max((item[0] for item in heap), default=t0)
    clock_end = max(last_t if end_ms is None else end_ms, last_send) + cfg.heartbeat_tail_ms
    while hb_next is not None and hb_next < clock_end:
        for p in partitions:
            push(heap, (hb_next, 0, tiebreak, heartbeat(hb_next, p)))
            tiebreak += 1
        hb_next += interval
    while heap:
        yield Record(seq, *pop(heap)[3])
        seq += 1
    if interval > 0:
        for p in partitions:
            yield Record(seq, *heartbeat(clock_end, p))
            seq += 1


# ---------------------------------------------------------------------------------------------
# Flags of `tidegauge produce`.


def parse_services(text: str) -> tuple[tuple[str, float], ...]:
    """Parse "api:5,web:3" (name:weight; a bare name weighs 1) for --services."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, weight = part.partition(":")
        try:
            w = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"--services wants name:weight, got {part!r}") from None
        out.append((name.strip(), w))
    if not out:
        raise ValueError(f"--services wants name:weight[,name:weight...], got {text!r}")
    return tuple(out)


def parse_latency(text: str) -> tuple[tuple[str, float, float], ...]:
    """Parse "api=40:0.6,web=120" (service=median_ms[:sigma]; sigma defaults to 0.6)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, spec = part.partition("=")
        median, _, sigma = spec.partition(":")
        try:
            if not sep:
                raise ValueError
            sig = float(sigma) if sigma else _FALLBACK_LATENCY[1]
            out.append((name.strip(), float(median), sig))
        except ValueError:
            raise ValueError(f"--latency wants service=median_ms[:sigma], got {part!r}") from None
    return tuple(out)


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
        "--malformed-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="records that break the contract (default 0)",
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
        default=parse_duration("1s"),
        metavar="DURATION",
        help="event time between heartbeat rounds to every partition; 0 disables",
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
        malformed_fraction=args.malformed_fraction,
        iso_fraction=args.iso_fraction,
        heartbeat_interval_ms=args.heartbeat_interval,
        heartbeat_tail_ms=args.heartbeat_tail,
        network_delay_ms=args.network_delay,
        scenarios=scenarios,
        burst_at_ms=args.burst_at,
        burst_span_ms=_given(args.burst_span, defaults.burst_span_ms),
        burst_rate=_given(args.burst_rate, defaults.burst_rate),
        backlog_at_ms=args.backlog_at,
        backlog_pause_ms=_given(args.backlog_pause, defaults.backlog_pause_ms),
        live_commands=args.live_commands,
    )


def _given(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def run(args: argparse.Namespace) -> int:
    """`tidegauge produce`: send the stream, print a summary; exit 0 also on Ctrl-C/SIGTERM."""
    from tidegauge.producer import run_cli  # the Kafka edge, imported only when producing

    return run_cli(args)
