"""Which records of an offset range a read-committed reader delivers: pure logic on record batches.

A Kafka partition's log is a sequence of record batches. A transactional producer writes its
records in batches flagged *transactional* with its producer id, and later one *control batch*
(a marker: commit or abort) for the same producer id. Kafka's consumers in `read_committed` mode
drop the records of aborted transactions using an abort index the broker sends with each fetch;
not every Kafka-protocol broker sends one (the broker the tests use answers with an empty list).
So the source decides from the markers themselves, which every broker keeps in the log:

* a non-transactional record in [start, end) is delivered at once;
* a transactional record in [start, end) waits for its producer's next marker: delivered on
  commit, dropped (and counted) on abort;
* markers are never delivered; a marker whose producer has nothing waiting (its records were
  before `start`, decided by the previous range) changes nothing.

The reader keeps reading past `end` until every waiting producer's marker has been seen; the
planner never hands out a range that reaches into a transaction still open (it stops at the
last stable offset), so those markers exist. A producer has at most one transaction open at a
time, so "its next marker" is the marker of that transaction. The outcome of a transaction never
changes once written, so a range read twice gives the same records: replays stay exact.

    offsets   10  11  12  13  14  15  16        range [10, 15)
    batch     a   a   T1  T1  b   C1  c         T1 = producer 1, transactional; C1 = its commit
    delivered 10, 11, 14 at once; 12, 13 when C1 (past the end) is read; 16 is outside
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["CommittedRange", "LogBatch", "LogRecord", "Records", "control_type"]

Marker = Literal["commit", "abort"]


class LogRecord(NamedTuple):
    """One data record: offset, CreateTime in epoch ms (None if the broker has none).

    A named tuple, not a dataclass: one is made per record read (~1 µs cheaper each).
    """

    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None


class Records(Sequence[LogRecord]):
    """Records in offset order, kept as one column per field: what the read path moves around.

    A reader hands tens of thousands of records a second from the fetch to an Arrow batch; kept
    as columns (offsets and timestamps in numpy, a negative timestamp meaning none; keys and
    values as Arrow binary arrays, cut straight out of the fetched bytes by
    `jobs/source/record_decode.py`) they are sliced, joined and handed to Arrow without one Python
    object per record (BENCHMARKS.md, "The read task"). Indexing gives a `LogRecord`.
    """

    __slots__ = ("keys", "offsets", "timestamps_ms", "values")

    def __init__(
        self,
        offsets: npt.NDArray[np.int64],
        timestamps_ms: npt.NDArray[np.int64],
        keys: pa.Array,
        values: pa.Array,
    ) -> None:
        self.offsets = offsets
        self.timestamps_ms = timestamps_ms
        self.keys = keys
        self.values = values

    @classmethod
    def of(cls, records: Sequence[LogRecord]) -> Records:
        """`records` as columns (itself if it already is)."""
        if isinstance(records, Records):
            return records
        return cls(
            np.array([r.offset for r in records], dtype=np.int64),
            np.array(
                [-1 if r.timestamp_ms is None else r.timestamp_ms for r in records],
                dtype=np.int64,
            ),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
        )

    @classmethod
    def empty(cls) -> Records:
        """No records (built without `pa.array`, which imports pandas: this runs at import)."""
        none = np.empty(0, dtype=np.int64)
        return cls(none, none, pa.nulls(0, pa.binary()), pa.nulls(0, pa.binary()))

    @classmethod
    def joined(cls, parts: Sequence[Records]) -> Records:
        """The records of `parts`, one after another."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty()
        return cls(
            np.concatenate([p.offsets for p in parts]),
            np.concatenate([p.timestamps_ms for p in parts]),
            pa.concat_arrays([p.keys for p in parts]),
            pa.concat_arrays([p.values for p in parts]),
        )

    def between(self, start: int, end: int) -> Records:
        """The records with offsets in [start, end)."""
        lo, hi = np.searchsorted(self.offsets, [start, end]).tolist()
        return self if (lo, hi) == (0, len(self.offsets)) else self[lo:hi]

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, i: int) -> LogRecord: ...

    @overload
    def __getitem__(self, i: slice) -> Records: ...

    def __getitem__(self, i: int | slice) -> LogRecord | Records:
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step != 1:
                idx = np.arange(lo, hi, step)
                return Records(
                    self.offsets[idx],
                    self.timestamps_ms[idx],
                    self.keys.take(idx),
                    self.values.take(idx),
                )
            n = max(hi - lo, 0)
            return Records(
                self.offsets[lo:hi],
                self.timestamps_ms[lo:hi],
                self.keys.slice(lo, n),
                self.values.slice(lo, n),
            )
        ts = int(self.timestamps_ms[i])
        return LogRecord(
            int(self.offsets[i]),
            None if ts < 0 else ts,
            self.keys[i].as_py(),
            self.values[i].as_py(),
        )

    def __iter__(self) -> Iterator[LogRecord]:
        return map(
            LogRecord,
            self.offsets.tolist(),
            [None if t < 0 else t for t in self.timestamps_ms.tolist()],
            self.keys.to_pylist(),
            self.values.to_pylist(),
        )

    def __repr__(self) -> str:
        return f"Records({list(self)!r})"


_NONE = Records.empty()


@dataclass(frozen=True)
class LogBatch:
    """What the reader needs of one record batch.

    `next_offset` is one past the batch's last offset (compaction may have removed records, the
    offsets they took stay taken). `marker` is set on control batches only; they carry no
    records for the reader. `codec` is the compression the batch arrived in (diagnostics).
    """

    base_offset: int
    next_offset: int
    producer_id: int = -1
    transactional: bool = False
    marker: Marker | None = None
    records: Sequence[LogRecord] = ()
    codec: str = "none"


def control_type(key: bytes | None) -> Marker | None:
    """The marker a control record's key encodes (int16 version, int16 type: 0 abort, 1 commit).

    None for a control record of another type (Kafka reserves more), which the reader skips.
    """
    if key is None or len(key) < 4:
        return None
    _version, kind = struct.unpack(">hh", key[:4])
    if kind == 0:
        return "abort"
    return "commit" if kind == 1 else None


@dataclass
class CommittedRange:
    """Feed the batches of a partition from `start` on; collect what [start, end) delivers.

    `feed` returns the records it can decide now; `complete(position)` says whether reading may
    stop once the log has been read up to `position`. `aborted` counts the in-range records of
    aborted transactions.
    """

    start: int
    end: int
    aborted: int = 0
    _waiting: dict[int, list[Records]] = field(default_factory=dict)

    def feed(self, batch: LogBatch) -> Records:
        """The records of `batch` (or of earlier batches) now known to be delivered."""
        if batch.marker is not None:
            waiting = Records.joined(self._waiting.pop(batch.producer_id, [_NONE]))
            if batch.marker == "commit":
                return waiting
            self.aborted += len(waiting)
            return _NONE
        if batch.next_offset <= self.start or batch.base_offset >= self.end:
            return _NONE
        in_range = Records.of(batch.records).between(self.start, self.end)
        if batch.transactional and in_range:
            self._waiting.setdefault(batch.producer_id, []).append(in_range)
            return _NONE
        return in_range

    @property
    def waiting(self) -> dict[int, int]:
        """Records waiting for a marker, by producer id."""
        return {pid: sum(map(len, rs)) for pid, rs in self._waiting.items()}

    def complete(self, position: int) -> bool:
        """True once the log is read to `end` and no record waits for its transaction's end."""
        return position >= self.end and not self._waiting
