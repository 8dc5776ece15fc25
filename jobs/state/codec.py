"""The state codec: what one (group, shard) keeps in Spark state, as versioned bytes.

An event shard keeps every service's `ServiceWindows` (jobs/panes/windows.py); the dead-letter group
keeps its counts per reason. A checkpoint written for other window specs, shard counts or an
unknown version is refused with a message asking for a new `--checkpoint`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from jobs.panes.dedup import SeenIds, service_keys
from jobs.panes.sessions import Sessions
from jobs.panes.windows import ServiceWindows
from jobs.summary.settings import ExecutorConfig
from sketches.preamble import SHARD_STATE, WINDOW_AGG
from tidegauge.core.dimensions import SpaceSaving
from tidegauge.core.windows import is_late

__all__ = ["STATE_SCHEMA", "DeadCounts", "ShardState"]


STATE_SCHEMA = "blob binary"


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


#: After the preamble (magic b"TGSH", version 4: every service's panes as one table; 3 had
#: each service's `ServiceWindows` bytes, and the shard's id set after the names; 2 kept the ids
#: per service; 1 had no tracked names of the cardinality guard; sketches/preamble.py):
#: shards, services.
_SHARD_HEAD = struct.Struct("<II")
_SHARD_HEAD_END = SHARD_STATE.size + _SHARD_HEAD.size
_SERVICE = struct.Struct("<II")  # (versions 1-3) len(name), len(ServiceWindows bytes)
_NAMES = struct.Struct("<I")  # length of the JSON of the tracked names
_IDS = struct.Struct("<I")  # length of the id set's bytes
_LEN = struct.Struct("<I")  # (version 4) a length: of the JSON header, or the panes
_TRUNCATED = "window state is truncated: use a new --checkpoint directory"


@dataclass
class ShardState:
    """The state of one event group: the windows of every service hashed onto the shard."""

    shards: int
    services: dict[str, ServiceWindows] = field(default_factory=dict)
    #: The cardinality guard's tracked names (`--max-services`): name -> the event time of its
    #: latest events (jobs/state/aggregate.py, `Overflow`).
    names: dict[str, int] = field(default_factory=dict)
    #: The accepted event ids of every service of the shard (jobs/panes/dedup.py).
    ids: SeenIds = field(default_factory=SeenIds)
    #: Per (service or `*`, dimension), "service SEP dimension": the Space-Saving summary of its
    #: values, which picks the ones with slices of their own (jobs/state/aggregate.py).
    hitters: dict[str, SpaceSaving] = field(default_factory=dict)
    #: The hour of event time (watermark // 1 h) the summaries were last aged in.
    hitters_hour: int = 0

    def evict(self, watermark_ms: int) -> None:
        """Forget the panes and sessions no open window needs; drop services with nothing left.

        A pane's fate depends on its start only: it is decided once per distinct start.
        """
        starts: set[int] = set()
        for sw in self.services.values():
            starts.update(sw.panes)
        plan = next(iter(self.services.values())).plan if self.services else None
        gone = [p for p in starts if plan is not None and is_late(plan.last_end(p), watermark_ms)]
        for name in list(self.services):
            sw = self.services[name]
            panes = sw.panes
            for p in gone:
                panes.pop(p, None)
            if sw.sessions is not None:
                sw.sessions.evict(watermark_ms)
            sw.ids.evict(watermark_ms)
            if sw.is_empty:
                del self.services[name]

    def to_bytes(self) -> bytes:
        """Versioned blob: header, every service's sessions, one table of all panes, names, ids."""
        names = sorted(self.services)
        specs = next(iter(self.services.values())).specs if self.services else ()
        header: dict[str, Any] = {"specs": [s.key for s in specs], "services": names}
        if self.hitters:  # (a key of its own: states without dimensions read as before)
            header["hitters"] = {k: self.hitters[k].to_json() for k in sorted(self.hitters)}
            header["hitters_hour"] = self.hitters_hour
        head = json.dumps(header).encode()
        sessions = [_session_bytes(self.services[n]) for n in names]
        code: list[int] = []
        start: list[int] = []
        blobs: list[bytes] = []
        for i, name in enumerate(names):
            panes = self.services[name].panes
            for p in sorted(panes):
                code.append(i)
                start.append(p)
                blobs.append(panes[p])
        tracked = json.dumps(dict(sorted(self.names.items())), separators=(",", ":")).encode()
        ids = self.ids.to_bytes() if self.ids.groups else b""
        return b"".join(
            [
                SHARD_STATE.preamble,
                _SHARD_HEAD.pack(self.shards, len(names)),
                _LEN.pack(len(head)),
                head,
                np.fromiter(map(len, sessions), "<u4", len(sessions)).tobytes(),
                *sessions,
                _LEN.pack(len(blobs)),
                np.array(code, "<u4").tobytes(),
                np.array(start, "<i8").tobytes(),
                np.fromiter(map(len, blobs), "<u4", len(blobs)).tobytes(),
                *blobs,
                _NAMES.pack(len(tracked)),
                tracked,
                _IDS.pack(len(ids)),
                ids,
            ]
        )

    @classmethod
    def from_bytes(cls, blob: bytes, cfg: ExecutorConfig) -> ShardState:
        """Inverse of `to_bytes` (or versions 1-3); refuses other shard counts or window specs."""
        version = SHARD_STATE.check(
            blob,
            foreign="the checkpoint holds window state from an older Tidegauge version",
            advice="use a new --checkpoint directory",
        )
        if len(blob) < _SHARD_HEAD_END:
            raise ValueError(_TRUNCATED)
        shards, n = _SHARD_HEAD.unpack_from(blob, SHARD_STATE.size)
        if shards != cfg.shards:
            raise ValueError(
                f"checkpoint state was written with {shards} state shards, the job has "
                f"{cfg.shards}: keep --state-shards or use a new --checkpoint directory"
            )
        pos = _SHARD_HEAD_END
        try:
            head: dict[str, Any] = {}
            if version >= 4:
                services, pos, head = _services_v4(blob, pos, n, cfg)
            else:
                services, pos = _services_v3(blob, pos, n, cfg)
            names: dict[str, int] = {}
            if version >= 2:
                (n_names,) = _NAMES.unpack_from(blob, pos)
                pos += _NAMES.size
                names = _names(blob[pos : pos + n_names])
                pos += n_names
            ids = SeenIds()
            if version >= 3:
                (n_ids,) = _IDS.unpack_from(blob, pos)
                pos += _IDS.size
                if n_ids:
                    ids = SeenIds.from_bytes(blob[pos : pos + n_ids])
                pos += n_ids
        except (struct.error, ValueError) as e:
            if "checkpoint holds windows" in str(e):
                raise
            raise ValueError(_TRUNCATED) from e
        if pos != len(blob):
            raise ValueError(_TRUNCATED)
        _gather_ids(services, ids)
        capacity = hitter_capacity(cfg)
        hitters = {
            k: SpaceSaving.from_json(capacity, rows) for k, rows in head.get("hitters", {}).items()
        }
        return cls(shards, services, names, ids, hitters, int(head.get("hitters_hour", 0)))


