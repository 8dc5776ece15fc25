"""The stored formats declared once (sketches/preamble.py), and every codec using them.

Each codec's bytes must start with its declared preamble, and each must refuse another magic or a
version it does not read with an error naming the format.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.panes.dedup import SeenIds
from jobs.panes.sessions import Sessions
from jobs.panes.windows import ServiceWindows
from jobs.state import held as state_log
from jobs.state.codec import ShardState
from jobs.summary.chunk import ChunkSummary
from jobs.summary.settings import ExecutorConfig
from sketches import preamble
from sketches.hll import HyperLogLog
from sketches.preamble import FORMATS, Format, identify
from sketches.tdigest import TDigest
from tidegauge.core.freshness import encode_times, merge_times
from tidegauge.core.late_agg import LateAgg
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

ROOT = Path(__file__).resolve().parents[3]
TUMBLING = WindowSpec.parse("10s")
SESSION = WindowSpec.from_key("s30000-10000")


@dataclass(frozen=True)
class Codec:
    """One format's codec: a small instance's bytes, and its decoder."""

    fmt: Format
    encode: Callable[[], bytes]
    decode: Callable[[bytes], Any]
    #: Where the encoder lives (must be the format's declared owner).
    module: str


def _digest() -> bytes:
    d = TDigest()
    d.update([1.0, 2.0, 40.0])
    return d.to_bytes()


def _hll() -> bytes:
    s = HyperLogLog()
    s.update(["a", "b"])
    return s.to_bytes()


def _window_agg() -> bytes:
    a = WindowAgg()
    a.add(np.array([1.0, 2.0]), np.array([200, 503]), np.array(["a", "b"], dtype=object))
    return a.to_bytes()


def _late_agg() -> bytes:
    late = LateAgg()
    late.add(np.array([5.0, 7.0]), 3.0)
    return late.to_bytes()


def _seen_ids() -> bytes:
    ids = SeenIds()
    ids.add(np.array([3, 1], np.uint64), np.array([10_000, 20_000], np.int64))
    return ids.to_bytes()


def _service_windows() -> bytes:
    sw = ServiceWindows((TUMBLING,))
    users = np.array(["a", None], dtype=object)
    sw.add(np.array([1_000, 2_000]), np.array([5.0, 6.0]), np.array([200, 200]), users, 0)
    return sw.to_bytes()


CODECS = [
    Codec(preamble.TDIGEST, _digest, TDigest.from_bytes, TDigest.__module__),
    Codec(preamble.HLL, _hll, HyperLogLog.from_bytes, HyperLogLog.__module__),
    Codec(preamble.WINDOW_AGG, _window_agg, WindowAgg.from_bytes, WindowAgg.__module__),
    Codec(preamble.LATE_AGG, _late_agg, LateAgg.from_bytes, LateAgg.__module__),
    Codec(
        preamble.BROKER_TIMES,
        lambda: encode_times([1_000, 1_000, 2_000]),
        lambda b: merge_times([b]),
        encode_times.__module__,
    ),
    Codec(preamble.SEEN_IDS, _seen_ids, SeenIds.from_bytes, SeenIds.__module__),
    Codec(
        preamble.SESSION_STATE,
        lambda: Sessions(SESSION).to_bytes(),
        lambda b: Sessions.from_bytes(b, SESSION),
        Sessions.__module__,
    ),
    Codec(
        preamble.WINDOW_STATE,
        _service_windows,
        lambda b: ServiceWindows.from_bytes(b, (TUMBLING,)),
        ServiceWindows.__module__,
    ),
    Codec(
        preamble.CHUNK_SUMMARY,
        lambda: ChunkSummary(10_000, None).to_bytes(),
        ChunkSummary.from_bytes,
        ChunkSummary.__module__,
    ),
    Codec(
        preamble.SHARD_STATE,
        lambda: ShardState(1, {}, {"api": 5}).to_bytes(),
        lambda b: ShardState.from_bytes(b, ExecutorConfig((TUMBLING,))),
        ShardState.__module__,
    ),
    Codec(
        preamble.STATE_LOG,
        lambda: state_log.to_bytes({("event", 0): b"x"}),
        state_log.from_bytes,
        state_log.__name__,
    ),
]
IDS = [c.fmt.magic.decode() for c in CODECS]


# --- the declarations ----------------------------------------------------------------------------


def test_every_format_is_declared_once_with_a_unique_magic() -> None:
    assert [c.fmt for c in CODECS] == list(FORMATS)  # every format has a codec below, once
    magics = [f.magic for f in FORMATS]
    assert len(set(magics)) == len(magics) == 11
    assert len({f.name for f in FORMATS}) == len(FORMATS)
    assert sorted(m.decode() for m in magics) == sorted(
        ["TDGT", "TGHL", "TGWA", "TGLA", "TGFT", "TGCS", "TGSW", "TGSS", "TGID", "TGSH", "TGSL"]
    )


@pytest.mark.parametrize("fmt", FORMATS, ids=[f.magic.decode() for f in FORMATS])
def test_each_format_declares_versions_an_owner_and_a_description(fmt: Format) -> None:
    assert fmt.writes in fmt.reads and fmt.reads == tuple(sorted(fmt.reads))
    assert fmt.description and "\n" not in fmt.description
    importlib.import_module(fmt.owner)  # a real module
    assert fmt.preamble[:4] == fmt.magic and len(fmt.preamble) == fmt.size
    if fmt.versioned:
        assert fmt.preamble[4] == fmt.writes


def test_only_the_freshness_histogram_has_no_version_byte() -> None:
    assert [f.magic for f in FORMATS if not f.versioned] == [b"TGFT"]
    assert preamble.BROKER_TIMES.preamble == b"TGFT"
    assert preamble.BROKER_TIMES.check(b"TGFT" + bytes(4)) == 0


def test_preamble_imports_nothing_of_the_project() -> None:
    tree = ast.parse((ROOT / "sketches" / "preamble.py").read_text())
    modules = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert modules == {"__future__", "dataclasses"}


def test_no_codec_writes_a_magic_of_its_own() -> None:
    """Magics are bytes only in sketches/preamble.py (comments and docstrings may name them)."""
    pattern = re.compile(rb"(TG|TD)[A-Z0-9]{2}")
    found = []
    for pkg in ("sketches", "tidegauge", "jobs", "dashboard", "cli"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path == ROOT / "sketches" / "preamble.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                    if pattern.fullmatch(node.value):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert found == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"magic": b"TGW"}, "4 ASCII letters or digits"),
        ({"magic": b"TG-A"}, "4 ASCII letters or digits"),
        ({"writes": 4}, "writes version 4 but does not read it"),
        ({"reads": (3, 2)}, "ascending"),
        ({"reads": (3, 256), "writes": 3}, "bytes"),
        ({"versioned": False}, "no version byte"),
    ],
)
def test_a_bad_declaration_is_refused(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "magic": b"TGXX",
        "name": "example",
        "writes": 3,
        "reads": (2, 3),
        "owner": "sketches.preamble",
        "description": "an example",
    }
    with pytest.raises(ValueError, match=message):
        Format(**(fields | kwargs))


@pytest.mark.parametrize(
    ("reads", "text"), [((1,), "1"), ((2, 3), "2–3"), ((1, 2, 3), "1–3"), ((1, 3), "1, 3")]
)
def test_versions_read_are_shown_as_a_range_or_a_list(reads: tuple[int, ...], text: str) -> None:
    fmt = Format(b"TGXX", "example", reads[-1], reads, "sketches.preamble", "an example")
    assert fmt.versions_read == text


def test_identify_names_the_format_of_a_blob() -> None:
    for codec in CODECS:
        assert identify(codec.encode()) is codec.fmt
    with pytest.raises(ValueError, match=r"no stored format has the magic b'XXXX' \(known: TDGT"):
        identify(b"XXXX\x01")


# --- check(): the errors ------------------------------------------------------------------------

WA = preamble.WINDOW_AGG


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a TGWA window aggregate (0 bytes, shorter than its 5-byte preamble)"),
        (b"TGW", "not a TGWA window aggregate (3 bytes, shorter than its 5-byte preamble)"),
        (b"XXXX\x03", "not a TGWA window aggregate (bad magic b'XXXX')"),
        (b"TGLA\x01", "not a TGWA window aggregate (bad magic b'TGLA')"),
        (b"TGWA", "TGWA window aggregate truncated: 4 bytes, no version byte"),
        (b"TGWA\x09", "TGWA window aggregate version 9 is newer than this tidegauge reads (2–4)"),
        (b"TGWA\x01", "TGWA window aggregate version 1 is older than this tidegauge reads (2–4)"),
    ],
)
def test_check_refuses_with_a_message_naming_the_format(data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as err:
        WA.check(data)
    assert str(err.value) == message


def test_check_returns_the_version_of_every_version_read() -> None:
    assert WA.check(b"TGWA\x02") == 2
    assert WA.check(memoryview(b"TGWA\x03rest")) == 3
    gap = Format(b"TGXX", "example", 3, (1, 3), "sketches.preamble", "an example")
    with pytest.raises(ValueError, match="version 2 is not one this tidegauge reads"):
        gap.check(b"TGXX\x02")


def test_check_adds_what_foreign_bytes_are_and_what_to_do() -> None:
    with pytest.raises(ValueError) as err:
        WA.check(b"{}", foreign="written by an older release", advice="start afresh")
    assert str(err.value) == (
        "not a TGWA window aggregate (2 bytes, shorter than its 5-byte preamble); "
        "written by an older release: start afresh"
    )
    with pytest.raises(ValueError) as err:
        WA.check(b"TGWA\x07", foreign="written by an older release", advice="start afresh")
    assert str(err.value).endswith("reads (2–4): start afresh")  # the magic was ours


# --- every codec --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_each_codec_writes_its_declared_preamble_and_reads_it_back(codec: Codec) -> None:
    blob = codec.encode()
    assert blob.startswith(codec.fmt.preamble)
    assert codec.fmt.check(blob) == codec.fmt.writes
    assert codec.module == codec.fmt.owner
    codec.decode(blob)  # round trip


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_each_codec_refuses_another_magic_naming_its_format(codec: Codec) -> None:
    blob = codec.encode()
    with pytest.raises(ValueError, match=re.escape(f"not a {codec.fmt} (bad magic b'XXXX')")):
        codec.decode(b"XXXX" + blob[4:])
    with pytest.raises(ValueError, match=re.escape(f"not a {codec.fmt} (0 bytes")):
        codec.decode(b"")


@pytest.mark.parametrize("codec", [c for c in CODECS if c.fmt.versioned], ids=lambda c: str(c.fmt))
def test_each_codec_refuses_a_newer_version(codec: Codec) -> None:
    blob = codec.encode()
    newer = codec.fmt.reads[-1] + 1
    message = (
        f"{codec.fmt} version {newer} is newer than this tidegauge reads "
        f"({codec.fmt.versions_read})"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        codec.decode(blob[:4] + bytes([newer]) + blob[5:])
