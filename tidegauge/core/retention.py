"""Retention tiers: how long windows are kept, and the roll-ups that outlive them (pure).

`--retention RAW_TTL[,SIZE:TTL...]` (default `6h,1m:7d,10m:7d,1h:90d`): the job's windows are
kept for RAW_TTL, and the smallest tumbling spec (the *source*) lives on as roll-ups of SIZE,
each kept for its TTL. A roll-up period is the merge of the finer tier's windows inside it
(counts exact, sketches merged: what a query over the finer windows would merge), built once
the watermark has closed the whole period. Ages are event time against the watermark, so a
replay or a time-compressed stream expires exactly as real time would (docs/redis.md,
"Retention"):

    a window [start, end) of a tier with TTL t is dropped once   watermark - end >= t

    tiers:    raw 10s windows ........................|  (6h)
              1m roll-ups  ...............................................|  (7d)
              10m roll-ups ...............................................|  (7d)
              1h roll-ups  .........................................................|  (90d)
              <------------------------------------------------------------ watermark

A range read takes each part from the finest tier that still holds it whole (`cover`): inside
the raw TTL exactly the raw windows, after a tier expires the next one answers for it. The
10-minute tier keeps as long as the 1-minute one: it is there for readers that want few pieces
(a ranking of an hour merges six of them, a week's chart draws 1,008 points, not 168) and for the
hourly roll-up, built from six windows rather than sixty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidegauge.core.durations import parse_duration
from tidegauge.core.windows import WindowSpec, tumbling_start

__all__ = [
    "DEFAULT_RETENTION",
    "DEFAULT_RETENTION_SIZE",
    "Footprint",
    "Layer",
    "Retention",
    "Tier",
    "cover",
    "cover_by_spec",
    "expired",
    "fit",
    "format_size",
    "format_span",
    "parse_size",
    "plan_reads",
    "projected_bytes",
]

#: `--retention` when not given.
DEFAULT_RETENTION = "6h,1m:7d,10m:7d,1h:90d"

#: `--retention-size` when not given: the store's byte budget (`fit`).
DEFAULT_RETENTION_SIZE = "2GB"

#: No TTL is scaled below this: a tier that keeps less than a minute answers nothing useful.
MIN_TTL_MS = 60_000

_DAY = 86_400_000
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int | None:
    """A byte budget as people write it: "2GB", "512MB", "1.5G", "800MiB" (powers of 1024).

    "0", "none" or "off": no budget (None).
    """
    s = text.strip().lower().replace(" ", "")
    if s in ("0", "none", "off", "unlimited"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(?:i?b)?", s)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(
            f"--retention-size {text!r}: expected a size such as 2GB, 512MB or 1.5G "
            "(powers of 1024), or none"
        )
    return round(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def format_size(n: float) -> str:
    """Bytes as `parse_size` reads them: "2GB", "1.5GB", "512MB"."""
    for unit, size in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{round(n)}B"


def format_span(ms: int) -> str:
    """A retention duration as people write it: "90d", "6h", "1m", "10s", "1h30m"."""
    parts = []
    for unit, size in (("d", _DAY), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts) or "0s"


def expired(end_ms: int, watermark_ms: int, ttl_ms: int | None) -> bool:
    """A window ending at `end_ms` is past its tier's TTL (None: kept for ever)."""
    return ttl_ms is not None and watermark_ms - end_ms >= ttl_ms


@dataclass(frozen=True)
class Tier:
    """Roll-ups of `size_ms`, each kept `ttl_ms` of event time after its end."""

    size_ms: int
    ttl_ms: int

    @property
    def spec(self) -> WindowSpec:
        """The roll-up's window spec (stored under key `r{size}`)."""
        return WindowSpec.rollup_of(self.size_ms)