def _session_bytes(sw: ServiceWindows) -> bytes:
    s = sw.sessions
    return b"" if s is None or (not len(s.users) and not s.buckets) else s.to_bytes()


def hitter_capacity(cfg: ExecutorConfig) -> int:
    """Counters of each (service, dimension) summary: 4x the values it keeps.

    The values kept are ranked among several times as many candidates
    (tidegauge/core/dimensions.py).
    """
    return 4 * cfg.dimension_values


def _services_v4(
    blob: bytes, pos: int, n: int, cfg: ExecutorConfig
) -> tuple[dict[str, ServiceWindows], int, dict[str, Any]]:
    """The services of a version 4 shard state, the position after them, and its header."""
    (n_head,) = _LEN.unpack_from(blob, pos)
    pos += _LEN.size
    head = json.loads(blob[pos : pos + n_head])
    pos += n_head
    names = head["services"]
    if names:
        _check_specs(tuple(head["specs"]), cfg)
    if len(names) != n:
        raise ValueError(_TRUNCATED)
    session_sizes = np.frombuffer(blob, "<u4", n, pos).tolist()
    pos += 4 * n
    session_spec = next((s for s in cfg.specs if s.kind == "session"), None)
    sessions: list[Sessions | None] = []
    for size in session_sizes:
        part = blob[pos : pos + size]
        pos += size
        sessions.append(
            Sessions.from_bytes(part, session_spec) if size and session_spec is not None else None
        )
    (n_panes,) = _LEN.unpack_from(blob, pos)
    pos += _LEN.size
    code = np.frombuffer(blob, "<u4", n_panes, pos)
    pos += 4 * n_panes
    start = np.frombuffer(blob, "<i8", n_panes, pos).tolist()
    pos += 8 * n_panes
    sizes = np.frombuffer(blob, "<u4", n_panes, pos).astype(np.int64)
    pos += 4 * n_panes
    ends = pos + np.cumsum(sizes)
    if n_panes and int(ends[-1]) > len(blob):
        raise ValueError(_TRUNCATED)
    begins = (ends - sizes).tolist()
    ends_list = ends.tolist()
    _check_panes(blob, begins, sizes)
    bounds = np.searchsorted(code, np.arange(n + 1)).tolist()
    services = {}
    for i, name in enumerate(names):
        lo, hi = bounds[i], bounds[i + 1]
        panes = {start[k]: blob[begins[k] : ends_list[k]] for k in range(lo, hi)}
        services[name] = ServiceWindows(cfg.specs, panes, sessions[i])
    return services, (ends_list[-1] if n_panes else pos), head


