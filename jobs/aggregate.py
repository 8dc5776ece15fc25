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
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from jobs.metrics import WindowAgg
from jobs.parse import KIND_DEAD, KIND_EVENT
from jobs.sessions import Sessions
from jobs.windows import WindowSpec, is_late, pane_size, tumbling_starts
from sketches.hll import hash32

__all__ = [
    "OUTPUT_SCHEMA",
    "STATE_SCHEMA",
    "DeadCounts",
    "ServiceWindows",
    "make_state_fn",
]

STATE_SCHEMA = "blob binary"

#: One schema for every output kind (columns that do not apply are null):
#: window     spec, service, window_start, count, metrics (JSON), agg (WindowAgg bytes): absolute
#: late       spec, service, window_start, count   (late rows of this batch for that window)
#: dead       partition, offset, kafka_ms, reason, detail, raw, raw_size
#: dead_count reason, count                  (absolute count so far)
OUTPUT_SCHEMA = (
    "kind string, spec string, service string, window_start long, count long, metrics string, "
    "agg binary, partition int, offset long, kafka_ms long, reason string, detail string, "
    "raw binary, raw_size int"
)
_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]

_STATE_MAGIC = b"TGSW"
_STATE_VERSION = 2
_PANE = struct.Struct("<qI")  # pane start (ms), length of its WindowAgg bytes


