"""The state codec (jobs/state/codec.py): `DeadCounts` and `ShardState` as versioned bytes."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from jobs.panes.dedup import service_keys
from jobs.panes.windows import ServiceWindows
from jobs.state.codec import DeadCounts, ShardState
from jobs.summary.settings import ExecutorConfig
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import HOPPING, SESSION, SIZE, TUMBLING, filled, timed_add
from tidegauge.core.windows import WindowSpec


def test_dead_counts_add_and_round_trip() -> None:
    counts = DeadCounts()
    counts.add(["invalid_json", "empty", "invalid_json"])
    counts.add([])
    counts.add(iter(["wrong_type"]))
    assert counts.by_reason == {"invalid_json": 2, "empty": 1, "wrong_type": 1}
    back = DeadCounts.from_bytes(counts.to_bytes())
    assert back == counts
    assert DeadCounts.from_bytes(DeadCounts().to_bytes()) == DeadCounts()


# --- ShardState ---------------------------------------------------------------------------------


def _shard(shards: int, specs: tuple[WindowSpec, ...]) -> ShardState:
    api, web, other = ServiceWindows(specs), ServiceWindows(specs), ServiceWindows(specs)
    timed_add(api, [T + 1, T + 2, T + SIZE + 5], [T + 9 * S, math.nan, T + 20 * S], 0, None)
    timed_add(web, [T + 4 * S], [T + 5 * S], T - 5 * S, T + 2 * S)
    timed_add(other, [T - 100 * S], [T], T - 200 * S, T - 90 * S)
    return ShardState(shards, {"api": api, "web": web, "sérvice ✓": other})


@pytest.mark.parametrize("specs", [(TUMBLING,), (TUMBLING, HOPPING), (HOPPING, SESSION)])
@pytest.mark.parametrize("shards", [1, 3])
def test_shard_state_round_trip(specs: tuple[WindowSpec, ...], shards: int) -> None:
    cfg = ExecutorConfig(specs, shards=shards)
    for shard in (ShardState(shards), _shard(shards, specs)):
        blob = shard.to_bytes()
        back = ShardState.from_bytes(blob, cfg)
        assert back.shards == shards
        assert sorted(back.services) == sorted(shard.services)
        for name, sw in shard.services.items():
            assert back.services[name].panes == sw.panes  # digests included
            assert back.services[name].to_bytes() == sw.to_bytes()  # sessions included
        assert back.to_bytes() == blob
    if SESSION in specs:
        sessions = ShardState.from_bytes(_shard(shards, specs).to_bytes(), cfg)
        assert sessions.services["api"].sessions is not None
        assert sorted(sessions.services["api"].sessions.users.tolist()) == ["u0", "u1", "u2"]


@pytest.mark.parametrize(("written", "asked"), [(3, 1), (1, 3), (3, 4)])
def test_shard_state_refuses_another_shard_count(written: int, asked: int) -> None:
    blob = _shard(written, (TUMBLING,)).to_bytes()
    with pytest.raises(ValueError, match="--state-shards") as e:
        ShardState.from_bytes(blob, ExecutorConfig((TUMBLING,), shards=asked))
    message = str(e.value)
    assert f"{written} state shards" in message and str(asked) in message
    assert "--checkpoint" in message


def test_shard_state_refuses_other_specs_old_state_and_broken_blobs() -> None:
    cfg = ExecutorConfig((TUMBLING,))
    blob = _shard(1, (TUMBLING,)).to_bytes()
    with pytest.raises(ValueError, match="checkpoint holds windows"):
        ShardState.from_bytes(blob, ExecutorConfig((HOPPING,)))
    # what the job wrote before shards: one ServiceWindows per group
    with pytest.raises(ValueError, match="older Tidegauge version"):
        ShardState.from_bytes(filled((TUMBLING,), {T: 1}).to_bytes(), cfg)
    for broken in (b"", b"TGSH", blob[:-1], blob + b"\x00", blob[:20]):
        with pytest.raises(ValueError):
            ShardState.from_bytes(broken, cfg)
    newer = blob[:4] + bytes([blob[4] + 1]) + blob[5:]
    with pytest.raises(ValueError, match="shard state version"):
        ShardState.from_bytes(newer, cfg)


def _old_layout(shard: ShardState, version: int) -> bytes:
    """`shard` as versions 1-3 wrote it: (name, ServiceWindows bytes) per service, then (2+)
    the tracked names, then (3) the shard's id set."""
    parts = [b"TGSH", bytes([version]), struct.pack("<II", shard.shards, len(shard.services))]
    for name, sw in sorted(shard.services.items()):
        raw, blob = name.encode(), sw.to_bytes()
        parts += [struct.pack("<II", len(raw), len(blob)), raw, blob]
    if version >= 2:
        names = json.dumps(dict(sorted(shard.names.items())), separators=(",", ":")).encode()
        parts += [struct.pack("<I", len(names)), names]
    if version >= 3:
        ids = shard.ids.to_bytes() if shard.ids.groups else b""
        parts += [struct.pack("<I", len(ids)), ids]
    return b"".join(parts)


