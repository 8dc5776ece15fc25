"""Services ranked over a range by events, errors or p99 latency, read inside Redis.

A page that draws the busiest services of a thousand must not fetch a thousand aggregates per
window to find them. The sink keeps each tumbling window's and roll-up's events and errors per
service in two sorted sets beside its aggregates (`ranked_counts`), and Redis sums them over
the range (`ZUNION`): a few numbers per (window, service), added in C. Windows without them
(written before the sink kept them) and the p99 ranking are read by a read-only Lua script
(`EVAL_RO`): the count and errors of an aggregate are its first entries
(`WindowAgg.to_bytes`; versions 2 and 3 too), and for p99 it returns each aggregate's latency
t-digest only, merged per service here. Closed windows the script reads are read once per
reader (`ClosedWindows`). A Redis user without `EVAL_RO` gets the same numbers read in Python
(every aggregate fetched).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import redis

from sketches.digests import Digests
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.events import ALL_SERVICES
from tidegauge.core.retention import cover_by_spec
from tidegauge.core.store.index import _reusable, _starts, _sync
from tidegauge.core.store.keys import Keys, _s
from tidegauge.core.store.tiers import read_retention
from tidegauge.core.window_aggs import WindowAggs
from tidegauge.core.windows import WindowSpec, tumbling_start

__all__ = [
    "RANK_BY",
    "RANK_FROM_MS",
    "RANK_PIECES",
    "ServiceTotals",
    "rank_size",
    "rank_services",
    "ranked_counts",
    "ranks_spec",
    "ranked_parts",
    "read_service_totals",
]

T = TypeVar("T")

#: Services are ranked from retention tiers of at least this size where they hold the range
#: (counts add up exactly): an hour is ~60 one-minute roll-ups to count, not 360 windows.
RANK_FROM_MS = 60_000

#: ... and of at least 1/RANK_PIECES of the range: an hour ranked from the 10-minute tier
#: (six roll-ups and the minutes at its ends, ~25 windows instead of ~70), a day from the
#: hourly one. The p99 ranking reads and merges every piece's latency digests, so the pieces,
#: not the range, decide what it costs.
RANK_PIECES = 6

#: What services can be ranked by: events and errors summed, p99 of the merged latency digests.
RANK_BY = ("events", "errors", "p99")

#: For each window key, a flat list per service (`*` left out): with ARGV[1] = "counts" its
#: count and errors, with "latency" its latency t-digest's bytes. Aggregates of version 4
#: (entries: varint tag, varint payload length, payload; the built-in metrics' tags are
#: 2 x id + 1, so count 1, errors 3, latency 5, written first and in that order, an empty one
#: left out: the walk stops past them), 2 (fixed layout) and 3 (entries: name length u8,
#: name, payload length u32, payload; read where they sit when count, errors and latency come
#: first, as that version was written: a quarter less of Redis's time than walking them).
_READ = r"""
local mode = ARGV[1]
local out = {}
local function uvarint(s, pos)
  local v, scale = 0, 1
  while true do
    local b = string.byte(s, pos)
    pos = pos + 1
    if b < 128 then return v + b * scale, pos end
    v = v + (b - 128) * scale
    scale = scale * 128
  end
