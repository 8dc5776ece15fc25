"""Services ranked over a range by events or errors, counted inside Redis.

A page that draws the busiest services of a thousand must not fetch a thousand aggregates per
window to find them. The count and the errors of an aggregate sit at known places in its bytes
(`WindowAgg.to_bytes`, versions 2 and 3), so a read-only Lua script (`EVAL_RO`) reads them
where the windows are and returns a few numbers per (window, service). Closed windows are
counted once per reader (`ClosedWindows`); a refresh counts only the windows still open.
A Redis user without `EVAL_RO` gets the same numbers read in Python (every aggregate fetched).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.events import ALL_SERVICES
from tidegauge.core.retention import plan_reads
from tidegauge.core.store.index import _reusable, _starts, _sync
from tidegauge.core.store.keys import Keys, _s
from tidegauge.core.store.tiers import read_retention
from tidegauge.core.window_aggs import WindowAggs
from tidegauge.core.windows import WindowSpec

__all__ = [
    "RANK_BY",
    "ServiceTotals",
    "rank_services",
    "ranked_parts",
    "read_service_totals",
]

#: What services can be ranked by.
RANK_BY = ("events", "errors")

#: For each window key: a flat list service, count, errors (`*` left out).
_COUNTS = """
local out = {}
for i, key in ipairs(KEYS) do
  local flat = redis.call('HGETALL', key)
  local res = {}
  for j = 1, #flat, 2 do
    local svc, blob = flat[j], flat[j + 1]
    if svc ~= '*' and string.sub(blob, 1, 4) == 'TGWA' then
      local count, errors = 0, 0
      local version = string.byte(blob, 5)
      if version == 3 then
        local n = struct.unpack('<I2', blob, 6)
        local pos = 8
        for _ = 1, n do
          local k = string.byte(blob, pos)
          local name = string.sub(blob, pos + 1, pos + k)
          local size = struct.unpack('<I4', blob, pos + 1 + k)
          local at = pos + 5 + k
          if name == 'count' then
            count = struct.unpack('<i8', blob, at)
          elseif name == 'errors' then
            errors = struct.unpack('<i8', blob, at)
          end
          pos = at + size
        end
      elseif version == 2 then
        count = struct.unpack('<i8', blob, 6)
        errors = struct.unpack('<i8', blob, 14)
      end
      res[#res + 1] = svc
      res[#res + 1] = count
      res[#res + 1] = errors
    end
  end
  out[i] = res
end
return out
"""

#: Window keys counted per script call (one round trip each).
_KEYS_PER_CALL = 200


@dataclass(frozen=True)
class ServiceTotals:
    """One service's events and errors over a range (exact: summed window counts)."""

    service: str
    events: int
    errors: int

    def value(self, by: str) -> int:
        """The figure services are ranked by (`RANK_BY`)."""
        if by not in RANK_BY:
            raise ValueError(f"rank by one of {', '.join(RANK_BY)}, not {by!r}")
        return self.events if by == "events" else self.errors


def read_service_totals(
    r: redis.Redis,
    keys: Keys,
    parts: Iterable[tuple[WindowSpec, Sequence[int]]],
    cache: ClosedWindows | None = None,
) -> dict[str, ServiceTotals]:
    """Events and errors per service (without `*`) over the windows of `parts`, (spec, starts).

    Each window is counted inside Redis; with `cache`, closed windows only once.
    """
    watermark = _sync(r, keys, cache) if cache is not None else None
    per_window: list[dict[str, tuple[int, int]]] = []
    missing: list[tuple[WindowSpec, int]] = []
    for spec, starts in parts:
        for start in starts:
            known = cache.get("totals", spec.key, start) if cache is not None else None
            if known is None:
                missing.append((spec, start))
            else:
                per_window.append(known)
    for at in range(0, len(missing), _KEYS_PER_CALL):
        chunk = missing[at : at + _KEYS_PER_CALL]
        counted = _count(r, [keys.window_aggs(spec.key, start) for spec, start in chunk])
        for (spec, start), counts in zip(chunk, counted, strict=True):
            if cache is not None and _reusable(spec, start, watermark):
                cache.put("totals", spec.key, start, counts)
            per_window.append(counts)
    events: dict[str, int] = {}
    errors: dict[str, int] = {}
    for counts in per_window:
        for svc, (n, e) in counts.items():
            events[svc] = events.get(svc, 0) + n
            errors[svc] = errors.get(svc, 0) + e
    return {s: ServiceTotals(s, events[s], errors[s]) for s in sorted(events)}


def ranked_parts(
    r: redis.Redis, keys: Keys, spec: WindowSpec, since_ms: int, until_ms: int, min_size_ms: int
) -> list[tuple[WindowSpec, list[int]]]:
    """The windows of [since, until) a chart of `spec` draws: (spec, starts) per part.

    A tumbling spec's range comes from the retention tiers as `read_windows_tiered` reads it
    (each part from the finest tier holding it, of at least `min_size_ms`); other specs are
    their own windows.
    """
    stored = read_retention(r, keys) if spec.kind == "tumbling" else None
    if stored is None or not stored.layers:
        return [(spec, _starts(r, keys, spec, since_ms, until_ms, with_late=False))]
    out = []
    for part, lo, hi in plan_reads(since_ms, until_ms, stored.layers, min_size_ms):
        starts = _starts(r, keys, part, lo, hi, with_late=False)
        out.append((part, [s for s in starts if lo <= s < hi]))
    return out


def rank_services(totals: dict[str, ServiceTotals], by: str, n: int) -> list[str]:
    """The `n` services with the most `by` (ties by name), most first."""
    ranked = sorted(totals.values(), key=lambda t: (-t.value(by), t.service))
    return [t.service for t in ranked[:n]]


def _count(r: redis.Redis, window_keys: list[str]) -> list[dict[str, tuple[int, int]]]:
    """(count, errors) per service of each window, counted by the script if Redis lets us."""
    try:
        got: Any = r.eval_ro(_COUNTS, len(window_keys), *window_keys)
    except redis.exceptions.NoPermissionError:
        return _count_here(r, window_keys)
    out = []
    for flat in got:
        it = iter(flat)
        out.append({_s(svc): (int(n), int(e)) for svc, n, e in zip(it, it, it, strict=True)})
    return out


def _count_here(r: redis.Redis, window_keys: list[str]) -> list[dict[str, tuple[int, int]]]:
    """`_count` without scripting: every aggregate fetched and decoded here."""
    pipe = r.pipeline(transaction=False)
    for key in window_keys:
        pipe.hgetall(key)
    out = []
    for fields in pipe.execute():
        named = {_s(k): v for k, v in fields.items() if _s(k) != ALL_SERVICES}
        aggs = WindowAggs.decode(list(named.values())) if named else None
        counts = aggs.ints["count"].tolist() if aggs is not None else []
        errors = aggs.ints["errors"].tolist() if aggs is not None else []
        out.append(dict(zip(named, zip(counts, errors, strict=True), strict=True)))
    return out