def _same_services(a: ShardState, b: ShardState) -> None:
    assert sorted(a.services) == sorted(b.services)
    for name, sw in a.services.items():
        assert b.services[name].to_bytes() == sw.to_bytes()  # panes, sessions, ids


@pytest.mark.parametrize("specs", [(TUMBLING,), (TUMBLING, HOPPING), (HOPPING, SESSION)])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_shard_state_reads_what_older_versions_wrote(
    specs: tuple[WindowSpec, ...], version: int
) -> None:
    cfg = ExecutorConfig(specs, shards=2)
    shard = _shard(2, specs)
    shard.names = {"api": T, "web": T + 5}
    shard.ids.add(np.array([5, 9], np.uint64), np.array([T, T], np.int64))
    old = ShardState.from_bytes(_old_layout(shard, version), cfg)
    _same_services(old, shard)
    assert old.names == (shard.names if version >= 2 else {})
    assert (old.ids.groups.keys() == {T}) == (version >= 3)
    # written again, it is the current version and reads back the same
    again = ShardState.from_bytes(old.to_bytes(), cfg)
    _same_services(again, old)
    assert again.to_bytes() == old.to_bytes()


def test_shard_state_keeps_the_guards_names() -> None:
    shard = _shard(2, (TUMBLING,))
    shard.names = {"api": T, "web": T + 5}
    back = ShardState.from_bytes(shard.to_bytes(), ExecutorConfig((TUMBLING,), shards=2))
    assert back.names == shard.names and set(back.services) == set(shard.services)


def test_shard_state_keeps_one_id_set_and_gathers_version_2s_per_service_ids() -> None:
    cfg = ExecutorConfig((TUMBLING,), shards=2)
    shard = _shard(2, (TUMBLING,))
    shard.ids.add(np.array([5, 9, 7], np.uint64), np.array([T, T, T + SIZE], np.int64))
    back = ShardState.from_bytes(shard.to_bytes(), cfg)
    assert {h: g.tolist() for h, g in back.ids.groups.items()} == {T: [5, 9], T + SIZE: [7]}
    assert back.to_bytes() == shard.to_bytes()
    # version 2 kept each service's ids in its windows: read, they join the shard's set, each
    # hash XOR its service's key, as the job's de-duplication looks them up (jobs/state)
    old = _shard(2, (TUMBLING,))
    old.services["api"].ids.add(np.array([5, 9], np.uint64), np.array([T, T], np.int64))
    old.services["web"].ids.add(np.array([5], np.uint64), np.array([T + SIZE], np.int64))
    back = ShardState.from_bytes(_old_layout(old, 2), cfg)
    api, web = service_keys(["api", "web"]).tolist()
    assert sorted(back.ids.groups[T].tolist()) == sorted([5 ^ api, 9 ^ api])
    assert back.ids.groups[T + SIZE].tolist() == [5 ^ web]
    assert all(not sw.ids.groups for sw in back.services.values())


def test_shard_state_evicts_closed_panes_and_empty_services() -> None:
    shard = _shard(1, (TUMBLING,))
    before = {name: sorted(sw.panes) for name, sw in shard.services.items()}
    everything = max(p for panes in before.values() for p in panes) + SIZE
    newest = max(before["api"])
    shard.evict(newest)  # W at the newest pane's start: only panes whose window ended go
    for name, panes in before.items():
        left = [p for p in panes if p + SIZE > newest]
        assert sorted(shard.services[name].panes) == left if left else name not in shard.services
    shard.evict(everything)
    assert shard.services == {}