end
for i, key in ipairs(KEYS) do
  local flat = redis.call('HGETALL', key)
  local res = {}
  for j = 1, #flat, 2 do
    local svc, blob = flat[j], flat[j + 1]
    local version = string.sub(blob, 1, 4) == 'TGWA' and string.byte(blob, 5) or 0
    if svc ~= '*' and version == 4 then
      local count, errors, latency = 0, 0, nil
      local n, pos = uvarint(blob, 6)
      for _ = 1, n do
        local tag, size
        tag, pos = uvarint(blob, pos)
        if tag % 2 == 0 then pos = pos + tag / 2 end  -- a plugin's metric, by its name
        size, pos = uvarint(blob, pos)
        if tag == 1 then count = struct.unpack('<i8', blob, pos)
        elseif tag == 3 then errors = struct.unpack('<i8', blob, pos)
        elseif tag == 5 and mode == 'latency' then latency = string.sub(blob, pos, pos + size - 1)
        end
        if tag >= 5 or tag % 2 == 0 then break end
        pos = pos + size
      end
      if mode == 'counts' then
        res[#res + 1] = svc
        res[#res + 1] = count
        res[#res + 1] = errors
      elseif latency then
        res[#res + 1] = svc
        res[#res + 1] = latency
      end
    elseif svc ~= '*' and version == 2 then
      res[#res + 1] = svc
      if mode == 'counts' then
        res[#res + 1] = struct.unpack('<i8', blob, 6)
        res[#res + 1] = struct.unpack('<i8', blob, 14)
      else
        res[#res + 1] = string.sub(blob, 38, 37 + struct.unpack('<I4', blob, 22))
      end
    elseif svc ~= '*' and version == 3 and string.sub(blob, 8, 17) == '\5count\8\0\0\0'
        and string.sub(blob, 26, 36) == '\6errors\8\0\0\0'
        and (mode == 'counts' or string.sub(blob, 45, 52) == '\7latency') then
      -- the layout WindowAgg.to_bytes writes: count, errors and latency first, where they sit
      res[#res + 1] = svc
      if mode == 'counts' then
        res[#res + 1] = struct.unpack('<i8', blob, 18)
        res[#res + 1] = struct.unpack('<i8', blob, 37)
      else
        res[#res + 1] = string.sub(blob, 57, 56 + struct.unpack('<I4', blob, 53))
      end
    elseif svc ~= '*' and version == 3 then
      local found = {count = 0, errors = 0}
      local n = struct.unpack('<I2', blob, 6)
      local pos = 8
      for _ = 1, n do
        local k = string.byte(blob, pos)
        local name = string.sub(blob, pos + 1, pos + k)
        local size = struct.unpack('<I4', blob, pos + 1 + k)
        local at = pos + 5 + k
        if mode == 'counts' and (name == 'count' or name == 'errors') then
          found[name] = struct.unpack('<i8', blob, at)
        elseif mode == 'latency' and name == 'latency' then
          found.latency = string.sub(blob, at, at + size - 1)
        end
        pos = at + size
      end
      if mode == 'counts' then
        res[#res + 1] = svc
        res[#res + 1] = found.count
        res[#res + 1] = found.errors
      elseif found.latency then
        res[#res + 1] = svc
        res[#res + 1] = found.latency
      end
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
    """One service's figures over a range.

    Events and errors are exact (summed window counts); p99 latency (ms) is that of its
    windows' t-digests merged (None when not read, or without latencies).
    """

    service: str
    events: int
    errors: int
    p99: float | None = None

    def value(self, by: str) -> float:
        """The figure services are ranked by (`RANK_BY`)."""
        if by not in RANK_BY:
            raise ValueError(f"rank by one of {', '.join(RANK_BY)}, not {by!r}")
        if by == "p99":
            return -1.0 if self.p99 is None else self.p99
        return self.events if by == "events" else self.errors


def ranked_counts(
    keys: Keys, windows: Sequence[tuple[str, int, Mapping[str, bytes]]]
) -> dict[str, dict[str, int]]:
    """What a writer stores beside aggregates for ranking: sorted set key -> service -> score.

    `windows`: (spec key, start, service -> aggregate bytes) of tumbling windows and roll-ups
    (`ranks_spec`); `*` is left out, as the ranking leaves it out.
    """
    named = [[s for s in aggs if s != ALL_SERVICES] for _, _, aggs in windows]
    blobs = [aggs[s] for (_, _, aggs), names in zip(windows, named, strict=True) for s in names]
    counts, errors = (x.tolist() for x in WindowAggs.counts(blobs))
    out: dict[str, dict[str, int]] = {}
    at = 0
    for (spec, start, _), names in zip(windows, named, strict=True):
        if names:
            end = at + len(names)
            out[keys.window_events(spec, start)] = dict(zip(names, counts[at:end], strict=True))
            out[keys.window_errors(spec, start)] = dict(zip(names, errors[at:end], strict=True))
            at = end
    return out


def ranks_spec(spec_key: str) -> bool:
    """Whether windows of this spec keep their counts in sorted sets (`ranked_counts`)."""
    return WindowSpec.from_key(spec_key).kind == "tumbling"


def read_service_totals(
    r: redis.Redis,
    keys: Keys,
    parts: Iterable[tuple[WindowSpec, Sequence[int]]],
    cache: ClosedWindows | None = None,
    *,
    with_p99: bool = False,
) -> dict[str, ServiceTotals]:
    """Each service's figures (without `*`) over the windows of `parts`, (spec, starts).

    Events and errors always, p99 latency with `with_p99`. Each window is read inside Redis;
    with `cache`, closed windows only once.
    """
    parts = [(spec, list(starts)) for spec, starts in parts]
    watermark = _sync(r, keys, cache) if cache is not None else None
    scored, scripted = _by_sorted_sets(r, keys, parts)
    events, errors = _summed(r, keys, scored)
    for counts in _memoised(r, keys, scripted, cache, watermark, "totals", _count):
        for svc, (n, e) in counts.items():
            events[svc] = events.get(svc, 0) + n
            errors[svc] = errors.get(svc, 0) + e
    p99 = _p99s(r, keys, parts, cache, watermark) if with_p99 else {}
    return {s: ServiceTotals(s, events[s], errors[s], p99.get(s)) for s in sorted(events)}


#: Windows summed per `ZUNION` (one command, its keys on one line).
_KEYS_PER_UNION = 500


def _by_sorted_sets(
    r: redis.Redis, keys: Keys, parts: Sequence[tuple[WindowSpec, Sequence[int]]]
) -> tuple[list[tuple[str, int]], list[tuple[WindowSpec, list[int]]]]:
    """The windows whose counts sorted sets hold every service, and the parts of the others.

    A window written before the sink kept them (or in part before: a store upgraded while the
    window was open) is read by the script instead.
    """
    cells = [(spec, start) for spec, starts in parts for start in starts if ranks_spec(spec.key)]
    pipe = r.pipeline(transaction=False)
    for spec, start in cells:
        pipe.zcard(keys.window_events(spec.key, start))
        pipe.hlen(keys.window_aggs(spec.key, start))
        pipe.hexists(keys.window_aggs(spec.key, start), ALL_SERVICES)
    got = iter(pipe.execute() if cells else [])
    whole = {
        (spec.key, start)
        for spec, start in cells
        if (n := next(got)) > 0 and n == next(got) - int(bool(next(got)))
    }
    scored = [(spec.key, start) for spec, start in cells if (spec.key, start) in whole]
    rest = [(spec, [s for s in starts if (spec.key, s) not in whole]) for spec, starts in parts]
    return scored, [(spec, starts) for spec, starts in rest if starts]


def _summed(
    r: redis.Redis, keys: Keys, windows: Sequence[tuple[str, int]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Events and errors per service over these windows' sorted sets, summed by Redis."""
    events: dict[str, int] = {}
    errors: dict[str, int] = {}
    for at in range(0, len(windows), _KEYS_PER_UNION):
        chunk = windows[at : at + _KEYS_PER_UNION]
        for out, key_of in ((events, keys.window_events), (errors, keys.window_errors)):
            got: Any = r.zunion([key_of(spec, start) for spec, start in chunk], withscores=True)
            for svc, score in got:
                name = _s(svc)
                out[name] = out.get(name, 0) + int(score)
    for svc in events:
        errors.setdefault(svc, 0)
    return events, errors


def _memoised(
    r: redis.Redis,
    keys: Keys,
    parts: Sequence[tuple[WindowSpec, Sequence[int]]],
    cache: ClosedWindows | None,
    watermark: int | None,
    kind: str,
    read: Callable[[redis.Redis, list[str]], list[T]],
) -> list[T]:
    """`read` of every window of `parts` (in order), closed windows from `cache` if there."""
    got: dict[tuple[str, int], T] = {}
    missing: list[tuple[WindowSpec, int]] = []
    for spec, starts in parts:
        for start in starts:
            known = cache.get(kind, spec.key, start) if cache is not None else None
            if known is None:
                missing.append((spec, start))
            else:
                got[(spec.key, start)] = known
    for at in range(0, len(missing), _KEYS_PER_CALL):
        chunk = missing[at : at + _KEYS_PER_CALL]
        values = read(r, [keys.window_aggs(spec.key, start) for spec, start in chunk])
        for (spec, start), value in zip(chunk, values, strict=True):
            if cache is not None and _reusable(spec, start, watermark):
                cache.put(kind, spec.key, start, value)
            got[(spec.key, start)] = value
    return [got[(spec.key, start)] for spec, starts in parts for start in starts]


#: For p99, windows' latency digests are read and merged in blocks of this many: an hour of
#: 10 s windows is ~30 pieces, a closed block is merged once per memo, and each block is one
#: script call, so Redis copies the next block out while this process merges the last (and no
#: call holds Redis, and the job's writes, for long).
P99_BLOCK = 12


@dataclass(frozen=True)
class _Block:
    """Consecutive windows of one spec whose latency digests are merged together.

    `aligned`: a tumbling spec's block of `P99_BLOCK` windows starting at a multiple of that
    span (the same block at every refresh); `edge`: the first or last block of its part, which
    the range's moving ends cut, so its windows are worth keeping one by one.
    """

    spec: WindowSpec
    members: tuple[int, ...]
    aligned: bool
    edge: bool


def _p99s(
    r: redis.Redis,
    keys: Keys,
    parts: Sequence[tuple[WindowSpec, Sequence[int]]],
    cache: ClosedWindows | None,
    watermark: int | None,
) -> dict[str, float]:
    """p99 latency per service of its windows' latency digests merged.

    With a memo, a closed aligned block is merged once; windows of the other blocks are read once.
    """
    pieces: list[tuple[list[str], Digests] | None] = []
    wanted: list[tuple[int, _Block, bool]] = []
    for block in _blocks(parts):
        spec, members = block.spec, block.members
        reuse = cache is not None and block.aligned and _reusable(spec, members[-1], watermark)
        # a block cut by the range's start holds fewer windows: its members say which
        known = cache.get("p99-blocks", spec.key, members[0]) if cache and reuse else None
        if known is not None and known[0] == members:
            pieces.append((known[1], known[2]))
            continue
        wanted.append((len(pieces), block, reuse))
        pieces.append(None)
    reads = _read_ahead(r, keys, [b for _, b, _ in wanted], cache, watermark)
    for (at, block, reuse), windows in zip(wanted, reads, strict=True):
        names, merged = _merged(windows)
        pieces[at] = (names, merged)
        if reuse:
            assert cache is not None
            cache.put(
                "p99-blocks", block.spec.key, block.members[0], (block.members, names, merged)
            )
    names, merged = _merged([p for p in pieces if p is not None])
    if not names:
        return {}
    q = merged.quantiles([0.99])[:, 0]
    return {svc: float(q[i]) for i, svc in enumerate(names) if merged.count[i] > 0}


def _blocks(parts: Sequence[tuple[WindowSpec, Sequence[int]]]) -> list[_Block]:
    """The windows of `parts` in blocks of at most `P99_BLOCK`, in order.

    A tumbling spec's blocks are aligned to multiples of `P99_BLOCK` windows; other specs' are
    cut in turn from the first window.
    """
    out: list[_Block] = []
    for spec, starts in parts:
        if spec.kind == "tumbling":
            span = P99_BLOCK * spec.size_ms
            aligned: dict[int, list[int]] = {}
            for start in starts:
                aligned.setdefault(tumbling_start(start, span), []).append(start)
            runs = list(aligned.values())
        else:
            runs = [list(starts[k : k + P99_BLOCK]) for k in range(0, len(starts), P99_BLOCK)]
        last = len(runs) - 1
        for k, members in enumerate(runs):
            out.append(_Block(spec, tuple(members), spec.kind == "tumbling", k in (0, last)))
    return out


def _read_ahead(
    r: redis.Redis,
    keys: Keys,
    blocks: Sequence[_Block],
    cache: ClosedWindows | None,
    watermark: int | None,
) -> Iterator[list[tuple[list[str], Digests]]]:
    """Each block's windows' (services, latency digests), closed ones from `cache` if there.

    Closed windows are memoised unless their block is aligned and not at an edge (its merge
    is memoised instead). The next block is read from Redis (and decoded) by a thread while
    the caller merges this one; the memo is read and written by the caller's thread only.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tg-p99") as pool:

        def submit(block: _Block) -> tuple[dict[int, Any], list[int], Future[Any] | None]:
            known: dict[int, Any] = {}
            for start in block.members:
                got = cache.get("latency", block.spec.key, start) if cache is not None else None
                if got is not None:
                    known[start] = got
            missing = [start for start in block.members if start not in known]
            window_keys = [keys.window_aggs(block.spec.key, start) for start in missing]
            return known, missing, pool.submit(_latencies, r, window_keys) if missing else None

        ahead = submit(blocks[0]) if blocks else None
        for k, block in enumerate(blocks):
            assert ahead is not None
            known, missing, future = ahead
            ahead = submit(blocks[k + 1]) if k + 1 < len(blocks) else None
            keep = cache is not None and (block.edge or not block.aligned)
            for start, value in zip(missing, future.result() if future else [], strict=True):
                if keep and _reusable(block.spec, start, watermark):
                    assert cache is not None
                    cache.put("latency", block.spec.key, start, value)
                known[start] = value
            yield [known[start] for start in block.members]


def _merged(pieces: Sequence[tuple[list[str], Digests]]) -> tuple[list[str], Digests]:
    """Digests of each service's pieces merged: (services sorted, one digest each)."""
    names = sorted({svc for svcs, _ in pieces for svc in svcs})
    if not names:
        return [], Digests.empty(0)
    code = {svc: i for i, svc in enumerate(names)}
    rows = [d for _, d in pieces if len(d)]
    keys_of = [code[svc] for svcs, d in pieces if len(d) for svc in svcs]
    return names, Digests.concat(rows).combine(np.array(keys_of, np.int64), len(names))


def _latencies(r: redis.Redis, window_keys: list[str]) -> list[tuple[list[str], Digests]]:
    """Each window's services and their latency digests (read inside Redis if allowed)."""
    out = []
    try:
        got: Any = r.eval_ro(_READ, len(window_keys), *window_keys, "latency")
    except redis.exceptions.NoPermissionError:
        return [
            (names, Digests.empty(0) if aggs is None else aggs.digests["latency"])
            for names, aggs in _aggs_here(r, window_keys)
        ]
    for flat in got:
        svcs = [_s(x) for x in flat[0::2]]
        blobs = [bytes(x) for x in flat[1::2]]
        out.append((svcs, Digests.decode(blobs) if blobs else Digests.empty(0)))
    return out


def ranked_parts(
    r: redis.Redis, keys: Keys, spec: WindowSpec, since_ms: int, until_ms: int, min_size_ms: int
) -> list[tuple[WindowSpec, list[int]]]:
    """The windows that tile [since, until): (spec, starts) per tier, finest first.

    A tumbling spec's range comes from the retention tiers as a range read takes it (`cover`):
    windows of tiers of at least `min_size_ms` (`rank_size`) where they lie wholly inside the
    range, the ends from finer tiers, down to the raw windows; other specs are their own
    windows. An open end (`query --since` alone) stops at what the tiers hold.
    """
    stored = read_retention(r, keys) if spec.kind == "tumbling" else None
    if stored is None or not stored.layers:
        return [(spec, _starts(r, keys, spec, since_ms, until_ms, with_late=False))]
    pipe = r.pipeline(transaction=False)
    for layer in stored.layers:
        pipe.zrange(keys.window_index(layer.spec.key), 0, 0)
        pipe.zrange(keys.window_index(layer.spec.key), -1, -1)
    got = pipe.execute()
    held = [
        (int(_s(first[0])), layer.spec.end(int(_s(last[0]))))
        for layer, first, last in zip(stored.layers, got[0::2], got[1::2], strict=True)
        if first
    ]
    if not held:
        return []
    since_ms = max(since_ms, min(lo for lo, _ in held))
    until_ms = min(until_ms, max(hi for _, hi in held))
    return cover_by_spec(since_ms, until_ms, stored.layers, min_size_ms)


def rank_size(range_ms: int, min_size_ms: int = 0) -> int:
    """The smallest tier a ranking of a range reads where a larger one holds the part."""
    return max(min_size_ms, RANK_FROM_MS, range_ms // RANK_PIECES)


def rank_services(totals: dict[str, ServiceTotals], by: str, n: int) -> list[str]:
    """The `n` services with the most `by` (ties by name), most first."""
    ranked = sorted(totals.values(), key=lambda t: (-t.value(by), t.service))
    return [t.service for t in ranked[:n]]


def _count(r: redis.Redis, window_keys: list[str]) -> list[dict[str, tuple[int, int]]]:
    """(count, errors) per service of each window, counted by the script if Redis lets us."""
    try:
        got: Any = r.eval_ro(_READ, len(window_keys), *window_keys, "counts")
    except redis.exceptions.NoPermissionError:
        return _count_here(r, window_keys)
    out = []
    for flat in got:
        it = iter(flat)
        out.append({_s(svc): (int(n), int(e)) for svc, n, e in zip(it, it, it, strict=True)})
    return out


def _count_here(r: redis.Redis, window_keys: list[str]) -> list[dict[str, tuple[int, int]]]:
    """`_count` without scripting: every aggregate fetched and decoded here."""
    out = []
    for names, aggs in _aggs_here(r, window_keys):
        counts = aggs.ints["count"].tolist() if aggs is not None else []
        errors = aggs.ints["errors"].tolist() if aggs is not None else []
        out.append(dict(zip(names, zip(counts, errors, strict=True), strict=True)))
    return out


def _aggs_here(r: redis.Redis, window_keys: list[str]) -> list[tuple[list[str], WindowAggs | None]]:
    """Each window's services (without `*`) and their aggregates, fetched and decoded here."""
    pipe = r.pipeline(transaction=False)
    for key in window_keys:
        pipe.hgetall(key)
    out = []
    for fields in pipe.execute():
        named = {_s(k): v for k, v in fields.items() if _s(k) != ALL_SERVICES}
        out.append((list(named), WindowAggs.decode(list(named.values())) if named else None))
    return out
