"""Alert rules over event-time windows, and the three states of a firing (pure).

A rule says: this metric of this service (or `*`, all services) compared with a threshold, for N
consecutive windows. Windows are revised while they are open (stragglers), so a firing cannot
be final until the watermark has closed the windows that make it (docs/alerts.md):

* **provisional**: N consecutive windows breach, but not all of those N are closed yet;
* **confirmed**: N consecutive *closed* windows breach. Closed windows never change, so this is
  final;
* **retracted**: a firing reported provisional whose windows no longer breach N in a row (a
  straggler brought one back under), or whose closed windows turned out not to.

A firing is identified by its rule, service and the start of its first breaching window, and
keeps that identity while its run of windows grows or a straggler moves its start earlier.
Each firing moves forward only: provisional -> retracted or confirmed, retracted -> confirmed
(when the closed windows breach after all), so stragglers that push a window over and back
again cause at most one notice per state, never a stream of fire/resolve pairs.

Processing-time metrics (freshness, dead letters) are measured per micro-batch: a batch never
changes once written, so their firings are confirmed at once.
"""

from __future__ import annotations

import hashlib
import operator
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tidegauge.core.durations import format_duration, parse_duration, to_iso
from tidegauge.core.store.records import WindowRow
from tidegauge.core.windows import match_spec

__all__ = [
    "SLO_BURN",
    "SloCheck",
    "State",
    "BATCH_METRICS",
    "METRICS",
    "OPS",
    "STATES",
    "Firing",
    "Rule",
    "advance",
    "batch_points",
    "describe_firing",
    "evaluate",
    "load_rules",
    "ongoing",
    "parse_rule",
    "title",
    "window_points",
]

State = Literal["provisional", "confirmed", "retracted"]
STATES: tuple[State, ...] = ("provisional", "confirmed", "retracted")


def _late_share(w: WindowRow) -> float | None:
    seen = w.count + w.late
    return w.late / seen if seen else None


#: Window metrics a rule can watch: name -> value of a window (None: no value, never breaches).
METRICS: dict[str, Callable[[WindowRow], float | None]] = {
    "events_per_s": lambda w: w.events_per_s,
    "error_rate": lambda w: w.error_rate if w.count else None,
    "p50": lambda w: w.p50,
    "p90": lambda w: w.p90,
    "p95": lambda w: w.p95,
    "p99": lambda w: w.p99,
    "p999": lambda w: w.p999,
    "distinct_users": lambda w: float(w.distinct_users),
    "late_share": _late_share,
    "stragglers": lambda w: float(w.stragglers),
}

#: Processing-time metrics, one value per micro-batch (the job's batch history).
BATCH_METRICS: dict[str, Callable[[Mapping[str, Any]], float | None]] = {
    "freshness_p99": lambda b: _get(b.get("freshness"), "p99_ms"),
    "dead_letters": lambda b: float(b.get("dead_letters", 0) or 0),
}

OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}

_ALIASES = {"p99.9": "p999", "events/s": "events_per_s", "rate": "events_per_s"}
_ALIASES |= {"freshness": "freshness_p99", "users": "distinct_users", "errors": "error_rate"}


def _get(d: Any, key: str) -> float | None:
    v = d.get(key) if isinstance(d, Mapping) else None
    return None if v is None else float(v)


#: The metric of burn-rate rules: both windows' burn over the rule's rate (fires at 1).
SLO_BURN = "slo_burn"


@dataclass(frozen=True)
class SloCheck:
    """What an SLO burn-rate rule checks: one objective against one of `BURN_RULES`."""

    objective: str
    target: float
    period_ms: int
    burn_rule: str
    rate: float
    long_ms: int
    short_ms: int

    def describe(self, service: str) -> str:
        """`checkout latency 99% over 720h: burn >= 14.4 over 1h and 5m`."""
        return (
            f"{service} {self.objective} {self.target:g}% over {format_duration(self.period_ms)}: "
            f"burn >= {self.rate:.3g} over {format_duration(self.long_ms)} and "
            f"{format_duration(self.short_ms)}"
        )