def _check_panes(blob: bytes, begins: list[int], sizes: npt.NDArray[np.int64]) -> None:
    """Every pane starts with the window aggregate's preamble (decoded when a batch touches it)."""
    if not begins:
        return
    if int(sizes.min()) < WINDOW_AGG.size:
        raise ValueError(_TRUNCATED)
    buf = np.frombuffer(blob, np.uint8)
    magic = np.frombuffer(WINDOW_AGG.magic, np.uint8)
    heads = buf[np.array(begins, np.int64)[:, None] + np.arange(len(magic))]
    if not (heads == magic).all():
        for b in begins:  # the first bad one names its format
            WINDOW_AGG.check(blob[b : b + WINDOW_AGG.size])


def _check_specs(stored: tuple[str, ...], cfg: ExecutorConfig) -> None:
    if sorted(stored) != sorted(s.key for s in cfg.specs):
        raise ValueError(
            f"checkpoint holds windows {list(stored)} but the job asks for "
            f"{[s.key for s in cfg.specs]}: use a new --checkpoint directory to change --window"
        )


def _services_v3(
    blob: bytes, pos: int, n: int, cfg: ExecutorConfig
) -> tuple[dict[str, ServiceWindows], int]:
    """The services of a version 1-3 shard state: (name, `ServiceWindows` bytes) each."""
    services = {}
    for _ in range(n):
        n_name, n_blob = _SERVICE.unpack_from(blob, pos)
        pos += _SERVICE.size
        name = blob[pos : pos + n_name].decode()
        pos += n_name
        services[name] = ServiceWindows.from_bytes(blob[pos : pos + n_blob], cfg.specs)
        pos += n_blob
    return services, pos


def _gather_ids(services: dict[str, ServiceWindows], into: SeenIds) -> None:
    """Move ids kept per service (state of version 2) into the shard's set."""
    held = sorted(name for name, sw in services.items() if sw.ids.groups)
    for name, key in zip(held, service_keys(held).tolist(), strict=True):
        sw = services[name]
        for horizon, hashes in sw.ids.groups.items():
            into.add(hashes ^ np.uint64(key), np.full(len(hashes), horizon, np.int64))
        sw.ids = SeenIds()


def _names(raw: bytes) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads(raw).items()}
    except (ValueError, AttributeError) as e:
        raise ValueError("window state is truncated: use a new --checkpoint directory") from e
