"""Sliding windows' busiest interval: event counts on a fine timeline, and their peaks. Pure.

A sliding window of length S "contains all the events that occur within S of each other": every
interval [e - S, e) is one, for every instant e. Its question is the peak, "the busiest minute":
the largest number of events (and of errors) in any such interval. Counting every interval of
every event is too much for a stream, so the job counts events per bucket of `resolution` ms
(a `Timeline`) and takes the peak over the intervals whose ends lie on that grid: exact for
intervals aligned to the resolution, which is 1 ms when asked for (docs/time.md, "Sliding
windows", says what each resolution costs).

Each window row of a sliding spec answers for the intervals that END inside its primary
window (the step): `frame` cuts a timeline to [first_end - S, last_end) and `peaks` takes the
maximum over the ends first_end, first_end + r, ..., last_end. Every interval ending in that
window depends only on events before its end, so the peak is final when the window closes,
like every other figure of the row.

    S = 30 s, step 10 s, resolution r: the row of [20 s, 30 s) (rolling interval [0, 30 s))
    intervals   [-10+r, 20+r) ... [0, 30)        their ends: 20 + r ... 30 s
    timeline    |-10 s ...................... 30 s|    the buckets the frame keeps

Timelines add and merge exactly (sums of counts), so the `*` row's peak is the peak of the sum
of every service's timeline, and a window's timeline is the sum of its panes'.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sketches import varint
from tidegauge.core.windows import WindowSpec

__all__ = ["Frame", "Peaks", "Timeline", "frame_of"]

_I64 = npt.NDArray[np.int64]
_NONE = np.empty(0, np.int64)
_NONE.flags.writeable = False  # shared: timelines replace their arrays, never write into them


@dataclass(frozen=True)
class Frame:
    """Which intervals a framed timeline answers for.

    Intervals of `length_ms`, their ends on the grid of `resolution_ms` from `first_end_ms` to
    `last_end_ms` (both included).
    """

    length_ms: int
    resolution_ms: int
    first_end_ms: int
    last_end_ms: int

    def __post_init__(self) -> None:
        r = self.resolution_ms
        if r <= 0 or self.length_ms <= 0 or self.length_ms % r:
            raise ValueError(f"interval length {self.length_ms} ms is not a multiple of {r} ms")
        if self.first_end_ms % r or self.last_end_ms % r or self.last_end_ms < self.first_end_ms:
            raise ValueError("interval ends must lie on the resolution's grid, first <= last")

    @property
    def origin_ms(self) -> int:
        """Start of the first bucket any of the intervals holds."""
        return self.first_end_ms - self.length_ms


@dataclass(frozen=True)
class Peaks:
    """The busiest interval of a frame: its event count and start, and the same for errors.

    Ties go to the earliest interval; with no events at all, the first interval (count 0).
    """

    events: int
    start_ms: int
    errors: int
    errors_start_ms: int


def frame_of(spec: WindowSpec, start_ms: int) -> Frame:
    """The intervals the row of a sliding `spec` starting at `start_ms` answers for.

    Those of its length ending inside its step, (end - step, end], on its resolution's grid.
    """
    if spec.kind != "sliding":
        raise ValueError(f"{spec.key} is not a sliding window")
    end = spec.end(start_ms)
    return Frame(spec.size_ms, spec.resolution_ms, end - spec.slide_ms + spec.resolution_ms, end)


class Timeline:
    """Events and errors per bucket start (sorted, unique), and the `Frame` it answers for.

    Buckets are the event times floored to a resolution (`add`); a pane's timeline has no
    frame, a sliding window row's has one.
    """

    __slots__ = ("counts", "errors", "frame", "starts")

    def __init__(
        self,
        starts: _I64 | None = None,
        counts: _I64 | None = None,
        errors: _I64 | None = None,
        frame: Frame | None = None,
    ) -> None:
        # Every window aggregate holds a timeline, almost always empty: they share one array.
        self.starts = _NONE if starts is None else np.asarray(starts, np.int64)
        self.counts = _NONE if counts is None else np.asarray(counts, np.int64)
        self.errors = _NONE if errors is None else np.asarray(errors, np.int64)
        self.frame = frame

    def __len__(self) -> int:
        return len(self.starts)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Timeline)
            and self.frame == other.frame
            and np.array_equal(self.starts, other.starts)
            and np.array_equal(self.counts, other.counts)
            and np.array_equal(self.errors, other.errors)
        )

    def __repr__(self) -> str:
        return f"Timeline({len(self)} buckets, {int(self.counts.sum())} events, {self.frame})"

    @property
    def total(self) -> int:
        """Events on the timeline."""
        return int(self.counts.sum())

    def add(self, bucket_ms: _I64, is_error: npt.NDArray[np.bool_]) -> Timeline:
        """Add events by their bucket start (one entry each) and whether each is an error."""
        if not len(bucket_ms):
            return self
        if self.frame is not None:
            raise ValueError("a framed timeline is a result: add events to its parts")
        new = _summed(
            [np.asarray(bucket_ms, np.int64)],
            [np.ones(len(bucket_ms), np.int64)],
            [np.asarray(is_error, np.int64)],
        )
        if len(self):
            new = _summed([self.starts, new[0]], [self.counts, new[1]], [self.errors, new[2]])
        self.starts, self.counts, self.errors = new
        return self

    @staticmethod
    def merged(states: Sequence[Timeline]) -> Timeline:
        """The sum of timelines: panes into a window, services into `*`.

        Framed ones must answer for the same frame (an empty timeline fits any): summing two
        rows' timelines of different frames would count their shared events twice.
        """
        full = [t for t in states if len(t) or t.frame is not None]
        frames = {t.frame for t in full if t.frame is not None}
        if len(frames) > 1 or (frames and any(t.frame is None and len(t) for t in full)):
            raise ValueError("timelines of different frames do not add up")
        frame = next(iter(frames), None)
        if not full:
            return Timeline()
        if len(full) == 1:
            t = full[0]
            return Timeline(t.starts, t.counts, t.errors, frame)
        starts, counts, errors = _summed(
            [t.starts for t in full], [t.counts for t in full], [t.errors for t in full]
        )
        return Timeline(starts, counts, errors, frame)

    def framed(self, frame: Frame) -> Timeline:
        """The buckets the frame's intervals hold, re-bucketed to its resolution."""
        if self.frame is not None:
            raise ValueError("the timeline is framed already")
        r = frame.resolution_ms
        keep = (self.starts >= frame.origin_ms) & (self.starts < frame.last_end_ms)
        starts = self.starts[keep]
        if len(starts) and np.any(starts % r):
            starts, counts, errors = _summed(
                [starts - starts % r], [self.counts[keep]], [self.errors[keep]]
            )
            return Timeline(starts, counts, errors, frame)
        return Timeline(starts, self.counts[keep], self.errors[keep], frame)

    def peaks(self) -> Peaks | None:
        """The busiest interval of the frame (None for a timeline without one).

        The sum over [e - length, e) is a step function of the end e: it rises where a bucket
        enters (e = bucket + resolution) and falls where one leaves. So the earliest busiest
        interval ends at the frame's first end or where a bucket enters, and only those ends
        are evaluated: work in the buckets with events, not in the frame's length (a 60 s
        frame at 1 ms has 70,000 ends and a few hundred buckets).
        """
        f = self.frame
        if f is None:
            return None
        r = f.resolution_ms
        ends = np.concatenate(([f.first_end_ms], self.starts + r))
        ends = np.unique(ends[(ends >= f.first_end_ms) & (ends <= f.last_end_ms)])
        inside = np.searchsorted(self.starts, ends, "left")  # buckets before each end
        before = np.searchsorted(self.starts, ends - f.length_ms, "left")  # ... before its start
        out = []
        for values in (self.counts, self.errors):
            cum = np.concatenate(([0], np.cumsum(values)))
            sums = cum[inside] - cum[before]
            best = int(np.argmax(sums))
            out += [int(sums[best]), int(ends[best]) - f.length_ms]
        return Peaks(*out)

    def to_bytes(self) -> bytes:
        """Empty for an empty unframed timeline; else its frame and its buckets as varints.

        One marker byte (`_FRAMED`, `_PANE`, plus `_DEFLATED` when zlib makes the body
        shorter), then a framed timeline's first interval end (i8), its length, resolution,
        number of ends and buckets as varints; a pane's first bucket start (i8) and its number
        of buckets. The body: each bucket's start as its gap from the one before (a framed
        one's first from the frame's origin) in units of the resolution, then the counts, then
        the errors, all varints. ~100 buckets of a 60 s row take ~100 bytes where fixed
        widths and zlib took ~300. Timelines of version 1 (a bool and fixed widths) still read.
        """
        if not len(self) and self.frame is None:
            return b""
        f = self.frame
        if f is None:
            r, head = 1, _I8.pack(int(self.starts[0])) + varint.pack(len(self))
            steps = np.diff(self.starts, prepend=self.starts[0])
        else:
            r = f.resolution_ms
            ends = (f.last_end_ms - f.first_end_ms) // r
            head = _I8.pack(f.first_end_ms) + b"".join(
                varint.pack(v) for v in (f.length_ms, r, ends, len(self))
            )
            if np.any((self.starts - f.origin_ms) % r):
                return self._to_bytes_v1()  # buckets off the frame's grid: not made by `framed`
            steps = np.diff(self.starts, prepend=f.origin_ms) // r
        columns = np.concatenate((steps, self.counts, self.errors))
        if len(columns) and (columns.min() < 0 or columns.max() >= varint.LIMIT):
            return self._to_bytes_v1()  # a pane spanning a year, a count past 2^35
        body = varint.encode(columns).tobytes()
        deflated = zlib.compress(body, 9)
        marker = _PANE if f is None else _FRAMED
        if len(deflated) < len(body):
            return bytes((marker | _DEFLATED,)) + head + deflated
        return bytes((marker,)) + head + body

    def _to_bytes_v1(self) -> bytes:
        """Version 1: a bool (framed), the frame and the number of buckets, zlib'd fixed widths."""
        f = self.frame or Frame(1, 1, 0, 0)
        head = _HEAD_V1.pack(
            self.frame is not None,
            f.length_ms,
            f.resolution_ms,
            f.first_end_ms,
            f.last_end_ms,
            len(self),
        )
        body = b"".join(
            [
                np.diff(self.starts, prepend=0).astype("<i8").tobytes(),
                self.counts.astype("<u4").tobytes(),
                self.errors.astype("<u4").tobytes(),
            ]
        )
        return head + zlib.compress(body, 1)

    @classmethod
    def from_bytes(cls, data: bytes) -> Timeline:
        """Inverse of `to_bytes`, of either version; ValueError on anything else."""
        if not data:
            return cls()
        if data[0] <= 1:
            return cls._from_bytes_v1(data)
        marker = data[0] & ~_DEFLATED
        if marker not in (_FRAMED, _PANE):
            raise ValueError(f"timeline: unknown marker {data[0]}")
        if len(data) < 1 + _I8.size:
            raise ValueError("timeline: too short")
        (first,) = _I8.unpack_from(data, 1)
        try:
            frame, n, pos = _read_head(data, marker == _FRAMED, first)
        except ValueError as e:
            raise ValueError(f"timeline: {e}") from None
        body = data[pos:]
        if data[0] & _DEFLATED:
            try:
                body = zlib.decompress(body)
            except zlib.error as e:
                raise ValueError(f"timeline: {e}") from None
        try:
            columns = varint.decode(np.frombuffer(body, np.uint8), 3 * n)
        except ValueError as e:
            raise ValueError(f"timeline: {e}") from None
        steps, counts, errors = columns[:n], columns[n : 2 * n], columns[2 * n :]
        if frame is None:
            starts = first + np.cumsum(steps)
        else:
            starts = frame.origin_ms + np.cumsum(steps) * frame.resolution_ms
        return cls(starts, counts, errors, frame)

    @classmethod
    def _from_bytes_v1(cls, data: bytes) -> Timeline:
        if len(data) < _HEAD_V1.size:
            raise ValueError("timeline: too short")
        framed, length, res, first, last, n = _HEAD_V1.unpack_from(data)
        try:
            body = zlib.decompress(data[_HEAD_V1.size :])
        except zlib.error as e:
            raise ValueError(f"timeline: {e}") from None
        if len(body) != 16 * n:
            raise ValueError("timeline: length mismatch")
        starts = np.cumsum(np.frombuffer(body, "<i8", n, 0)).astype(np.int64)
        counts = np.frombuffer(body, "<u4", n, 8 * n).astype(np.int64)
        errors = np.frombuffer(body, "<u4", n, 12 * n).astype(np.int64)
        frame = Frame(length, res, first, last) if framed else None
        return cls(starts, counts, errors, frame)


