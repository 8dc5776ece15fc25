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
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal, NamedTuple, overload

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
    """Records in offset order, kept as one list per field: what the read path moves around.

    A reader hands tens of thousands of records a second from the fetch to an Arrow batch; kept
    as columns they are sliced, joined and turned into Arrow arrays with list operations, never
    one Python object per record (BENCHMARKS.md, issue 12). Indexing gives a `LogRecord`.
    """

    __slots__ = ("keys", "offsets", "timestamps_ms", "values")

    def __init__(
        self,
        offsets: list[int],
        timestamps_ms: list[int | None],
        keys: list[bytes | None],
        values: list[bytes | None],
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
            [r.offset for r in records],
            [r.timestamp_ms for r in records],
            [r.key for r in records],
            [r.value for r in records],
        )

    @classmethod
    def joined(cls, parts: Sequence[Records]) -> Records:
        """The records of `parts`, one after another."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            list(chain.from_iterable(p.offsets for p in parts)),
            list(chain.from_iterable(p.timestamps_ms for p in parts)),
            list(chain.from_iterable(p.keys for p in parts)),
            list(chain.from_iterable(p.values for p in parts)),
        )

    def between(self, start: int, end: int) -> Records:
        """The records with offsets in [start, end)."""
        lo, hi = bisect_left(self.offsets, start), bisect_left(self.offsets, end)
        return self if (lo, hi) == (0, len(self.offsets)) else self[lo:hi]

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, i: int) -> LogRecord: ...

    @overload
    def __getitem__(self, i: slice) -> Records: ...

    def __getitem__(self, i: int | slice) -> LogRecord | Records:
        if isinstance(i, slice):
            return Records(self.offsets[i], self.timestamps_ms[i], self.keys[i], self.values[i])
        return LogRecord(self.offsets[i], self.timestamps_ms[i], self.keys[i], self.values[i])

    def __iter__(self) -> Iterator[LogRecord]:
        return map(LogRecord, self.offsets, self.timestamps_ms, self.keys, self.values)

    def __repr__(self) -> str:
        return f"Records({list(self)!r})"


_NONE = Records([], [], [], [])


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
