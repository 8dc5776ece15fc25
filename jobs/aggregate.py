"""Per-service event-time windows in Spark state; Spark's watermark rule applied to raw rows.

Why `applyInPandasWithState` and not `groupBy(window(...)).count()`: the built-in aggregation drops
late rows before any code of ours sees them, and one streaming query can only have one sink.
Here the stateful function sees every raw row of its group, so it can (a) apply exactly Spark's
rule for windowed aggregation (a row is late when its window end <= the watermark in force) while
counting the late rows instead of hiding them, and (b) pass dead letters through to the same
sink. The watermark itself is still Spark's (`withWatermark` upstream, read here through
`GroupState.getCurrentWatermarkMs`), checkpointed with the state. See docs/architecture.md.

Runs on executors. Groups are (kind, service): one group per service for events, one for dead
letters, one for heartbeats (which only exist to move the watermark and produce no output).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from jobs.parse import KIND_DEAD, KIND_EVENT
from jobs.windows import tumbling_starts

__all__ = [
    "OUTPUT_SCHEMA",
    "STATE_SCHEMA",
    "DeadCounts",
    "WindowCounts",
    "make_state_fn",
]

STATE_SCHEMA = "blob binary"

#: One schema for every output kind (columns that do not apply are null):
#: window     service, window_start, count  (absolute count of accepted rows so far)
#: late       service, window_start, count  (late rows of this batch for that window)
#: dead       partition, offset, kafka_ms, reason, detail, raw, raw_size
#: dead_count reason, count                  (absolute count so far)
OUTPUT_SCHEMA = (
    "kind string, service string, window_start long, count long, partition int, offset long, "
    "kafka_ms long, reason string, detail string, raw binary, raw_size int"
)
_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]

_STATE_VERSION = 1


@dataclass
class WindowCounts:
    """Open tumbling windows of one service: window start (ms) -> accepted events."""

    size_ms: int
    panes: dict[int, int] = field(default_factory=dict)

    def add(self, event_ms: np.ndarray, watermark_ms: int) -> tuple[dict[int, int], dict[int, int]]:
        """Count a batch of event times; return (updated windows' new counts, late counts).

        A row is late when its window end <= `watermark_ms` (the watermark in force for this
        batch); late rows are counted, never added to a window.
        """
        starts = tumbling_starts(event_ms, self.size_ms)
        late_mask = starts + self.size_ms <= watermark_ms
        late_starts, late_n = np.unique(starts[late_mask], return_counts=True)
        ok_starts, ok_n = np.unique(starts[~late_mask], return_counts=True)
        updated: dict[int, int] = {}
        for s, n in zip(ok_starts.tolist(), ok_n.tolist(), strict=True):
            self.panes[s] = self.panes.get(s, 0) + n
            updated[s] = self.panes[s]
        return updated, dict(zip(late_starts.tolist(), late_n.tolist(), strict=True))

    def evict(self, watermark_ms: int) -> list[int]:
        """Forget windows that can no longer change (end <= watermark); return their starts."""
        gone = [s for s in self.panes if s + self.size_ms <= watermark_ms]
        for s in gone:
            del self.panes[s]
        return gone

    def to_bytes(self) -> bytes:
        """Versioned state blob."""
        return json.dumps({"v": _STATE_VERSION, "size": self.size_ms, "panes": self.panes}).encode()

    @classmethod
    def from_bytes(cls, blob: bytes, size_ms: int) -> WindowCounts:
        """Inverse of `to_bytes`; refuses state written for another window size."""
        d = json.loads(blob)
        if d.get("v") != _STATE_VERSION:
            raise ValueError(f"window state version {d.get('v')} is not {_STATE_VERSION}")
        if d["size"] != size_ms:
            raise ValueError(
                f"checkpoint holds {d['size']} ms windows but --window is {size_ms} ms: "
                "use a new --checkpoint directory to change the window"
            )
        return cls(size_ms, {int(k): int(v) for k, v in d["panes"].items()})


@dataclass
class DeadCounts:
    """Dead letters seen so far, by reason (absolute, so the sink can overwrite)."""

    by_reason: dict[str, int] = field(default_factory=dict)

    def add(self, reasons: Iterable[str]) -> None:
        """Count a batch of reasons."""
        for r in reasons:
            self.by_reason[r] = self.by_reason.get(r, 0) + 1

    def to_bytes(self) -> bytes:
        """Versioned state blob."""
        return json.dumps({"v": _STATE_VERSION, "by_reason": self.by_reason}).encode()

    @classmethod
    def from_bytes(cls, blob: bytes) -> DeadCounts:
        """Inverse of `to_bytes`."""
        return cls(dict(json.loads(blob)["by_reason"]))


def _frame(rows: dict[str, list[Any]]) -> pd.DataFrame:
    n = max((len(v) for v in rows.values()), default=0)
    return pd.DataFrame({c: rows.get(c, [None] * n) for c in _COLUMNS})


def _events(
    service: str, pdfs: Iterator[pd.DataFrame], state: Any, size_ms: int
) -> Iterator[pd.DataFrame]:
    watermark = int(state.getCurrentWatermarkMs())
    counts = (
        WindowCounts.from_bytes(state.get[0], size_ms) if state.exists else WindowCounts(size_ms)
    )
    updated: dict[int, int] = {}
    late: dict[int, int] = {}
    for pdf in pdfs:
        u, lt = counts.add(pdf["event_ms"].to_numpy(dtype=np.int64), watermark)
        updated.update(u)
        for s, n in lt.items():
            late[s] = late.get(s, 0) + n
    counts.evict(watermark)
    state.update((counts.to_bytes(),))
    kinds = ["window"] * len(updated) + ["late"] * len(late)
    yield _frame(
        {
            "kind": kinds,
            "service": [service] * len(kinds),
            "window_start": list(updated) + list(late),
            "count": list(updated.values()) + list(late.values()),
        }
    )


def _dead(pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    counts = DeadCounts.from_bytes(state.get[0]) if state.exists else DeadCounts()
    for pdf in pdfs:
        counts.add(pdf["reason"].tolist())
        out = pdf[["partition", "offset", "kafka_ms", "reason", "detail", "raw", "raw_size"]].copy()
        out.insert(0, "kind", "dead")
        yield _frame({c: out[c].tolist() for c in out.columns})
    state.update((counts.to_bytes(),))
    yield _frame(
        {
            "kind": ["dead_count"] * len(counts.by_reason),
            "reason": list(counts.by_reason),
            "count": list(counts.by_reason.values()),
        }
    )


def make_state_fn(
    size_ms: int,
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The `applyInPandasWithState` function for `size_ms` tumbling windows, by (kind, service)."""

    def fn(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        kind, service = key
        if kind == KIND_EVENT:
            yield from _events(service, pdfs, state, size_ms)
        elif kind == KIND_DEAD:
            yield from _dead(pdfs, state)
        else:  # heartbeats: they moved the watermark upstream; nothing to count
            for _ in pdfs:
                pass

    return fn