@dataclass
class ServiceWindows:
    """One service's open panes (tumbling windows of `pane_ms`) and the window specs built on them.

    A row is added to its pane unless every window containing that pane (in every spec) has
    already ended at or before the watermark; a window whose end <= watermark counts the row as
    late instead. Windows with end > watermark that contain an updated pane are re-emitted.
    """

    specs: tuple[WindowSpec, ...]
    panes: dict[int, WindowAgg] = field(default_factory=dict)
    sessions: Sessions | None = None

    def __post_init__(self) -> None:
        self.window_specs = tuple(s for s in self.specs if s.kind != "session")
        session_specs = [s for s in self.specs if s.kind == "session"]
        if len(session_specs) > 1:
            raise ValueError("at most one --session-gap")
        if session_specs and self.sessions is None:
            self.sessions = Sessions(session_specs[0])
        self.pane_ms = pane_size(self.window_specs)
        self._sessions_touched: set[int] = set()

    def _last_end(self, pane_start: int) -> int:
        """End of the last window (any spec) that contains the pane."""
        return max((pane_start // s.slide_ms) * s.slide_ms + s.size_ms for s in self.window_specs)

    def add(
        self,
        event_ms: npt.NDArray[np.int64],
        latency_ms: npt.NDArray[np.float64],
        status: npt.NDArray[np.int64],
        users: npt.NDArray[Any],
        watermark_ms: int,
    ) -> tuple[set[int], Counter[tuple[str, int]]]:
        """Add a batch; return (updated pane starts, late rows per (spec key, window start))."""
        late: Counter[tuple[str, int]] = Counter()
        touched: set[int] = set()
        if self.sessions is not None:
            self._sessions_touched |= self.sessions.add(users, event_ms, watermark_ms)
        valid = pd.notna(users)
        hashes = hash32(users[valid])  # once per batch; each pane takes its share
        starts = tumbling_starts(event_ms, self.pane_ms)
        uniq, inverse = np.unique(starts, return_inverse=True)
        for i, pane in enumerate(uniq.tolist()):
            mask = inverse == i
            n = int(np.count_nonzero(mask))
            for spec in self.window_specs:
                for w in spec.windows_containing(pane, self.pane_ms):
                    if is_late(w + spec.size_ms, watermark_ms):
                        late[(spec.key, w)] += n
            if is_late(self._last_end(pane), watermark_ms):
                continue
            agg = self.panes.get(pane)
            if agg is None:
                agg = self.panes[pane] = WindowAgg()
            agg.add_hashed(latency_ms[mask], status[mask], hashes[mask[valid]])
            touched.add(pane)
        return touched, late

    def windows(
        self, panes: set[int], watermark_ms: int
    ) -> dict[tuple[WindowSpec, int], WindowAgg]:
        """The still-open windows (end > watermark) containing any of `panes`, merged from panes."""
        wanted = {
            (spec, w)
            for pane in panes
            for spec in self.window_specs
            for w in spec.windows_containing(pane, self.pane_ms)
            if not is_late(w + spec.size_ms, watermark_ms)
        }
        out = {}
        for spec, w in wanted:
            parts = [self.panes[p] for p in spec.panes_of(w, self.pane_ms) if p in self.panes]
            out[(spec, w)] = parts[0] if len(parts) == 1 else WindowAgg.merged(parts)
        if self.sessions is not None:
            for b in self._sessions_touched:
                out[(self.sessions.spec, b)] = self.sessions.buckets[b]
            self._sessions_touched = set()
        return out

    def evict(self, watermark_ms: int) -> list[int]:
        """Forget panes no open window needs any more; return their starts."""
        gone = [p for p in self.panes if is_late(self._last_end(p), watermark_ms)]
        for p in gone:
            del self.panes[p]
        if self.sessions is not None:
            self.sessions.evict(watermark_ms)
        return gone

    def to_bytes(self) -> bytes:
        """Versioned state blob: header (specs), then each pane's WindowAgg bytes."""
        sessions = self.sessions.to_bytes() if self.sessions is not None else b""
        head = json.dumps(
            {
                "specs": [s.key for s in self.specs],
                "sessions": len(sessions),
                "panes": len(self.panes),
            }
        )
        parts = [
            _STATE_MAGIC,
            struct.pack("<BI", _STATE_VERSION, len(head)),
            head.encode(),
            sessions,
        ]
        for start, agg in sorted(self.panes.items()):
            blob = agg.to_bytes()
            parts += [_PANE.pack(start, len(blob)), blob]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes, specs: tuple[WindowSpec, ...]) -> ServiceWindows:
        """Inverse of `to_bytes`; refuses state written for other window specs."""
        if blob[:4] != _STATE_MAGIC:
            raise ValueError(
                "the checkpoint holds window state from an older Tidegauge version: "
                "use a new --checkpoint directory"
            )
        if len(blob) < 9:
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        version, n_head = struct.unpack_from("<BI", blob, 4)
        if version != _STATE_VERSION:
            raise ValueError(f"window state version {version} is not {_STATE_VERSION}")
        pos = 9 + n_head
        head = json.loads(blob[9:pos])
        stored = tuple(head["specs"])
        if sorted(stored) != sorted(s.key for s in specs):
            raise ValueError(
                f"checkpoint holds windows {list(stored)} but the job asks for "
                f"{[s.key for s in specs]}: use a new --checkpoint directory to change --window"
            )
        n_sessions = head.get("sessions", 0)
        session_spec = next((s for s in specs if s.kind == "session"), None)
        sessions = None
        if n_sessions and session_spec is not None:
            sessions = Sessions.from_bytes(blob[pos : pos + n_sessions], session_spec)
        pos += n_sessions
        panes = {}
        while pos < len(blob):
            if pos + _PANE.size > len(blob):
                raise ValueError("window state is truncated: use a new --checkpoint directory")
            start, n = _PANE.unpack_from(blob, pos)
            pos += _PANE.size
            panes[start] = WindowAgg.from_bytes(blob[pos : pos + n])
            pos += n
        if len(panes) != head.get("panes", len(panes)):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        return cls(specs, panes, sessions)


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
        return json.dumps({"v": 1, "by_reason": self.by_reason}).encode()

    @classmethod
    def from_bytes(cls, blob: bytes) -> DeadCounts:
        """Inverse of `to_bytes`."""
        return cls(dict(json.loads(blob)["by_reason"]))


def _frame(rows: dict[str, list[Any]]) -> pd.DataFrame:
    n = max((len(v) for v in rows.values()), default=0)
    return pd.DataFrame({c: rows.get(c, [None] * n) for c in _COLUMNS})


def _events(
    service: str, pdfs: Iterator[pd.DataFrame], state: Any, specs: tuple[WindowSpec, ...]
) -> Iterator[pd.DataFrame]:
    watermark = int(state.getCurrentWatermarkMs())
    windows = (
        ServiceWindows.from_bytes(state.get[0], specs) if state.exists else ServiceWindows(specs)
    )
    # One add per batch, not per Arrow chunk: how Spark chunks a group depends on shuffle fetch
    # order, and the sketches must depend only on the batch's rows so a replay is byte-identical.
    frames = list(pdfs)
    if not frames:
        return
    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    touched, late = windows.add(
        pdf["event_ms"].to_numpy(dtype=np.int64),
        pdf["latency_ms"].to_numpy(dtype=np.float64, na_value=np.nan),
        pdf["status"].to_numpy(dtype=np.int64, na_value=-1),
        pdf["user_id"].to_numpy(dtype=object),
        watermark,
    )
    results = windows.windows(touched, watermark)
    windows.evict(watermark)
    state.update((windows.to_bytes(),))
    rows: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    for (spec, start), agg in sorted(results.items(), key=lambda kv: (kv[0][0].key, kv[0][1])):
        _append(
            rows,
            kind="window",
            spec=spec.key,
            service=service,
            window_start=start,
            count=agg.count,
            metrics=json.dumps(agg.metrics(spec.size_ms)),
            agg=agg.to_bytes(),
        )
    for (key, start), n in sorted(late.items()):
        _append(rows, kind="late", spec=key, service=service, window_start=start, count=n)
    yield _frame(rows)


def _append(rows: dict[str, list[Any]], **values: Any) -> None:
    for c in _COLUMNS:
        rows[c].append(values.get(c))


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
    specs: tuple[WindowSpec, ...],
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The `applyInPandasWithState` function for these window specs, grouped by (kind, service)."""

    def fn(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        kind, service = key
        if kind == KIND_EVENT:
            yield from _events(service, pdfs, state, specs)
        elif kind == KIND_DEAD:
            yield from _dead(pdfs, state)
        else:  # heartbeats: they moved the watermark upstream; nothing to count
            for _ in pdfs:
                pass

    return fn