@dataclass(frozen=True)
class Rule:
    """One alert rule. `windows`: how many consecutive windows (or batches) must breach."""

    name: str
    metric: str
    op: str
    threshold: float
    windows: int = 1
    service: str = "*"
    #: The window spec key the rule reads (e.g. "10s"); None: the store's first spec.
    spec: str | None = None
    #: A burn-rate rule of a catalogued SLO (tidegauge/alerts/slo.py) instead of a metric's.
    slo: SloCheck | None = None
    #: Labels its notices carry (Alertmanager style: service, team, severity, slo).
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.slo is not None:
            if self.metric != SLO_BURN:
                raise ValueError(f"rule {self.name!r}: an SLO rule's metric is {SLO_BURN}")
        elif self.metric not in METRICS and self.metric not in BATCH_METRICS:
            known = ", ".join([*METRICS, *BATCH_METRICS])
            raise ValueError(f"rule {self.name!r}: unknown metric {self.metric!r} (known: {known})")
        if self.op not in OPS:
            raise ValueError(f"rule {self.name!r}: comparison must be one of {', '.join(OPS)}")
        if self.windows < 1:
            raise ValueError(f"rule {self.name!r}: 'for' must be at least 1 window")
        if not self.service:
            raise ValueError(f"rule {self.name!r}: service must be a name or '*'")

    @property
    def per_batch(self) -> bool:
        """A processing-time rule: evaluated over the job's batches, not windows."""
        return self.metric in BATCH_METRICS

    @property
    def key(self) -> str:
        """Stable id of what the rule checks (its name may change without losing firings)."""
        parts: tuple[Any, ...] = (
            self.metric,
            self.op,
            float(self.threshold),
            self.windows,
            self.service,
            self.spec,
        )
        if self.slo is not None:
            parts += (self.slo,)
        return hashlib.sha1("|".join(map(repr, parts)).encode()).hexdigest()[:12]

    def breaches(self, value: float | None) -> bool:
        """The value is over (or under) the threshold; no value never breaches."""
        return value is not None and OPS[self.op](value, self.threshold)

    def describe(self) -> str:
        """`p99 > 800 for 3 windows on api`."""
        if self.slo is not None:
            return self.slo.describe(self.service)
        unit = "batches" if self.per_batch else "windows"
        n = f" for {self.windows} {unit}" if self.windows > 1 else ""
        return f"{self.metric} {self.op} {self.threshold:g}{n} on {self.service}"


_RULE = re.compile(
    r"^\s*(?P<metric>[\w./]+)\s*(?P<op>>=|<=|>|<)\s*(?P<threshold>-?[\d.]+(?:e-?\d+)?)\s*(?P<unit>%|ms|s)?"
    r"(?:\s+for\s+(?P<n>\d+)(?:\s+(?:windows?|batches?))?)?"
    r"(?:\s+on\s+(?P<service>\S+))?"
    r"(?:\s+in\s+(?P<spec>\S+))?\s*$",
    re.IGNORECASE,
)


def parse_rule(text: str, name: str | None = None) -> Rule:
    """A rule from the command line: `METRIC OP THRESHOLD [for N] [on SERVICE] [in SPEC]`.

    `p99 > 800 for 3 on api`, `error_rate > 5% on *`, `freshness > 2s for 5`. A `%` divides by
    100 (rates are fractions); `s` multiplies by 1,000 (latencies and freshness are in ms).
    """
    m = _RULE.match(text)
    if not m:
        raise ValueError(
            f"cannot read rule {text!r}: expected METRIC OP THRESHOLD [for N] [on SERVICE], "
            "e.g. 'p99 > 800 for 3 on api'"
        )
    metric = _ALIASES.get(m["metric"].lower(), m["metric"].lower())
    threshold = float(m["threshold"])
    unit = (m["unit"] or "").lower()
    threshold = threshold / 100 if unit == "%" else threshold * 1000 if unit == "s" else threshold
    if m["spec"]:
        try:
            match_spec(m["spec"], ())  # reads it: a window the job could write, or an error
        except ValueError as e:
            raise ValueError(f"rule {text!r}: 'in {m['spec']}' is not a window: {e}") from None
    return Rule(
        name=name or text.strip(),
        metric=metric,
        op=m["op"],
        threshold=threshold,
        windows=int(m["n"] or 1),
        service=m["service"] or "*",
        spec=m["spec"],
    )


