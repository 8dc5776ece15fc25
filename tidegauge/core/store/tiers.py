"""Retention tiers as readers see them: which tier holds which part of event time.

The sink records the retention in force, the watermark its latest expiry ran with and how far
each roll-up tier is built (`Keys.retention`); from these, `read_layers` says what each tier
holds, and `tidegauge.core.retention.cover` picks the windows that answer a range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from tidegauge.core.retention import Layer, Retention, format_size, format_span
from tidegauge.core.store.keys import Keys, _s
from tidegauge.core.windows import WindowSpec

__all__ = ["StoredRetention", "read_retention", "resolution_text"]


@dataclass(frozen=True)
class StoredRetention:
    """The retention the job wrote with, and what its tiers hold now."""

    #: In force: `--retention` fitted to `--retention-size` (jobs/sink/footprint.py).
    retention: Retention
    #: The spec rolled up (the smallest tumbling one), or None when there are no roll-ups.
    source: WindowSpec | None
    watermark_ms: int
    #: Finest first: the source's raw windows, then each roll-up tier.
    layers: tuple[Layer, ...]
    #: `--retention` as set, and `--retention-size` (None: no budget).
    configured: Retention | None = None
    size_budget: int | None = None

    def text(self) -> str:
        """One line: the retention in force, and how it came from the flags when it differs."""
        line = f"retention {self.retention.text()}"
        if self.size_budget is None:
            return line
        budget = format_size(self.size_budget)
        if self.configured is None or self.configured == self.retention:
            return f"{line} (within --retention-size {budget})"
        return f"{line} (--retention {self.configured.text()} shortened to fit {budget})"


def read_retention(r: redis.Redis, keys: Keys) -> StoredRetention | None:
    """What the sink recorded (None: a store written without retention, every window kept)."""
    raw: Any = r.hgetall(keys.retention)
    meta = {_s(k): _s(v) for k, v in raw.items()}
    if "retention" not in meta:
        return None
    retention = Retention.parse(meta["retention"])
    wm = int(meta.get("watermark", 0))
    source = WindowSpec.from_key(meta["source"]) if meta.get("source") else None
    layers: list[Layer] = []
    if source is not None:
        specs = [source] + [t.spec for t in retention.tiers]
        ttls = [retention.raw_ttl_ms] + [t.ttl_ms for t in retention.tiers]
        ready: list[int | None] = [None]
        for t in retention.tiers:
            rolled = meta.get(f"rolled:{t.size_ms}")
            if rolled is None:
                break  # not built yet: nothing of it to read
            ready.append(int(rolled))
        for i, spec in enumerate(specs[: len(ready)]):
            rolled_on = ready[i + 1] if i + 1 < len(ready) else None
            horizon = _horizon(wm, ttls[i], rolled_on, i + 1 < len(specs))
            dropped = meta.get(f"dropped:{spec.key}")
            if dropped is not None:  # deleted under a shorter TTL before
                horizon = max(horizon or 0, int(dropped))
            layers.append(Layer(spec, horizon, ready[i]))
    configured = Retention.parse(meta["retention_set"]) if "retention_set" in meta else None
    budget = int(meta["retention_size"]) if "retention_size" in meta else None
    return StoredRetention(retention, source, wm, tuple(layers), configured, budget)


def _horizon(
    watermark_ms: int, ttl_ms: int | None, rolled_on: int | None, rolls: bool
) -> int | None:
    """Windows ending at or before this are gone (None: nothing has gone).

    A window past its TTL goes only once the next tier has rolled it up (`rolled_on`: how far
    it has; `rolls`: there is a next tier), so a store rolled up over several batches reads
    whole while it is.
    """
    if ttl_ms is None or watermark_ms <= 0:
        return None
    if not rolls:
        return watermark_ms - ttl_ms
    if rolled_on is None:
        return None
    return min(watermark_ms - ttl_ms, rolled_on)


def resolution_text(pieces: dict[str, int]) -> str:
    """Say which windows a range was merged from: "12 × 10s + 59 × 1m" (spec key -> count)."""
    parts = []
    for key, n in sorted(pieces.items(), key=lambda kv: WindowSpec.from_key(kv[0]).size_ms):
        parts.append(f"{n} × {format_span(WindowSpec.from_key(key).size_ms)}")
    return " + ".join(parts) if parts else "no windows"
