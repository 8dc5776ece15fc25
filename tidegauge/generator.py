"""Synthetic traffic for Tidegauge: a pure, seeded generator of Kafka records in send order.

The generator is the pipeline's ground truth. It decides every record's event time, the instant it
is sent and the disorder it carries (out-of-order, late, skewed, duplicated, malformed), so a test
can compute the exact answer the job should give. Everything here is pure: no Kafka, no wall
clock. The start of event time is passed in, and the randomness comes from a numpy `Generator`
seeded by `GeneratorConfig.seed`. `tidegauge.producer` is the thin I/O edge that sends the
records and writes the ground truth file; this module also holds the `tidegauge produce` flags.

Time is epoch milliseconds (UTC) everywhere. The generator keeps a clock: the instant (in event
time) at which the simulated devices send each record. In `--pace realtime` that clock is pinned
to the wall clock; in `--pace fast` it only exists in the records.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tidegauge.durations import parse_duration, parse_instant, to_iso
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
    "DEFAULT_SERVICES",
    "HEARTBEAT_KEY",
    "HEARTBEAT_SOURCE",
    "MALFORMED_KINDS",
    "GeneratorConfig",
    "Intent",
    "Kind",
    "Pace",
    "Record",
    "add_arguments",
    "config_from_args",
    "event_id",
    "generate",
    "parse_latency",
    "parse_services",
    "run",
]

Pace = Literal["realtime", "fast"]
Kind = Literal["event", "duplicate", "malformed", "heartbeat"]
Intent = Literal["in_order", "out_of_order", "late"]

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

# Status mix: success codes (mostly 200) and, with probability --error-rate, a 5xx.
_OK_CODES = (200, 201, 204, 304, 404)
_OK_WEIGHTS = (0.86, 0.05, 0.03, 0.04, 0.02)
_ERROR_CODES = (500, 502, 503, 504)
_ERROR_WEIGHTS = (0.55, 0.2, 0.15, 0.1)

# Random numbers are drawn this many arrivals at a time: vectorised, and independent of the
# config, so the same seed gives the same stream whatever --count or --duration says.
_CHUNK = 4096


@dataclass(frozen=True)
class GeneratorConfig:
    """What traffic to make. Durations and times are integer ms; fractions are in [0, 1].

    `count` counts arrivals (events plus malformed records); duplicates and heartbeats come on
    top. With neither `count` nor `duration_ms` the stream never ends.
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
        return max(delay, 2 * self.lateness_ms if self.late_fraction > 0 else 0)


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record the generator sends, with the ground truth about it.

    `send_ms` is the generator clock (true time) when it is sent; records come out of `generate`
    ordered by it. `event_time` and `sent_time` are what the record carries (device skew
    included); `true_time` is the instant the event really happened. Fields that do not apply
    to a kind are None: malformed records carry only `key`, `value`, `send_ms`, `sent_time`,
    `true_time` and `reason`; heartbeats carry `partition` and their times.
    """

    seq: int
    kind: Kind
    key: bytes
    value: bytes
    partition: int | None
    send_ms: int
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

    def truth(self, partition: int, offset: int) -> dict[str, Any]:
        """The ground-truth line of this record once it landed at (partition, offset)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "partition": partition,
            "offset": offset,
            "key": self.key.decode("utf-8"),
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


def generate(config: GeneratorConfig, start_ms: int | None = None) -> Iterator[Record]:
    """Yield the records of `config`'s stream in send order (ties: heartbeats first).

    Event time starts at `start_ms` (epoch ms), else at `config.start_time_ms`; one of them is
    required, so the output depends on nothing but its arguments. Arrivals form a Poisson
    process of `config.rate` per second of event time. Every `heartbeat_interval_ms` of the
    generator clock a heartbeat goes to each partition; after the last record, a final round
    carries the clock at the end.
    """
    t0 = start_ms if start_ms is not None else config.start_time_ms
    if t0 is None:
        raise ValueError("generate() needs a start time: pass start_ms or set start_time_ms")
    return _generate(config, t0)


def _cdf(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights, dtype=np.float64)
    return cdf / cdf[-1]


