"""What traffic `tidegauge produce` makes: `GeneratorConfig`, its defaults and flag parsers.

A frozen, validated object (cross-field rules checked when it is built), so a bad combination
fails before anything is sent. `tidegauge.traffic.cli` builds it from flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from tidegauge.core.events import MAX_TIME_MS, MIN_TIME_MS
from tidegauge.traffic.attributes import Attributes
from tidegauge.traffic.records import HEARTBEAT_SOURCE

__all__ = [
    "BURST_TOP_USERS",
    "DEFAULT_LATENCY",
    "DEFAULT_SERVICES",
    "FALLBACK_LATENCY",
    "PRODUCED_FORMATS",
    "SCENARIOS",
    "SKEWED_CLOCKS_FRACTION",
    "GeneratorConfig",
    "Pace",
    "parse_latency",
    "parse_services",
]

Pace = Literal["realtime", "fast"]

#: The record formats `--format` writes (what `tidegauge job --format` reads).
PRODUCED_FORMATS = ("tidegauge", "access-log", "otlp_proto", "otlp_json")

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
#: name -> (median ms, sigma) of the lognormal latency; other services get `FALLBACK_LATENCY`.
DEFAULT_LATENCY: dict[str, tuple[float, float]] = {
    "api": (40.0, 0.6),
    "web": (120.0, 0.6),
    "search": (80.0, 0.6),
    "auth": (25.0, 0.6),
    "payments": (200.0, 0.6),
}
FALLBACK_LATENCY = (50.0, 0.6)

# The late-burst device is never one of this many most popular users: a burst from u000001
# would hide in its ordinary traffic instead of standing out.
BURST_TOP_USERS = 100


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
    #: Share of duplicates sent to a partition drawn at random instead of by their key.
    duplicate_other_partition: float = 0.0
    #: Share of duplicates re-sent after the lateness (their original's window has closed).
    duplicate_late_fraction: float = 0.0
    malformed_fraction: float = 0.0
    #: Malformed records take every fuzzing kind (tidegauge/traffic/malformed.py), not only the
    #: basic 14 (which keep older seeded streams as they were).
    fuzz: bool = False
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
    #: How events are written: the contract's JSON, or nginx's JSON access log lines
    #: (`--format access-log`, read by `tidegauge job --format access-log`).
    record_format: str = "tidegauge"
    #: Requests' routes and regions (`attributes.Attributes`): spans always carry them, the
    #: contract's JSON with `attributes` (`--attributes`).
    routes: int = 7
    regions: int = 3
    attributes: bool = False

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
            ("--duplicate-other-partition", self.duplicate_other_partition),
            ("--duplicate-late-fraction", self.duplicate_late_fraction),
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
        self._check_format()
        self.request_attributes()  # refuses --routes / --regions out of range

    def request_attributes(self) -> Attributes:
        """The routes, methods, regions and versions of this run's requests."""
        return Attributes(self.routes, self.regions)

    def _check_format(self) -> None:
        if self.record_format not in PRODUCED_FORMATS:
            raise ValueError(
                f"--format is one of {', '.join(PRODUCED_FORMATS)}, got {self.record_format!r}"
            )
        if self.attributes and self.record_format != "tidegauge":
            raise ValueError(
                f"--attributes writes route, method, region and version into the contract's "
                f"JSON; --format {self.record_format} "
                + (
                    "spans carry them always"
                    if self.record_format.startswith("otlp")
                    else "has none"
                )
            )
        if self.record_format == "tidegauge":
            return
        # An access log holds requests only: what else the generator can send has no line.
        for flag, on in (
            ("--heartbeat-interval (heartbeats)", self.heartbeat_interval_ms > 0),
            ("--malformed-fraction", self.malformed_fraction > 0),
            ("--scenario backlog (control records)", "backlog" in self.scenarios),
        ):
            if on:
                raise ValueError(
                    f"--format {self.record_format}: {flag} has no record of that format; "
                    "leave it off"
                )

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
        if "late-burst" in self.scenarios and self.users <= BURST_TOP_USERS:
            raise ValueError(
                f"--scenario late-burst needs --users > {BURST_TOP_USERS} (the device is never "
                f"one of the {BURST_TOP_USERS} most popular users), got {self.users}"
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
        if self.live_commands and self.users <= BURST_TOP_USERS:
            raise ValueError(
                f"--live-commands needs --users > {BURST_TOP_USERS} (a late burst's device is "
                f"never one of the {BURST_TOP_USERS} most popular users), got {self.users}"
            )

    def latency_of(self, service: str) -> tuple[float, float]:
        """(median ms, sigma) of `service`'s lognormal latency: --latency, else the default."""
        for name, median, sigma in self.latency:
            if name == service:
                return median, sigma
        return DEFAULT_LATENCY.get(service, FALLBACK_LATENCY)

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
            sig = float(sigma) if sigma else FALLBACK_LATENCY[1]
            out.append((name.strip(), float(median), sig))
        except ValueError:
            raise ValueError(f"--latency wants service=median_ms[:sigma], got {part!r}") from None
    return tuple(out)
