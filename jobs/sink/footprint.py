"""What the store's windows cost, measured in Redis: the sizes `--retention-size` fits to.

Once a minute of processing time the sink asks Redis (`MEMORY USAGE`) what a closed window of
each spec and each roll-up tier takes, with every key that goes with it (the mean of the oldest,
the middle and the newest one), and what an arrival window of each time domain takes. The sizes
are kept in `tg:retention:sizes` (`bytes:{spec key}`, `bytes:arr:{domain}:{size}`, `sized_at`), and
every batch's retention is the configured one fitted to the budget with them
(tidegauge/core/retention.py `fit`): the store's footprint once every tier is full, not what it
holds today, so a young store already ages at the pace it will keep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import redis

from tidegauge.core.retention import Footprint, Retention, fit, projected_bytes
from tidegauge.core.store import Keys
from tidegauge.core.store.keys import _s
from tidegauge.core.windows import ARRIVAL_DOMAINS, WindowSpec

__all__ = ["SIZED_EVERY_MS", "Fitted", "fit_stores", "footprints", "measure", "window_keys"]

#: How often (processing time) the sink measures the windows' sizes again.
SIZED_EVERY_MS = 60_000


def window_keys(keys: Keys, spec_key: str, start: int) -> list[str]:
    """Every key of one window: what expiry deletes and what its size counts."""
    return [
        keys.window(spec_key, start),
        keys.window_aggs(spec_key, start),
        keys.window_late(spec_key, start),
        keys.window_stragglers(spec_key, start),
        keys.window_duplicates(spec_key, start),
        keys.window_parts(spec_key, start),
        keys.window_events(spec_key, start),
        keys.window_errors(spec_key, start),
    ]


def measure(
    r: redis.Redis,
    keys: Keys,
    specs: Sequence[WindowSpec],
    arrival_sizes: Sequence[int],
    watermark_ms: int,
) -> dict[str, float]:
    """Mean bytes of a window of each spec, and of an arrival window of each series.

    As `Keys.retention_sizes` fields. Each is the mean of the oldest, the middle and the
    newest closed window held: an old window has had its late rows added, a new one has not.
    A spec without a closed window is left out.
    """
    arrivals = [(domain, size) for size in arrival_sizes for domain in ARRIVAL_DOMAINS]
    indexes: list[tuple[str, str, int | None, str | tuple[str, int]]] = [
        (f"bytes:{s.key}", keys.window_index(s.key), s.end(0), s.key) for s in specs
    ]
    indexes += [
        (f"bytes:arr:{d}:{size}", keys.arrivals_index(d, size), None, (d, size))
        for d, size in arrivals
    ]
    pipe = r.pipeline(transaction=False)
    for _, index, size, _ in indexes:
        closed = "+inf" if size is None else watermark_ms - size  # start <= it: closed
        pipe.zcount(index, "-inf", closed)
    counts = pipe.execute() if indexes else []
    pipe = r.pipeline(transaction=False)
    for (_, index, _, _), n in zip(indexes, counts, strict=True):
        for rank in sorted({0, (n - 1) // 2, n - 1}) if n else ():
            pipe.zrange(index, rank, rank)
    picked = iter(pipe.execute() if any(counts) else [])
    asked: list[tuple[str, list[list[str]]]] = []
    for (name, _, _, what), n in zip(indexes, counts, strict=True):
        if not n:
            continue
        starts = [int(_s(next(picked)[0])) for _ in sorted({0, (n - 1) // 2, n - 1})]
        if isinstance(what, str):
            asked.append((name, [window_keys(keys, what, start) for start in starts]))
        else:
            asked.append((name, [[keys.arrivals(what[0], what[1], start)] for start in starts]))
    pipe = r.pipeline(transaction=False)
    for _, windows in asked:
        for names in windows:
            for key in names:
                pipe.memory_usage(key, samples=0)
    sizes = iter(pipe.execute() if asked else [])
    out = {}
    for name, windows in asked:
        total = sum(next(sizes) or 0 for names in windows for _ in names)
        out[name] = total / len(windows)
    return out


def footprints(
    sized: Mapping[str, str],
    retention: Retention,
    source: WindowSpec | None,
    specs: Sequence[WindowSpec],
    arrival_sizes: Sequence[int],
) -> list[Footprint]:
    """The measured sizes (`Keys.retention_sizes`' fields) as `Footprint`s of the retention's TTLs.

    A roll-up tier not built yet counts as its source's windows (too little: the next
    measurement after its first window corrects it).
    """
    out = []
    for spec in specs:
        if f"bytes:{spec.key}" in sized:
            out.append(Footprint(spec.slide_ms, float(sized[f"bytes:{spec.key}"])))
    if source is not None:
        for i, tier in enumerate(retention.tiers):
            got = sized.get(f"bytes:{tier.spec.key}") or sized.get(f"bytes:{source.key}")
            if got is not None:
                out.append(Footprint(tier.size_ms, float(got), i))
    for size in arrival_sizes:
        for domain in ARRIVAL_DOMAINS:
            if f"bytes:arr:{domain}:{size}" in sized:
                out.append(Footprint(size, float(sized[f"bytes:arr:{domain}:{size}"])))
    return out


@dataclass(frozen=True)
class Fitted:
    """The retention in force for a job's stores, and what they hold once full under it."""

    retention: Retention
    #: Bytes of every store's windows once full (`projected_bytes`; 0: nothing measured yet).
    projected_bytes: float
    budget: int
    #: The services' store's retention in force before this batch (None: none recorded).
    before: str | None


def fit_stores(
    r: redis.Redis,
    stores: Sequence[Keys],
    retention: Retention,
    source: WindowSpec | None,
    budget: int,
) -> Fitted:
    """The retention in force for every store a job writes, fitted to one budget together.

    The services' store and each dimension's (`Keys.by`) share `--retention-size`: their
    windows' measured sizes add up, and one retention (the same tiers everywhere) fits them.
    """
    pipe = r.pipeline(transaction=False)
    for keys in stores:
        pipe.hget(keys.retention, "retention")
        pipe.smembers(keys.window_specs)
        pipe.smembers(keys.arrival_sizes)
        pipe.hgetall(keys.retention_sizes)
    got = pipe.execute()
    every: list[Footprint] = []
    before = None
    for i in range(len(stores)):
        kept, specs_raw, sizes_raw, measured = got[4 * i : 4 * i + 4]
        specs = sorted((WindowSpec.from_key(_s(k)) for k in specs_raw), key=lambda x: x.key)
        sizes = sorted(int(_s(v)) for v in sizes_raw)
        sized = {_s(k): _s(v) for k, v in measured.items()}
        every += footprints(sized, retention, source, specs, sizes)
        if i == 0 and kept is not None:
            before = _s(kept)
    in_force = fit(retention, every, budget)
    return Fitted(in_force, projected_bytes(in_force, every), budget, before)