def load_rules(text: str) -> list[Rule]:
    """Rules of a TOML file: `[[rule]]` tables with name, metric, op, threshold, for, service.

    `when = "p99 > 800 for 3 on api"` may stand for metric/op/threshold/for/service.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"rules file is not TOML: {e}") from None
    rules = []
    for i, t in enumerate(doc.get("rule", []), 1):
        name = str(t.get("name") or f"rule {i}")
        unknown = set(t) - {"name", "when", "metric", "op", "threshold", "for", "service", "window"}
        if unknown:
            raise ValueError(f"rule {name!r}: unknown keys {', '.join(sorted(unknown))}")
        if "when" in t:
            rule = parse_rule(str(t["when"]), name)
            if "window" in t:
                rule = replace(rule, spec=_spec_key(t["window"]))
        else:
            missing = [k for k in ("metric", "op", "threshold") if k not in t]
            if missing:
                raise ValueError(f"rule {name!r}: missing {', '.join(missing)} (or 'when')")
            rule = Rule(
                name=name,
                metric=_ALIASES.get(str(t["metric"]).lower(), str(t["metric"]).lower()),
                op=str(t["op"]),
                threshold=float(t["threshold"]),
                windows=int(t.get("for", 1)),
                service=str(t.get("service", "*")),
                spec=_spec_key(t["window"]) if "window" in t else None,
            )
        rules.append(rule)
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise ValueError("rules file: two rules share a name")
    return rules


def _spec_key(text: Any) -> str:
    return format_duration(parse_duration(str(text)))


@dataclass(frozen=True)
class Point:
    """One window (or batch) of a rule's series: [start, end), its value, and whether final."""

    start: int
    end: int
    value: float | None
    closed: bool


def window_points(
    rule: Rule, windows: Iterable[WindowRow], watermark_ms: int | None = None
) -> list[Point]:
    """The rule's series from stored windows of its service, oldest first.

    A tumbling window without events has no stored row; between the first and the last row
    such windows count as windows of zero events (so `events_per_s < 1` sees a silence), closed
    when the watermark has passed their end.
    """
    value = METRICS[rule.metric]
    rows = sorted((w for w in windows if w.service == rule.service), key=lambda w: w.window_start)
    out: list[Point] = []
    for w in rows:
        size = w.window_end - w.window_start
        if out and w.kind == "tumbling" and size > 0:
            for start in range(out[-1].end, w.window_start, size):
                empty = WindowRow(start, start + size, w.service, 0, 0.0, spec=w.spec)
                closed = watermark_ms is not None and start + size <= watermark_ms
                out.append(Point(start, start + size, value(empty), closed))
        out.append(Point(w.window_start, w.window_end, value(w), w.closed))
    return out


def batch_points(rule: Rule, batches: Iterable[Mapping[str, Any]]) -> list[Point]:
    """The rule's series from the job's batch history (processing time), oldest first."""
    value = BATCH_METRICS[rule.metric]
    out = []
    for b in sorted(batches, key=lambda b: int(b.get("batch_id", 0))):
        t = int(b.get("batch_time", 0))
        out.append(Point(t, t + int(b.get("batch_duration_ms", 0) or 0), value(b), True))
    return out


@dataclass(frozen=True)
class Firing:
    """One firing of a rule for a service: its windows, state and the worst value seen."""

    rule: str
    rule_name: str
    service: str
    #: Event time (ms) of the first breaching window's start and the last one's end.
    start: int
    end: int
    state: State
    peak: float
    #: Breaching windows in the run now, and how many of those are closed.
    windows: int
    closed: int
    #: The firing's identity: rule, service and its first start as first reported.
    id: str = ""
    #: The description of the rule (`p99 > 800 for 3 windows on api`).
    text: str = ""
    #: Wall-clock ms of each state's first report (filled by `advance`).
    since: dict[str, int] = field(default_factory=dict)
    #: The rule's labels (SLO rules: service, team, severity, slo).
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON in Redis and in webhook bodies)."""
        return {
            "id": self.id,
            "rule": self.rule,
            "rule_name": self.rule_name,
            "text": self.text,
            "service": self.service,
            "start": self.start,
            "end": self.end,
            "state": self.state,
            "peak": self.peak,
            "windows": self.windows,
            "closed": self.closed,
            "since": dict(self.since),
            **({"labels": dict(self.labels)} if self.labels else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Firing:
        """Inverse of `to_dict`."""
        return cls(
            rule=str(d["rule"]),
            rule_name=str(d["rule_name"]),
            service=str(d["service"]),
            start=int(d["start"]),
            end=int(d["end"]),
            state=d["state"],
            peak=float(d["peak"]),
            windows=int(d["windows"]),
            closed=int(d["closed"]),
            id=str(d["id"]),
            text=str(d.get("text", "")),
            since={str(k): int(v) for k, v in dict(d.get("since", {})).items()},
            labels={str(k): str(v) for k, v in dict(d.get("labels", {})).items()},
        )


def evaluate(rule: Rule, points: Sequence[Point]) -> list[Firing]:
    """The rule's runs of breaching points as firings (state from the data alone).

    A run is consecutive points (each starts where the previous ended, or the next of a
    hopping series) that all breach; it fires when it holds `rule.windows` points. It is
    confirmed when `rule.windows` of its points are closed (closed points come first: windows
    close in event-time order), else provisional.
    """
    out: list[Firing] = []
    run: list[Point] = []

    def flush() -> None:
        if len(run) >= rule.windows:
            closed = sum(p.closed for p in run)
            values = [p.value for p in run if p.value is not None]
            worst = max(values) if rule.op in (">", ">=") else min(values)
            state: State = "confirmed" if closed >= rule.windows else "provisional"
            out.append(
                Firing(
                    rule=rule.key,
                    rule_name=rule.name,
                    service=rule.service,
                    start=run[0].start,
                    end=run[-1].end,
                    state=state,
                    peak=float(worst),
                    windows=len(run),
                    closed=closed,
                    id=f"{rule.key}:{rule.service}:{run[0].start}",
                    text=rule.describe(),
                    labels=dict(rule.labels),
                )
            )
        run.clear()

    step = _step(points)
    for p in points:
        if run and (p.start - run[-1].start != step or not rule.breaches(p.value)):
            flush()
        if rule.breaches(p.value):
            run.append(p)
    flush()
    return out


def _step(points: Sequence[Point]) -> int:
    """The series' slide: the smallest gap between starts (window size for tumbling)."""
    gaps = [
        b.start - a.start for a, b in zip(points, points[1:], strict=False) if b.start > a.start
    ]
    return min(gaps, default=points[0].end - points[0].start if points else 0)


