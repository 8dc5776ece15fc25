"""Reading the window indexes and the closed-window memo, shared by every reader."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.store.keys import Keys, T, _s
from tidegauge.core.windows import WindowSpec


def _starts(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    since_ms: int | None,
    until_ms: int | None,
    with_late: bool = True,
) -> list[int]:
    lo = "-inf" if since_ms is None else spec.first_start_overlapping(since_ms)
    hi = "+inf" if until_ms is None else until_ms - 1
    found: set[int] = set()
    indexes = [keys.window_index(spec.key)] + ([keys.late_index(spec.key)] if with_late else [])
    for idx in indexes:
        members: Any = r.zrangebyscore(idx, lo, hi)
        found.update(int(_s(v)) for v in members)
    return sorted(found)


def _sync(r: redis.Redis, keys: Keys, cache: ClosedWindows | None) -> int | None:
    """Read the store's identity and watermark (before the data), check `cache` against them.

    Returns the watermark closed windows are judged by, or None when nothing may be reused.
    """
    pipe = r.pipeline(transaction=False)
    pipe.get(keys.epoch)
    pipe.hmget(keys.job_status, ["query_id", "watermark"])
    epoch, (query_id, watermark) = pipe.execute()
    if cache is None:
        return int(watermark) if watermark is not None else None
    identity = None if epoch is None else (_s(epoch), _s(query_id or b""))
    return cache.sync(identity, None if watermark is None else int(watermark))


def _reusable(spec: WindowSpec, start: int, watermark: int | None) -> bool:
    """A window no event can change any more (sessions grow their end: never reused)."""
    return spec.is_closed(start, watermark)


def _stamped(
    r: redis.Redis,
    cache: ClosedWindows | None,
    kind: str,
    tag: str,
    starts: Sequence[int],
    key_of: Callable[[int], str],
    parse: Callable[[int, dict[Any, Any]], T],
) -> list[T]:
    """`parse(start, fields)` of one "service|batch" hash per window start, memoised by HLEN.

    Each batch adds its own field and a replayed batch rewrites its field unchanged, so within
    one store epoch the number of fields is a version stamp: with `cache` (synced by the
    caller's first read), a hash is fetched again only when its HLEN changed.
    """
    known: dict[int, tuple[int, T]] = {}
    if cache is not None and cache.synced and starts:
        pipe = r.pipeline(transaction=False)
        for start in starts:
            pipe.hlen(key_of(start))
        for start, n in zip(starts, pipe.execute(), strict=True):
            memo = cache.get(kind, tag, start)
            if memo is not None and memo[0] == n:
                known[start] = memo
    misses = [s for s in starts if s not in known]
    pipe = r.pipeline(transaction=False)
    for start in misses:
        pipe.hgetall(key_of(start))
    for start, fields in zip(misses, pipe.execute() if misses else [], strict=True):
        known[start] = (len(fields), parse(start, fields))
        if cache is not None and cache.synced:
            cache.put(kind, tag, start, known[start])
    return [known[s][1] for s in starts]