def _read_head(data: bytes, framed: bool, first: int) -> tuple[Frame | None, int, int]:
    """A version-2 header: the frame (None for a pane), the buckets, where the body starts."""
    pos = 1 + _I8.size
    frame = None
    if framed:
        length, pos = varint.unpack_from(data, pos)
        r, pos = varint.unpack_from(data, pos)
        ends, pos = varint.unpack_from(data, pos)
        frame = Frame(length, r, first, first + ends * r)
    n, pos = varint.unpack_from(data, pos)
    return frame, n, pos


_HEAD_V1 = struct.Struct("<?qqqqI")
_I8 = struct.Struct("<q")
#: Version 2's first byte: a framed timeline or a pane's, and whether its body is deflated.
#: Version 1's is a bool, 0 or 1.
_FRAMED, _PANE, _DEFLATED = 2, 4, 1


def _summed(starts: list[_I64], counts: list[_I64], errors: list[_I64]) -> tuple[_I64, _I64, _I64]:
    """Bucket-wise sums of several (starts, counts, errors) parts: sorted unique starts."""
    s = np.concatenate(starts)
    uniq, inverse = np.unique(s, return_inverse=True)
    c = np.bincount(inverse, weights=np.concatenate(counts), minlength=len(uniq))
    e = np.bincount(inverse, weights=np.concatenate(errors), minlength=len(uniq))
    return uniq.astype(np.int64), c.astype(np.int64), e.astype(np.int64)
