"""Corrections: what batches add to a window besides its aggregate, read once per version.

Late rows, stragglers and duplicates live in one hash per window and kind, a "service|batch"
field per service a batch touched: thousands of fields in a window of many services. The
window rows and the lateness figures of one refresh both need them, so each hash is read and
parsed once per version (`_stamped`: a batch adds fields, a replayed one rewrites its own) and
the parse is shared through the closed-window memo.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np
import redis

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.late_agg import LateAgg, merge_late
from tidegauge.core.store.index import _stamped
from tidegauge.core.store.keys import (
    ALL_SERVICES,
    Keys,
    T,
    per_service,
    split_batch_field,
    stragglers_of,
)
from tidegauge.core.windows import WindowSpec

#: (stragglers, revisions) per service and `*` of one window's straggler hash.
Stragglers = tuple[dict[str, int], dict[str, int]]


def read_corrections(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    starts: Sequence[int],
    cache: ClosedWindows | None,
) -> tuple[list[Stragglers], list[dict[str, int]]]:
    """Each window's stragglers (counts, revisions) and duplicates, per service and `*`."""
    strags = _parsed(r, cache, "stragglers", keys.window_stragglers, spec, starts, stragglers_of)
    dups = _parsed(
        r, cache, "duplicates", keys.window_duplicates, spec, starts, lambda f: per_service(f, int)
    )
    return strags, dups


def _parsed(
    r: redis.Redis,
    cache: ClosedWindows | None,
    kind: str,
    key_of: Callable[[str, int], str],
    spec: WindowSpec,
    starts: Sequence[int],
    parse: Callable[[dict[Any, Any]], T],
) -> list[T]:
    """`parse` of each window's hash of `kind`, once per version (`_stamped`)."""
    return _stamped(
        r, cache, kind, spec.key, starts, partial(key_of, spec.key), lambda _, f: parse(f)
    )


@dataclass(frozen=True)
class LateFields:
    """One window's late hash, parsed: late rows per service and `*`, and `*`'s late rows."""

    counts: dict[str, int]
    #: The fields whose merge is `*`'s late aggregate (`late_fields`).
    every: list[bytes]

    @cached_property
    def every_merged(self) -> bytes | None:
        """`*`'s late aggregate of the window (None: no late row), merged once."""
        return merged_late(self.every)


def read_late(
    r: redis.Redis,
    keys: Keys,
    spec: WindowSpec,
    starts: Sequence[int],
    cache: ClosedWindows | None,
) -> list[LateFields]:
    """Each window's late hash parsed (`late_fields`); of a dimension's store, no `*` count."""
    owned = keys.owner is not None  # a dimension's store: its `*` values are members of it
    return _parsed(
        r, cache, "late", keys.window_late, spec, starts, lambda f: late_fields(f, owned)
    )


def late_fields(fields: Mapping[Any, bytes], owned: bool = False) -> LateFields:
    """One late hash parsed in one pass: `per_service`'s counts and `*`'s late fields.

    The fields whose merge is `*`'s late aggregate, in a fixed order: a batch writes its late
    rows' merge as "*|batch" beside the services' own, so `*` is one field per batch, not one
    per (service, batch); a batch that wrote none (stores written before, a roll-up of them)
    counts by its services'.

    `owned`: a dimension's store, whose `*` values are members of it (no `*` count summed,
    no `*` late rows).
    """
    counts: dict[str, int] = {}
    totals: dict[int, bytes] = {}
    parts: dict[int, list[tuple[str, bytes]]] = {}
    for k, v in fields.items():
        svc, batch = split_batch_field(k)
        if svc == ALL_SERVICES:
            totals[batch] = v
            continue
        counts[svc] = counts.get(svc, 0) + LateAgg.count_of(v)
        parts.setdefault(batch, []).append((svc, v))
    if counts and not owned:
        counts[ALL_SERVICES] = sum(counts.values())
    every: list[bytes] = []
    for batch in [] if owned else sorted(totals.keys() | parts.keys()):
        total = totals.get(batch)
        every += [total] if total is not None else [v for _, v in sorted(parts[batch])]
    return LateFields(counts, every)


def late_of(fields: Mapping[Any, bytes], service: str) -> bytes | None:
    """A late hash's "service|batch" fields of `service` (`*`: `late_fields`) merged."""
    if service == ALL_SERVICES:
        return late_fields(fields).every_merged
    return merged_late([v for k, v in sorted(fields.items()) if split_batch_field(k)[0] == service])


def merged_late(blobs: Sequence[bytes]) -> bytes | None:
    """`LateAgg` blobs merged as columns (None for none)."""
    if not blobs:
        return None
    return merge_late(blobs, np.zeros(len(blobs), np.int64), 1)[0]