@dataclass(frozen=True)
class Retention:
    """The raw windows' TTL (None: kept for ever) and the roll-up tiers, finest first."""

    raw_ttl_ms: int | None
    tiers: tuple[Tier, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Retention:
        """`6h,1m:7d,1h:90d`; `forever` keeps every window (no expiry, no roll-ups)."""
        s = text.strip().lower()
        if s in ("forever", "keep", "none"):
            return cls(None)
        head, *rest = [p.strip() for p in s.split(",")]
        try:
            raw = parse_duration(head)
            tiers = []
            for part in rest:
                size, sep, ttl = part.partition(":")
                if not sep:
                    raise ValueError(f"{part!r} is not SIZE:TTL")
                tiers.append(Tier(parse_duration(size), parse_duration(ttl)))
        except ValueError as e:
            raise ValueError(
                f"--retention {text!r}: {e}; expected RAW_TTL[,SIZE:TTL...] such as "
                f"{DEFAULT_RETENTION}, or forever"
            ) from None
        out = cls(raw, tuple(tiers))
        out.check()
        return out

    def check(self) -> None:
        """Sizes grow and divide each other; every tier outlives the next one's period."""
        if self.raw_ttl_ms is None:
            if self.tiers:
                raise ValueError("--retention forever keeps the raw windows: no roll-ups needed")
            return
        if self.raw_ttl_ms <= 0:
            raise ValueError("--retention: the raw windows' TTL must be positive")
        prev_size, prev_ttl, prev_name = 0, self.raw_ttl_ms, "the raw windows"
        for t in self.tiers:
            name = f"the {format_span(t.size_ms)} roll-ups"
            if t.size_ms <= prev_size or (prev_size and t.size_ms % prev_size):
                raise ValueError(
                    f"--retention: {name} must be a whole multiple of the tier before "
                    f"({format_span(prev_size)}), and larger"
                )
            if prev_ttl < t.size_ms:
                raise ValueError(
                    f"--retention: {prev_name} ({format_span(prev_ttl)}) must be kept at least "
                    f"as long as one period of {name}, which are built from them"
                )
            if t.ttl_ms < prev_ttl:
                raise ValueError(
                    f"--retention: {name} ({format_span(t.ttl_ms)}) must be kept at least as "
                    f"long as {prev_name} ({format_span(prev_ttl)})"
                )
            prev_size, prev_ttl, prev_name = t.size_ms, t.ttl_ms, name

    def for_source(self, source_ms: int | None) -> Retention:
        """The tiers usable with a source spec of this size (None: no tumbling spec).

        Raises when a tier's size is not a multiple of the source's; without a source, only
        the raw TTL applies (a hopping or session window does not tile time).
        """
        if source_ms is None:
            return Retention(self.raw_ttl_ms)
        for t in self.tiers:
            if t.size_ms <= source_ms or t.size_ms % source_ms:
                raise ValueError(
                    f"--retention: {format_span(t.size_ms)} roll-ups must be a multiple of the "
                    f"smallest tumbling --window ({format_span(source_ms)}), and larger"
                )
        return self

    @property
    def longest_ms(self) -> int | None:
        """How long anything of a window is kept at all (None: for ever)."""
        if self.raw_ttl_ms is None:
            return None
        return max([self.raw_ttl_ms] + [t.ttl_ms for t in self.tiers])

    def text(self) -> str:
        """Inverse of `parse`."""
        if self.raw_ttl_ms is None:
            return "forever"
        parts = [format_span(self.raw_ttl_ms)]
        parts += [f"{format_span(t.size_ms)}:{format_span(t.ttl_ms)}" for t in self.tiers]
        return ",".join(parts)

    def scaled(self, factor: float) -> Retention:
        """Every TTL times `factor` (whole seconds), as far as `check` allows.

        No TTL drops below `MIN_TTL_MS`, below one period of the next tier (built from it)
        or below the finer tier's TTL, so the tiers keep their shape: each still answers for
        a longer past than the one before it.
        """
        if self.raw_ttl_ms is None or factor >= 1.0:
            return self
        ttls = [self.raw_ttl_ms] + [t.ttl_ms for t in self.tiers]
        sizes = [t.size_ms for t in self.tiers] + [0]
        out: list[int] = []
        for i, ttl in enumerate(ttls):
            scaled = _round_down(ttl * factor)
            floor = max(MIN_TTL_MS, sizes[i], out[-1] if out else 0)
            out.append(min(ttl, max(scaled, floor)))
        tiers = tuple(Tier(t.size_ms, ttl) for t, ttl in zip(self.tiers, out[1:], strict=True))
        return Retention(out[0], tiers)


def _round_down(ms: float) -> int:
    """A scaled TTL people can read (rounded down: it still fits).

    Whole seconds under 10 minutes, minutes under a day, hours beyond.
    """
    unit = 1_000 if ms < 600_000 else 60_000 if ms < _DAY else 3_600_000
    return int(ms // unit) * unit


@dataclass(frozen=True)
class Footprint:
    """What one kind of window costs the store: `bytes` each, a new one every `step_ms`.

    `tier`: the TTL it is kept for, None for the raw TTL (the job's windows, arrivals) or the
    index of a roll-up tier in `Retention.tiers`.
    """

    step_ms: int
    bytes: float
    tier: int | None = None


def projected_bytes(retention: Retention, footprints: Iterable[Footprint]) -> float:
    """What the store holds once every tier is full: the windows each TTL keeps, in bytes.

    Infinite when the windows are kept for ever.
    """
    if retention.raw_ttl_ms is None:
        return math.inf
    total = 0.0
    for f in footprints:
        ttl = retention.raw_ttl_ms if f.tier is None else retention.tiers[f.tier].ttl_ms
        total += f.bytes * ttl / f.step_ms
    return total


def fit(retention: Retention, footprints: Sequence[Footprint], budget: int | None) -> Retention:
    """The longest retention of `retention`'s shape whose projection fits `budget` bytes.

    `retention` itself when it fits (or without a budget, or kept for ever); else every TTL
    scaled by the largest factor that fits (`Retention.scaled`), or by the smallest one
    allowed when even that does not (the TTLs' floors).
    """
    if budget is None or retention.raw_ttl_ms is None:
        return retention
    if projected_bytes(retention, footprints) <= budget:
        return retention
    lo, hi = 0.0, 1.0
    for _ in range(40):  # the projection grows with the factor: bisect it
        mid = (lo + hi) / 2
        if projected_bytes(retention.scaled(mid), footprints) <= budget:
            lo = mid
        else:
            hi = mid
    return retention.scaled(lo)


@dataclass(frozen=True)
class Layer:
    """What one tier holds for a reader: windows of `spec` ending in (held_after, ready_until].

    `held_after`: windows ending at or before it have expired (None: nothing expired);
    `ready_until`: roll-ups exist for periods ending at or before it (None for the raw tier,
    whose windows are written as they fill).
    """

    spec: WindowSpec
    held_after: int | None = None
    ready_until: int | None = None

    def holds(self, start_ms: int) -> bool:
        """The tier has (or will have) the window starting at `start_ms`."""
        end = self.spec.end(start_ms)
        if self.held_after is not None and end <= self.held_after:
            return False
        return self.ready_until is None or end <= self.ready_until


def cover(
    since_ms: int, until_ms: int, layers: Sequence[Layer], min_size_ms: int = 0
) -> list[tuple[WindowSpec, int]]:
    """Pieces (spec, window start) that tile [since, until) as far as the layers hold it.

    Each part comes from the finest tier that still holds it whole: a coarser window is taken
    where it lies wholly inside the range, its tier holds it and the next finer tier does not
    hold all of it (or is finer than `min_size_ms`, a resolution asked for); what is left is
    filled from finer tiers, whose windows may be cut by the range's ends (those are left out,
    as a range read always did). Within the raw TTL a range is therefore merged from exactly
    the raw windows. Sorted by start. `layers` are finest first, sizes dividing each other.
    """
    out: list[tuple[WindowSpec, int]] = []

    def finer_holds_all(level: int, start: int, end: int) -> bool:
        if level == 0:
            return False
        finer = layers[level - 1]
        if finer.spec.size_ms < min_size_ms:
            return False
        return finer.holds(start) and finer.holds(end - finer.spec.size_ms)

    def fill(lo: int, hi: int, level: int) -> None:
        if lo >= hi or level < 0:
            return
        layer = layers[level]
        size = layer.spec.size_ms
        start = -(-lo // size) * size  # first aligned start >= lo
        pos = lo
        while start + size <= hi:
            if layer.holds(start) and not finer_holds_all(level, start, start + size):
                fill(pos, start, level - 1)
                out.append((layer.spec, start))
                pos = start + size
            start += size
        fill(pos, hi, level - 1)

    if layers and until_ms > since_ms:
        fill(since_ms, until_ms, len(layers) - 1)
    return sorted(out, key=lambda p: (p[1], p[0].size_ms))


def cover_by_spec(
    since_ms: int, until_ms: int, layers: Sequence[Layer], min_size_ms: int = 0
) -> list[tuple[WindowSpec, list[int]]]:
    """`cover`'s pieces grouped by spec, finest spec first: what to read from each tier."""
    by_spec: dict[WindowSpec, list[int]] = {}
    for spec, start in cover(since_ms, until_ms, layers, min_size_ms):
        by_spec.setdefault(spec, []).append(start)
    return sorted(by_spec.items(), key=lambda kv: kv[0].size_ms)


def _align_up(ts_ms: int, size_ms: int) -> int:
    return -(-ts_ms // size_ms) * size_ms


def _spans(layers: Sequence[Layer]) -> list[tuple[Layer, int | None, int | None]]:
    """Finest first, the part of event time each layer answers for: [lo, hi), None = open.

    The finest layer answers for everything it holds; each coarser one for what lies before,
    from the first of its periods that the finer layer holds no part of, so no window of one
    layer overlaps a window of another.
    """
    out: list[tuple[Layer, int | None, int | None]] = []
    upper: int | None = None
    for i, layer in enumerate(layers):
        size = layer.spec.size_ms
        lo = None
        if layer.held_after is not None:
            lo = _align_up(layer.held_after - size + 1, size)  # first window ending after it
            if i + 1 < len(layers):
                lo = _align_up(lo, layers[i + 1].spec.size_ms)
        hi = upper
        if layer.ready_until is not None:
            hi = layer.ready_until if hi is None else min(hi, layer.ready_until)
        if hi is not None:
            hi -= hi % size  # none of its windows may reach into a finer layer's part
        out.append((layer, lo, hi))
        if lo is None:
            break
        # A layer that holds nothing of its part (lo >= hi) must not move the bound up: the
        # next one answers for what lies before the finest part that is held.
        upper = lo if upper is None else min(upper, lo)
    return out


def plan_reads(
    since_ms: int, until_ms: int, layers: Sequence[Layer], min_size_ms: int = 0
) -> list[tuple[WindowSpec, int, int]]:
    """Which tier to read for each part of [since, until): (spec, from, to), oldest first.

    Each part comes from the finest tier that still holds it among those of at least
    `min_size_ms` (a chart's resolution; 0: the finest there is). The newest part, which no
    such tier has rolled up yet, comes from the coarsest finer tier that has rolled it up, and
    what is left of it from finer ones still (an hour's chart ends in minutes, then seconds).
    """
    if not layers or until_ms <= since_ms:
        return []
    chosen = [la for la in layers if la.spec.size_ms >= min_size_ms] or [layers[-1]]
    finer = [la for la in layers if la.spec.size_ms < chosen[0].spec.size_ms]
    spans = _spans(chosen)
    out = []
    for layer, lo, hi in spans:
        a = since_ms if lo is None else max(since_ms, lo)
        b = until_ms if hi is None else min(until_ms, hi)
        if a < b:
            out.append((layer.spec, a, b))
    tail = spans[0][2]
    if tail is not None and finer and tail < until_ms:
        # the newest part: from the coarsest finer tier that has it, the rest finer still
        out += plan_reads(max(since_ms, tail), until_ms, finer, finer[-1].spec.size_ms)
    return sorted(out, key=lambda p: p[1])


def period_start(ts_ms: int, tier: Tier) -> int:
    """Start of the tier's period that holds `ts_ms`."""
    return tumbling_start(ts_ms, tier.size_ms)