#: Transitions a firing may take; anything else keeps the state it has.
_FORWARD: dict[str | None, tuple[State, ...]] = {
    None: ("provisional", "confirmed"),
    "provisional": ("confirmed", "retracted"),
    "retracted": ("confirmed",),
    "confirmed": (),
}


def advance(
    known: Sequence[Firing],
    found: Sequence[Firing],
    rule: Rule,
    oldest: int,
    now_ms: int,
) -> tuple[list[Firing], list[Firing]]:
    """(every firing of `rule` after this evaluation, the ones whose state changed).

    `known`: the rule's firings as stored; `found`: `evaluate` on the windows read, which
    cover time from `oldest` on. A found run that overlaps a known firing is that firing (its
    identity is kept); a known provisional firing that no found run overlaps is retracted,
    unless its windows are older than what was read.
    """
    out: list[Firing] = []
    changed: list[Firing] = []
    taken: set[str] = set()
    for f in found:
        match = next(
            (k for k in known if k.id not in taken and k.start < f.end and f.start < k.end), None
        )
        if match is None:
            new = replace(f, since={f.state: now_ms})
            out.append(new)
            changed.append(new)
            continue
        taken.add(match.id)
        state = f.state if f.state in _FORWARD[match.state] else match.state
        since = dict(match.since)
        if state != match.state:
            since.setdefault(state, now_ms)
        now = replace(
            f, id=match.id, state=state, since=since, peak=_worse(rule, match.peak, f.peak)
        )
        out.append(now)
        if state != match.state:
            changed.append(now)
    for k in known:
        if k.id in taken:
            continue
        absorbed = any(k.start < f.end and f.start < k.end for f in found)
        if k.start < oldest or k.state != "provisional" or absorbed:
            out.append(k)  # out of what was read, final, or merged into a neighbour's run
            continue
        gone = replace(k, state="retracted", since={**k.since, "retracted": now_ms})
        out.append(gone)
        changed.append(gone)
    return out, changed


def _worse(rule: Rule, a: float, b: float) -> float:
    return max(a, b) if rule.op in (">", ">=") else min(a, b)


def title(f: Firing) -> str:
    """The rule as its author knows it: its name, and its condition when the name is not that."""
    try:
        if parse_rule(f.rule_name).describe() == f.text:
            return f.rule_name  # a command-line rule, named by its own text
    except ValueError:
        pass
    return f"{f.rule_name} ({f.text})"


def describe_firing(f: Firing) -> str:
    """One line: state, rule, event-time span, windows (closed), worst value."""
    return (
        f"{f.state.upper():<12} {title(f)}; {to_iso(f.start)} to {to_iso(f.end)}, "
        f"{f.windows} window(s) ({f.closed} closed), worst {f.peak:,.4g}"
    )


def ongoing(firings: Iterable[Firing], newest_end_ms: int, slack_ms: int) -> list[Firing]:
    """Firings to tell a viewer about now: not retracted, reaching near the newest windows.

    Near: within `slack_ms` of the newest window's end. A firing whose windows are long past is
    history, not news.
    """
    return [f for f in firings if f.state != "retracted" and f.end >= newest_end_ms - slack_ms]
