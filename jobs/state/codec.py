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


#: After the preamble (magic b"TGSH", version 2: + the tracked names of the cardinality guard,
#: 1 is read as none; sketches/preamble.py): shards, services.
_SHARD_HEAD = struct.Struct("<II")
_SHARD_HEAD_END = SHARD_STATE.size + _SHARD_HEAD.size
_SERVICE = struct.Struct("<II")  # len(name), len(ServiceWindows bytes)
_NAMES = struct.Struct("<I")  # length of the JSON of the tracked names


@dataclass
class ShardState:
    """The state of one event group: the windows of every service hashed onto the shard."""

    shards: int
    services: dict[str, ServiceWindows] = field(default_factory=dict)
    #: The cardinality guard's tracked names (`--max-services`): name -> the event time of its
    #: latest events (jobs/state/aggregate.py, `Overflow`).
    names: dict[str, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Versioned blob: header, (name, ServiceWindows bytes) per service, sorted, the names."""
        parts = [SHARD_STATE.preamble, _SHARD_HEAD.pack(self.shards, len(self.services))]
        for name, sw in sorted(self.services.items()):
            raw_name, blob = name.encode(), sw.to_bytes()
            parts += [_SERVICE.pack(len(raw_name), len(blob)), raw_name, blob]
        names = json.dumps(dict(sorted(self.names.items())), separators=(",", ":")).encode()
        parts += [_NAMES.pack(len(names)), names]
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
        except struct.error as e:
            raise ValueError("window state is truncated: use a new --checkpoint directory") from e
        if pos != len(blob):
            raise ValueError("window state is truncated: use a new --checkpoint directory")
        return cls(shards, services, names)


def _names(raw: bytes) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads(raw).items()}
    except (ValueError, AttributeError) as e:
        raise ValueError("window state is truncated: use a new --checkpoint directory") from e
