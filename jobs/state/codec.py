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

import numpy as np

from jobs.panes.dedup import SeenIds, service_keys
from jobs.panes.windows import ServiceWindows
from jobs.summary.settings import ExecutorConfig
from sketches.preamble import SHARD_STATE

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


#: After the preamble (magic b"TGSH", version 3: + the shard's id set, after the names; 2 kept the
#: ids per service; 1 had no tracked names of the cardinality guard; sketches/preamble.py):
#: shards, services.
_SHARD_HEAD = struct.Struct("<II")
_SHARD_HEAD_END = SHARD_STATE.size + _SHARD_HEAD.size
_SERVICE = struct.Struct("<II")  # len(name), len(ServiceWindows bytes)
_NAMES = struct.Struct("<I")  # length of the JSON of the tracked names
_IDS = struct.Struct("<I")  # length of the id set's bytes


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

    def to_bytes(self) -> bytes:
        """Versioned blob: header, (name, ServiceWindows bytes) per service, names, ids."""
        parts = [SHARD_STATE.preamble, _SHARD_HEAD.pack(self.shards, len(self.services))]
        for name, sw in sorted(self.services.items()):
            raw_name, blob = name.encode(), sw.to_bytes()
            parts += [_SERVICE.pack(len(raw_name), len(blob)), raw_name, blob]
        names = json.dumps(dict(sorted(self.names.items())), separators=(",", ":")).encode()
        ids = self.ids.to_bytes() if self.ids.groups else b""
        parts += [_NAMES.pack(len(names)), names, _IDS.pack(len(ids)), ids]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes, cfg: ExecutorConfig) -> ShardState:
        """Inverse of `to_bytes`; refuses state of another shard count or window specs."""
        version = SHARD_STATE.check(
            blob,
            foreign="the checkpoint holds window state from an older Tidegauge version",
            advice="use a new --checkpoint directory",
        )
        if len(blob) < _SHARD_HEAD_END:
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        shards, n = _SHARD_HEAD.unpack_from(blob, SHARD_STATE.size)
        if shards != cfg.shards:
            raise ValueError(
                f"checkpoint state was written with {shards} state shards, the job has "
                f"{cfg.shards}: keep --state-shards or use a new --checkpoint directory"
            )
        pos = _SHARD_HEAD_END
        services = {}
        try:
            for _ in range(n):
                n_name, n_blob = _SERVICE.unpack_from(blob, pos)
                pos += _SERVICE.size
                name = blob[pos : pos + n_name].decode()
                pos += n_name
                services[name] = ServiceWindows.from_bytes(blob[pos : pos + n_blob], cfg.specs)
                pos += n_blob
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
        except struct.error as e:
            raise ValueError("window state is truncated: use a new --checkpoint directory") from e
        if pos != len(blob):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        _gather_ids(services, ids)
        return cls(shards, services, names, ids)


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
