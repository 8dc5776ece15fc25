"""Many window aggregates as columns: `WindowAggs`, the batch form of `WindowAgg`.

A micro-batch touches thousands of (window, group) pairs when services are many or a backlog is
read; one `WindowAgg` object per pair, with its digests and sketch, costs about a millisecond
through the job (built, encoded, decoded, merged, read out and encoded again). `WindowAggs`
holds the same states for `n` groups as columns: counts as integer arrays, the t-digests as
`sketches.digests.Digests`, the users as `sketches.hlls.Hlls`, and every other registered metric
(the sliding windows' timeline, plugins' metrics) as one state object per group through the
metric's own functions. Its verbs are `WindowAgg`'s, over all groups at once.

Same states and bytes as `WindowAgg`, bit for bit (tests/unit/tidegauge/core/test_window_aggs.py):
`build` gives what a new `WindowAgg` holds after one `add_hashed` with the group's events,
`combine` what `WindowAgg.merged` gives for each key's rows in row order, `results` what
`WindowAgg.metrics` reports, `encode` what `WindowAgg.to_bytes` writes. Pure (numpy + sketches).
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

import sketches.varint as varint
from sketches.digests import Digests
from sketches.hlls import Hlls
from sketches.packed import Packed
from sketches.preamble import WINDOW_AGG
from tidegauge.core.metrics import (
    COUNT,
    ERRORS,
    LATENCY,
    LATENESS,
    LATENESS_PERCENTILES,
    OVERDUE,
    PERCENTILES,
    USERS,
)
from tidegauge.core.registry import Batch, Metric, ResultContext, metrics
from tidegauge.core.window_agg import WindowAgg, _entries, empty_payload, tag

__all__ = ["MergeEncoded", "WindowAggs", "merge_encoded"]

IntArray = npt.NDArray[np.int64]

#: The built-in metrics held as columns; any other metric is one state object per group.
_INTS = (COUNT, ERRORS)
_DIGESTS = (LATENCY, LATENESS, OVERDUE)
_SKETCHES = (USERS,)


@dataclass(eq=False)
class WindowAggs:
    """The aggregates of `n` groups: one column per registered metric.

    `objects[name]` is None while every group's state of that metric is empty (a timeline in a
    job without sliding windows), so the common case makes no object at all.
    """

    n: int
    registered: tuple[Metric, ...]
    ints: dict[str, IntArray] = field(default_factory=dict)
    digests: dict[str, Digests] = field(default_factory=dict)
    sketches: dict[str, Hlls] = field(default_factory=dict)
    objects: dict[str, list[Any] | None] = field(default_factory=dict)
    #: Sketches read for their estimates only (`results_of`), in place of `sketches`.
    estimates: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.n

    @classmethod
    def empty(cls, n: int) -> WindowAggs:
        """`n` empty aggregates of the registered metrics."""
        out = cls(n, metrics())
        for m in out.registered:
            if m in _INTS:
                out.ints[m.name] = np.zeros(n, np.int64)
            elif m in _DIGESTS:
                out.digests[m.name] = Digests.empty(n)
            elif m in _SKETCHES:
                out.sketches[m.name] = Hlls.empty(n)
            else:
                out.objects[m.name] = None
        return out

    # --- building ---------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        n: int,
        groups: IntArray,
        latency_ms: npt.NDArray[np.float64],
        status: IntArray,
        user_groups: IntArray,
        user_hashes: npt.NDArray[np.uint32],
        lateness_ms: npt.NDArray[np.float64] | None = None,
        overdue_groups: IntArray | None = None,
        overdue_ms: npt.NDArray[np.float64] | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
        timeline_ms: IntArray | None = None,
    ) -> WindowAggs:
        """Group g's aggregate of the events whose group is g: `WindowAgg.add_hashed` per group.

        One entry per event in `groups`, `latency_ms`, `status`, `lateness_ms`, `extra` and
        `timeline_ms`; `user_hashes` are the events with a user (their groups in `user_groups`),
        `overdue_ms` the events that have one (groups in `overdue_groups`).
        """
        out = cls.empty(n)
        out.ints["count"] = np.bincount(groups, minlength=n).astype(np.int64)
        out.ints["errors"] = np.bincount(groups[status >= 500], minlength=n).astype(np.int64)
        known = ~np.isnan(latency_ms)  # absent latencies are left out, not counted as NaN
        out.digests["latency"] = Digests.build(latency_ms[known], groups[known], n)
        out.sketches["users"] = Hlls.build(user_hashes, user_groups, n)
        if lateness_ms is not None:
            out.digests["lateness"] = Digests.build(lateness_ms, groups, n)
        if overdue_ms is not None and overdue_groups is not None and len(overdue_ms):
            out.digests["overdue"] = Digests.build(overdue_ms, overdue_groups, n)
        others = [m for m in out.registered if m.name in out.objects]
        if others and (extra or timeline_ms is not None):
            out._build_objects(
                others,
                groups,
                {
                    "latency_ms": latency_ms,
                    "status": status,
                    **({} if lateness_ms is None else {"lateness_ms": lateness_ms}),
                    **({} if timeline_ms is None else {"timeline_ms": timeline_ms}),
                    **(extra or {}),
                },
                (user_groups, user_hashes),
                None
                if overdue_ms is None or overdue_groups is None
                else (overdue_groups, overdue_ms),
            )
        return out

    def _build_objects(
        self,
        others: list[Metric],
        groups: IntArray,
        columns: dict[str, npt.NDArray[Any]],
        users: tuple[IntArray, npt.NDArray[np.uint32]],
        overdue: tuple[IntArray, npt.NDArray[np.float64]] | None,
    ) -> None:
        """The object metrics' states: each group's events as a `Batch`, as `add_hashed` makes."""
        cuts = _slices(groups, self.n)
        user_cuts = _slices(users[0], self.n)
        overdue_cuts = None if overdue is None else _slices(overdue[0], self.n)
        states: dict[str, list[Any]] = {m.name: [] for m in others}
        for g in range(self.n):
            rows = cuts[g]
            cols = {name: col[rows] for name, col in columns.items()}
            cols["user_hash"] = users[1][user_cuts[g]]
            if overdue is not None and overdue_cuts is not None:
                mine = overdue[1][overdue_cuts[g]]
                if len(mine):
                    cols["overdue_ms"] = mine
            batch = Batch(len(rows), cols)
            for m in others:
                states[m.name].append(m.update(m.empty(), batch))
        for name, values in states.items():
            self.objects[name] = values

    @classmethod
    def of(cls, aggs: Sequence[WindowAgg]) -> WindowAggs:
        """The columns of these aggregates, in order."""
        out = cls.empty(len(aggs))
        for m in out.registered:
            found = [a.states.get(m.name) for a in aggs]
            states: list[Any] = [m.empty() if s is None else s for s in found]
            if m.name in out.ints:
                out.ints[m.name] = np.array(states, np.int64).reshape(-1)
            elif m.name in out.digests:
                out.digests[m.name] = Digests.of(states) if states else Digests.empty(0)
            elif m.name in out.sketches:
                out.sketches[m.name] = Hlls.of(states) if states else Hlls.empty(0)
            else:
                out.objects[m.name] = states
        return out

    def agg(self, i: int) -> WindowAgg:
        """Group i's aggregate as a `WindowAgg`."""
        states: dict[str, Any] = {}
        for m in self.registered:
            if m.name in self.ints:
                states[m.name] = int(self.ints[m.name][i])
            elif m.name in self.digests:
                states[m.name] = self.digests[m.name].digest(i)
            elif m.name in self.sketches:
                states[m.name] = self.sketches[m.name].sketch(i)
            else:
                objs = self.objects[m.name]
                states[m.name] = m.empty() if objs is None else objs[i]
        return WindowAgg._of(states, self.registered)

    # --- rows -------------------------------------------------------------------------------

    def take(self, rows: npt.ArrayLike) -> WindowAggs:
        """The aggregates of `rows`, in that order (a row may repeat)."""
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = WindowAggs(idx.size, self.registered)
        out.ints = {k: v[idx] for k, v in self.ints.items()}
        out.digests = {k: v.take(idx) for k, v in self.digests.items()}
        out.sketches = {k: v.take(idx) for k, v in self.sketches.items()}
        out.objects = {
            k: None if v is None else [v[i] for i in idx.tolist()] for k, v in self.objects.items()
        }
        return out

    @classmethod
    def concat(cls, parts: Sequence[WindowAggs]) -> WindowAggs:
        """The aggregates of `parts`, one after another."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty(0)
        out = cls(sum(p.n for p in parts), parts[0].registered)
        for k in parts[0].ints:
            out.ints[k] = np.concatenate([p.ints[k] for p in parts])
        for k in parts[0].digests:
            out.digests[k] = Digests.concat([p.digests[k] for p in parts])
        for k in parts[0].sketches:
            out.sketches[k] = Hlls.concat([p.sketches[k] for p in parts])
        by_name = {m.name: m for m in out.registered}
        for k in parts[0].objects:
            if all(p.objects[k] is None for p in parts):
                out.objects[k] = None
            else:
                m = by_name[k]
                out.objects[k] = [
                    s for p in parts for s in (p.objects[k] or [m.empty() for _ in range(p.n)])
                ]
        return out

    def combine(
        self, keys: npt.ArrayLike, n: int, overdue_shifts_ms: npt.ArrayLike | None = None
    ) -> WindowAggs:
        """Aggregate k: `WindowAgg.merged` of the rows whose key is k, in row order.

        `overdue_shifts_ms` (one per row) re-bases the shiftable states, as `merged` does.
        """
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        shifts = None if overdue_shifts_ms is None else np.asarray(overdue_shifts_ms, np.float64)
        out = WindowAggs(n, self.registered)
        for name, values in self.ints.items():
            total = np.zeros(n, np.int64)
            np.add.at(total, k, values)
            out.ints[name] = total
        by_name = {m.name: m for m in self.registered}
        for name, d in self.digests.items():
            if shifts is not None and by_name[name].shift is not None:
                d = d.shifted(shifts)
            out.digests[name] = d.combine(k, n)
        for name, s in self.sketches.items():
            out.sketches[name] = s.combine(k, n)
        order = np.argsort(k, kind="stable")
        bounds = np.searchsorted(k[order], np.arange(n + 1))
        for name, objs in self.objects.items():
            if objs is None:
                out.objects[name] = None
                continue
            m = by_name[name]
            merged = []
            for g in range(n):
                rows = order[bounds[g] : bounds[g + 1]].tolist()
                states = [objs[r] for r in rows]
                if shifts is not None and m.shift is not None:
                    states = [
                        m.shift(s, d) if d else s for s, d in zip(states, shifts[rows], strict=True)
                    ]
                merged.append(m.merge(states) if states else m.empty())
            out.objects[name] = merged
        return out

    # --- reading ----------------------------------------------------------------------------

    def results(self, duration_ms: npt.ArrayLike) -> list[dict[str, Any]]:
        """`WindowAgg.metrics(duration)` of every group (one duration per group, or one)."""
        columns = self._result_columns(duration_ms)
        names = list(columns)
        return (
            [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]
            if self.n
            else []
        )

    def results_json(self, duration_ms: npt.ArrayLike) -> list[str]:
        """`results` of every group as sorted, compact JSON text, built column by column.

        What `json.dumps(metrics, separators=(",", ":"), sort_keys=True)` gives, without a
        dict per group: a batch of thousands of windows formats each value once.
        """
        columns = self._result_columns(duration_ms)
        if not self.n:
            return []
        if not columns:
            return ["{}"] * self.n
        cells = []
        for name in sorted(columns):
            head = json.dumps(name) + ":"
            cells.append([head + json_value(v) for v in columns[name]])
        return ["{" + ",".join(row) + "}" for row in zip(*cells, strict=True)]

    def _result_columns(self, duration_ms: npt.ArrayLike) -> dict[str, list[Any]]:
        """Each result field's values over the groups, in `results`' order."""
        n = self.n
        durations = np.broadcast_to(np.asarray(duration_ms, dtype=np.int64), (n,))
        count = self.ints["count"]
        columns: dict[str, list[Any]] = {}
        for m in self.registered:
            if m is COUNT:
                columns["count"] = count.tolist()
                columns["events_per_s"] = (count * 1000.0 / durations).tolist()
            elif m is ERRORS:
                errors = self.ints["errors"]
                columns["errors"] = errors.tolist()
                with np.errstate(divide="ignore", invalid="ignore"):
                    rate = np.where(count > 0, errors / np.maximum(count, 1), 0.0)
                columns["error_rate"] = rate.tolist()
            elif m is LATENCY:
                d = self.digests["latency"]
                has = d.count > 0
                columns["latency_count"] = d.count.tolist()
                with np.errstate(divide="ignore", invalid="ignore"):
                    mean = d.sum / d.count
                columns["latency_mean"] = _or_none(mean, has)
                q = d.quantiles(list(PERCENTILES.values()))
                for j, name in enumerate(PERCENTILES):
                    columns[name] = _or_none(q[:, j], has & np.isfinite(q[:, j]))
            elif m is USERS:
                users = self.estimates.get("users")
                if users is None:
                    users = self.sketches["users"].estimate()
                columns["distinct_users"] = [round(x) for x in users.tolist()]
            elif m is LATENESS:
                d = self.digests["lateness"]
                has = d.count > 0
                q = d.quantiles(list(LATENESS_PERCENTILES.values()))
                for j, name in enumerate(LATENESS_PERCENTILES):
                    columns[name] = _or_none(q[:, j], has & np.isfinite(q[:, j]))
                columns["lateness_max"] = _or_none(d.max, has & np.isfinite(d.max))
            elif m is OVERDUE:
                continue
            else:
                objs = self.objects[m.name]
                per_group = [
                    m.results(m.empty() if objs is None else objs[i], ResultContext(c, dur))
                    for i, (c, dur) in enumerate(
                        zip(count.tolist(), durations.tolist(), strict=True)
                    )
                ]
                for f in m.fields:
                    columns[f] = [r[f] for r in per_group]
        return columns

    # --- bytes ------------------------------------------------------------------------------

    def encode(self) -> list[bytes]:
        """`WindowAgg.to_bytes` of every group."""
        n = self.n
        payloads: list[tuple[bytes, bytes, list[bytes]]] = []
        for m in self.registered:
            if m.name in self.ints:
                b = self.ints[m.name].astype("<i8").tobytes()
                values = [b[i * 8 : i * 8 + 8] for i in range(n)]
            elif m.name in self.digests:
                values = self.digests[m.name].encode()
            elif m.name in self.sketches:
                values = self.sketches[m.name].encode()
            else:
                objs = self.objects[m.name]
                if objs is None:
                    continue  # every state empty: no entry
                values = [m.encode(s) for s in objs]
            payloads.append((tag(m.name), empty_payload(m), values))
        head = WINDOW_AGG.preamble
        pack = _length
        out = []
        for i in range(n):
            parts: list[bytes] = []
            for prefix, empty, values in payloads:
                v = values[i]
                if v != empty:
                    parts += (prefix, pack(len(v)), v)
            out.append(b"".join([head, pack(len(parts) // 3), *parts]))
        return out

    @classmethod
    def counts(cls, blobs: Sequence[bytes]) -> tuple[IntArray, IntArray]:
        """(count, errors) of each aggregate, read where they sit, sketches left alone.

        `WindowAgg.to_bytes` writes them first, each with its entry or none (zero); a blob laid
        out otherwise (another version, other metrics first) is decoded whole.
        """
        if not blobs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        packed = Packed(blobs)
        starts, ends, buf = packed.starts, packed.starts + packed.sizes, packed.buf
        at = starts + WINDOW_AGG.size + 1
        if (at <= ends).all() and packed.equal_at(starts, WINDOW_AGG.preamble):
            ok = buf[at - 1] < 0x80  # fewer than 128 entries: their number is one byte
            out = []
            for m in _INTS:
                here = _have(packed, at, ends, tag(m.name) + b"\x08")
                value = np.zeros(len(blobs), np.int64)
                ok &= here | ~_have(packed, at, ends, tag(m.name))  # its entry is 8 bytes
                if here.any():
                    ok &= ~here | (at + 10 <= ends)
                    if not ok.all():
                        break
                    value[here] = packed.read(at[here] + 2, "<i8")
                    at = np.where(here, at + 10, at)
                out.append(value)
            if ok.all():
                return out[0], out[1]
        whole = cls.decode(blobs)
        return whole.ints["count"], whole.ints["errors"]

    @classmethod
    def decode(cls, blobs: Sequence[bytes]) -> WindowAggs:
        """The aggregates of `WindowAgg.to_bytes` blobs (any version `WindowAgg.from_bytes` reads).

        A metric a blob does not hold reads back empty; entries of unregistered metrics are
        skipped; ValueError as `WindowAgg.from_bytes` raises it.
        """
        fast = cls._unpack(Packed(blobs)) if blobs else None
        return fast if fast is not None else cls._decode_each(blobs)

    @classmethod
    def results_of(cls, blobs: Sequence[bytes], duration_ms: npt.ArrayLike) -> list[dict[str, Any]]:
        """`decode(blobs).results(duration_ms)`, the same values, the sketches only estimated.

        Window rows need each HyperLogLog's estimate, not its registers: a busy `*`'s full
        sketch is estimated where it lies (`Hlls.estimate_blobs`), several times faster.
        """
        if not blobs:
            return []
        table = cls._unpack(Packed(blobs), estimate_only=True)
        return (table if table is not None else cls._decode_each(blobs)).results(duration_ms)

    @classmethod
    def _unpack(cls, blobs: Packed, estimate_only: bool = False) -> WindowAggs | None:
        """`decode` of blobs written by this registry (the common case), every field at once.

        Each metric's entry (or its absence) is found at an offset numpy computes for all blobs
        together (sketches/packed.py). None when a blob is of another version or holds entries
        of other metrics. `estimate_only`: sketches go to `estimates`, not decoded (`results_of`).
        """
        n = len(blobs.starts)
        out = cls.empty(n)
        buf, ends = blobs.buf, blobs.starts + blobs.sizes
        at = blobs.starts + WINDOW_AGG.size + 1
        if (at > ends).any() or not blobs.equal_at(blobs.starts, WINDOW_AGG.preamble):
            return None
        held = buf[at - 1].astype(np.int64)
        if (held >= 0x80).any():
            return None
        entries: list[tuple[Metric, npt.NDArray[np.bool_], IntArray, IntArray]] = []
        for m in out.registered:
            prefix = tag(m.name)
            here = _have(blobs, at, ends, prefix)
            start, size = np.zeros(n, np.int64), np.zeros(n, np.int64)
            if here.any():
                try:
                    size[here], start[here] = varint.read_at(
                        buf, at[here] + len(prefix), ends[here]
                    )
                except ValueError:
                    return None
                at = np.where(here, start + size, at)
                if (at > ends).any():
                    return None
                held -= here
            entries.append((m, here, start, size))
        if (at != ends).any() or held.any():
            return None
        for m, here, start, size in entries:
            if not here.any():
                continue  # every state empty (`empty` made them so)
            try:
                if m.name in out.ints:  # an absent count is 0 (`empty` made them so)
                    if (size[here] != 8).any():
                        return None
                    out.ints[m.name][here] = blobs.read(start[here], "<i8")
                    continue
                if m.name not in out.digests and m.name not in out.sketches:
                    present = Packed.of(buf, start[here], size[here])
                    decoded = iter([m.decode(b) for b in _slices_of(present)])
                    out.objects[m.name] = [next(decoded) if h else m.empty() for h in here.tolist()]
                    continue
                part = _with_empty(buf, here, start, size, empty_payload(m))
                if m.name in out.digests:
                    digests = Digests.unpack(part)
                    if digests is None:
                        return None
                    out.digests[m.name] = digests
                elif m.name in out.sketches:
                    sketches = Hlls.unpack(part)
                    if estimate_only:
                        del out.sketches[m.name]
                        out.estimates[m.name] = (
                            sketches.estimate()
                            if sketches is not None
                            else Hlls.estimate_blobs(_slices_of(part))
                        )
                    else:
                        out.sketches[m.name] = (
                            sketches if sketches is not None else Hlls.decode(_slices_of(part))
                        )
            except ValueError as e:
                raise ValueError(f"window aggregate: bad {m.name!r} entry: {e}") from None
        return out

    @classmethod
    def _decode_each(cls, blobs: Sequence[bytes]) -> WindowAggs:
        """`decode`, one blob at a time (older versions and registries)."""
        out = cls.empty(len(blobs))
        by_name = {m.name: m for m in out.registered}
        payloads: dict[str, list[bytes | None]] = {
            m.name: [None] * len(blobs) for m in out.registered
        }
        for i, blob in enumerate(blobs):
            for name, payload in _entries(blob):
                if name in payloads:
                    payloads[name][i] = payload
        for name, values in payloads.items():
            m = by_name[name]
            if name in out.objects:
                empty = m.encode(m.empty())
                if all(v is None or v == empty for v in values):
                    continue  # every state empty: no object made
            elif all(v is None for v in values):
                continue
            try:
                if name in out.ints:
                    out.ints[name] = np.array(
                        [0 if v is None else struct.unpack("<q", v)[0] for v in values], np.int64
                    )
                elif name in out.digests:
                    empty = m.encode(m.empty())
                    out.digests[name] = Digests.decode([empty if v is None else v for v in values])
                elif name in out.sketches:
                    empty = m.encode(m.empty())
                    out.sketches[name] = Hlls.decode([empty if v is None else v for v in values])
                else:
                    out.objects[name] = [m.empty() if v is None else m.decode(v) for v in values]
            except (struct.error, ValueError) as e:
                raise ValueError(f"window aggregate: bad {name!r} entry: {e}") from None
        return out


#: A payload's length as its varint: the same few hundred lengths recur in every batch.
_length = functools.lru_cache(maxsize=8192)(varint.pack)


def _have(blobs: Packed, at: IntArray, ends: IntArray, expected: bytes) -> npt.NDArray[np.bool_]:
    """Whether each blob holds `expected` at its offset (before its end)."""
    fits = at + len(expected) <= ends
    out = np.zeros(len(at), np.bool_)
    if fits.any():
        want = np.frombuffer(expected, np.uint8)
        out[fits] = (blobs.bytes_at(at[fits], len(expected)) == want).all(axis=1)
    return out


def _with_empty(
    buf: npt.NDArray[np.uint8],
    here: npt.NDArray[np.bool_],
    start: IntArray,
    size: IntArray,
    empty: bytes,
) -> Packed:
    """The payloads at (start, size) where `here`, and `empty` where a blob has no entry."""
    if here.all():
        return Packed.of(buf, start, size)
    joined = np.concatenate([buf, np.frombuffer(empty, np.uint8)])
    return Packed.of(joined, np.where(here, start, len(buf)), np.where(here, size, len(empty)))


def _slices_of(part: Packed) -> list[bytes]:
    """Each blob of a `Packed` as bytes."""
    buf = part.buf
    return [
        buf[a : a + b].tobytes()
        for a, b in zip(part.starts.tolist(), part.sizes.tolist(), strict=True)
    ]


def json_value(v: Any) -> str:
    """One value as `json.dumps` writes it inside compact, key-sorted JSON."""
    t = type(v)
    if v is None:
        return "null"
    if t is int:
        return int.__repr__(v)
    if t is float and math.isfinite(v):
        return float.__repr__(v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def _or_none(values: npt.NDArray[np.float64], keep: npt.NDArray[np.bool_]) -> list[float | None]:
    """Values as Python floats, None where not `keep`."""
    return [v if k else None for v, k in zip(values.tolist(), keep.tolist(), strict=True)]


def _slices(groups: IntArray, n: int) -> list[IntArray]:
    """Per group, the positions of its entries (in order)."""
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(n + 1))
    return [order[bounds[g] : bounds[g + 1]] for g in range(n)]


#: Encoded aggregates merged by key: (parts, each part's key, non-decreasing, n) -> key k's
#: parts merged in their order, encoded (`merge_encoded`, or the same split over processes).
MergeEncoded = Callable[[Sequence[bytes], IntArray, int], list[bytes]]


def merge_encoded(parts: Sequence[bytes], keys: IntArray, n: int) -> list[bytes]:
    """Each of `n` keys' parts (encoded `WindowAgg`s) merged in their order, encoded.

    Keys are independent: the merges of any run of keys are the same bytes whether they are
    computed with the other keys or apart (what lets `StatePool.merge_encoded` split them).
    """
    return WindowAggs.decode(list(parts)).combine(keys, n).encode()