def _pick(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _generate(cfg: GeneratorConfig, t0: int) -> Iterator[Record]:
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(8)]
    rng_arrival, rng_user, rng_service, rng_latency, rng_status, rng_intent, rng_flags, rng_skew = (
        streams
    )
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

    def heartbeat(at: int, p: int) -> tuple[Any, ...]:
        value = encode_heartbeat(Heartbeat(event_time=at, partition=p, source=cfg.source))
        return (
            "heartbeat",
            HEARTBEAT_KEY,
            value,
            p,
            at,
            None,
            at,
            at,
            at,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
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
        z = rng_latency.standard_normal(_CHUNK)
        latencies = np.round(medians[svc_idx] * np.exp(sigmas[svc_idx] * z), 3).tolist()
        is_error = rng_status.random(_CHUNK) < cfg.error_rate
        ok = ok_codes[_pick(ok_cdf, rng_status.random(_CHUNK))]
        err = err_codes[_pick(err_cdf, rng_status.random(_CHUNK))]
        statuses = np.where(is_error, err, ok).tolist()
        u_intent = rng_intent.random(_CHUNK).tolist()
        ooo_delays = rng_intent.integers(1, max(cfg.max_delay_ms, 1) + 1, _CHUNK).tolist()
        lo = cfg.lateness_ms + 1
        late_delays = rng_intent.integers(lo, max(2 * cfg.lateness_ms, lo) + 1, _CHUNK).tolist()
        malformed = (rng_flags.random(_CHUNK) < cfg.malformed_fraction).tolist()
        duplicate = (rng_flags.random(_CHUNK) < cfg.duplicate_fraction).tolist()
        iso = (rng_flags.random(_CHUNK) < cfg.iso_fraction).tolist()

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
            while heap and heap[0][0] < t:
                yield Record(seq, *pop(heap)[3])
                seq += 1

            s = services[i]
            service = names[s]
            if anonymous[i]:
                user_id, key, skew = None, name_keys[s], 0
            else:
                user_id = f"u{users[i] + 1:06d}"
                key, skew = user_id.encode("utf-8"), skews[i]
            latency = latencies[i]
            status = statuses[i]
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
                    None,
                    None,
                    t,
                    t,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
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
                key,
                value,
                None,
                send,
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
            push(heap, (send, 1, tiebreak, ("event", *fields)))
            tiebreak += 1
            if duplicate[i]:
                push(heap, (send, 1, tiebreak, ("duplicate", *fields)))
                tiebreak += 1

    # The stream is finite: drain the delayed records (the clock keeps ticking, so do the
    # heartbeats), then one last round of heartbeats at the end of the clock.
    last_send = max((item[0] for item in heap), default=t0)
    clock_end = max(last_t if end_ms is None else end_ms, last_send)
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
        default=0.0,
        metavar="F",
        help="users whose device clock is off by up to --max-skew (default 0)",
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
        "--heartbeat-interval",
        type=d,
        default=parse_duration("1s"),
        metavar="DURATION",
        help="event time between heartbeat rounds to every partition; 0 disables",
    )
    g = p.add_argument_group("output")
    g.add_argument("--truth", metavar="PATH", help="write ground truth JSON lines here")
    g.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace, now_ms: int | None = None) -> GeneratorConfig:
    """Build the config from parsed flags; raises ValueError naming the bad flag.

    `now_ms` (default: the wall clock) resolves the fast pace's default start (now, rounded
    down to the second) and relative --start-time values such as "15m".
    """
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    start: int | None = None
    if args.start_time is not None:
        start = parse_instant(args.start_time, now_ms)
    elif args.pace == "fast":
        start = now_ms - now_ms % 1000
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
        skew_fraction=args.skew_fraction,
        max_skew_ms=args.max_skew,
        duplicate_fraction=args.duplicate_fraction,
        malformed_fraction=args.malformed_fraction,
        iso_fraction=args.iso_fraction,
        heartbeat_interval_ms=args.heartbeat_interval,
    )


def run(args: argparse.Namespace) -> int:
    """`tidegauge produce`: send the stream, print a summary; exit 0 also on Ctrl-C/SIGTERM."""
    from tidegauge.producer import run_cli  # the Kafka edge, imported only when producing

    return run_cli(args)
