"""Every stored binary format of Tidegauge, declared once: magic, versions, preamble, owner.

Like datasketches-java's ``PreambleUtil``, this module is the one place that knows what each
stored blob starts with, so a blob found in Redis or in a checkpoint can be named, and a new
format version touches one line here plus its codec. Every format begins with the same
*preamble*: four ASCII magic bytes naming it, then one version byte (``struct`` ``"<4sB"``).
TGFT is the exception: it has no version byte (its layout is version 0 for good; a new layout
needs a new magic). What follows the preamble (the payload layout) belongs to the owning
module, which writes :attr:`Format.preamble` first and reads with :meth:`Format.check` first.

Each format lists the version it writes and the versions it still reads: a reader refuses a
blob of another magic or of a version it does not read with a ``ValueError`` naming the format,
so a checkpoint written by a newer Tidegauge is refused rather than misread.

This is the lowest floor of the project: it imports nothing of Tidegauge, so every layer may
use it (sketches, tidegauge.core, jobs). Pure Python; runs anywhere (driver or executor).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BROKER_TIMES",
    "CHUNK_SUMMARY",
    "FORMATS",
    "HLL",
    "LATE_AGG",
    "MAGIC_SIZE",
    "SEEN_IDS",
    "SESSION_STATE",
    "SHARD_STATE",
    "STATE_LOG",
    "TDIGEST",
    "WINDOW_AGG",
    "WINDOW_STATE",
    "Format",
    "identify",
]

MAGIC_SIZE = 4
"""Bytes of every magic: four ASCII letters or digits."""


@dataclass(frozen=True)
class Format:
    """One stored binary format: its magic, the version it writes and those it still reads.

    ``name`` is what the blob holds, in a few words (used in errors: "TGWA window aggregate");
    ``owner`` the dotted module that encodes and decodes the payload after the preamble.
    ``versioned=False`` (TGFT only) means no version byte follows the magic; ``writes`` and
    ``reads`` are then ``0`` and ``(0,)``.
    """

    magic: bytes
    name: str
    writes: int
    reads: tuple[int, ...]
    owner: str
    description: str
    versioned: bool = True
    #: Bytes of the preamble: 5 (magic and version), 4 without a version byte.
    size: int = field(init=False, repr=False, compare=False)
    #: What every blob of this format starts with: the magic, then the version written.
    preamble: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.magic) != MAGIC_SIZE or not self.magic.isalnum() or not self.magic.isascii():
            raise ValueError(f"a magic is {MAGIC_SIZE} ASCII letters or digits, not {self.magic!r}")
        if self.writes not in self.reads:
            raise ValueError(f"{self} writes version {self.writes} but does not read it")
        if not all(0 <= v <= 255 for v in self.reads) or list(self.reads) != sorted(self.reads):
            raise ValueError(f"{self}: versions are bytes (0-255), ascending: {self.reads}")
        if not self.versioned and self.reads != (0,):
            raise ValueError(f"{self} has no version byte: it writes and reads version 0 only")
        # Plain attributes, not properties: every codec reads them per blob, on hot paths.
        object.__setattr__(self, "size", MAGIC_SIZE + 1 if self.versioned else MAGIC_SIZE)
        preamble = self.magic + bytes([self.writes]) if self.versioned else self.magic
        object.__setattr__(self, "preamble", preamble)

    def __str__(self) -> str:
        return f"{self.magic.decode()} {self.name}"

    @property
    def versions_read(self) -> str:
        """The versions read, for messages and docs: ``"2–3"``, ``"1"`` or ``"1, 3"``."""
        lo, hi = self.reads[0], self.reads[-1]
        if len(self.reads) == 1:
            return str(lo)
        if list(self.reads) == list(range(lo, hi + 1)):
            return f"{lo}\u2013{hi}"
        return ", ".join(map(str, self.reads))

    def check(
        self, data: bytes | bytearray | memoryview, *, foreign: str = "", advice: str = ""
    ) -> int:
        """The version of a blob of this format; ``ValueError`` naming the format otherwise.

        Refused: a blob too short for the preamble, another magic ("not a TGWA window aggregate
        (bad magic b'XXXX')"), a version not in :attr:`reads` ("TGWA window aggregate version 9
        is newer than this tidegauge reads (2–3)"). ``foreign`` is added when the magic is not
        this format's (what such bytes probably are), ``advice`` to every message (what to do).
        Returns 0 for a format without a version byte. The payload starts at :attr:`size`.
        """
        head = bytes(data[: self.size])
        if head == self.preamble:  # the version written: by far the most common blob
            return self.writes
        if head[:MAGIC_SIZE] != self.magic:
            got = (
                f"bad magic {head[:MAGIC_SIZE]!r}"
                if len(head) >= MAGIC_SIZE
                else f"{len(head)} bytes, shorter than its {self.size}-byte preamble"
            )
            raise ValueError(_message(f"not a {self} ({got})", foreign, advice))
        if not self.versioned:
            return 0
        if len(head) < self.size:
            raise ValueError(
                _message(f"{self} truncated: {len(head)} bytes, no version byte", "", advice)
            )
        version = head[MAGIC_SIZE]
        if version not in self.reads:
            how = (
                "newer than"
                if version > self.reads[-1]
                else "older than"
                if version < self.reads[0]
                else "not one"
            )
            text = f"{self} version {version} is {how} this tidegauge reads ({self.versions_read})"
            raise ValueError(_message(text, "", advice))
        return version


def _message(text: str, foreign: str, advice: str) -> str:
    if foreign:
        text += f"; {foreign}"
    return f"{text}: {advice}" if advice else text


# --- the formats, lowest layer first --------------------------------------------------------------

TDIGEST = Format(
    b"TDGT",
    "t-digest",
    writes=4,
    reads=(1, 2, 3, 4),
    owner="sketches.tdigest",
    description="quantile sketch: compression, exact statistics, centroid means and weights",
)
HLL = Format(
    b"TGHL",
    "HyperLogLog",
    writes=2,
    reads=(1, 2),
    owner="sketches.hll",
    description=(
        "distinct-count registers: p, encoding, then their gaps (varints), or dense or deflated "
        "registers (1: sparse entries of 3 bytes instead of gaps)"
    ),
)
WINDOW_AGG = Format(
    b"TGWA",
    "window aggregate",
    writes=4,
    reads=(2, 3, 4),
    owner="tidegauge.core.window_agg",
    description=(
        "one window's state per metric, as (metric, payload) entries; 3: every metric by its "
        "name, 2: fixed"
    ),
)
LATE_AGG = Format(
    b"TGLA",
    "late aggregate",
    writes=1,
    reads=(1,),
    owner="tidegauge.core.late_agg",
    description="late events of one window and service in one batch: count, two t-digests",
)
BROKER_TIMES = Format(
    b"TGFT",
    "broker-time histogram",
    writes=0,
    reads=(0,),
    owner="tidegauge.core.freshness",
    description="a batch's broker timestamps as distinct ms and their counts (no version byte)",
    versioned=False,
)
SEEN_IDS = Format(
    b"TGID",
    "seen-id set",
    writes=1,
    reads=(1,),
    owner="jobs.panes.dedup",
    description="64-bit hashes of a service's accepted event ids, grouped by horizon",
)
SESSION_STATE = Format(
    b"TGSS",
    "session state",
    writes=1,
    reads=(1,),
    owner="jobs.panes.sessions",
    description="a service's open sessions per user and their buckets' aggregates",
)
WINDOW_STATE = Format(
    b"TGSW",
    "window state",
    writes=3,
    reads=(2, 3),
    owner="jobs.panes.windows",
    description="a service's open panes, sessions and seen ids (2: without the ids)",
)
CHUNK_SUMMARY = Format(
    b"TGCS",
    "chunk summary",
    writes=1,
    reads=(1,),
    owner="jobs.summary.chunk",
    description=(
        "a chunk's summaries of the services of one state shard, as tables: panes, late "
        "aggregates, counts, arrivals, ids"
    ),
)
SHARD_STATE = Format(
    b"TGSH",
    "shard state",
    writes=4,
    reads=(1, 2, 3, 4),
    owner="jobs.state.codec",
    description=(
        "a state shard's panes of every service as one table, sessions, tracked names and id "
        "set (3: window state per service; 2: ids per service; 1: no names)"
    ),
)

STATE_LOG = Format(
    b"TGSL",
    "state log file",
    writes=1,
    reads=(1,),
    owner="jobs.state.held",
    description=(
        "every state group's bytes as of one batch, in the checkpoint: a JSON index of "
        "(group, shard, size), then the blobs"
    ),
)

#: Every stored binary format, lowest layer first. A new format is added here, with a magic no
#: other format has.
FORMATS: tuple[Format, ...] = (
    TDIGEST,
    HLL,
    WINDOW_AGG,
    LATE_AGG,
    BROKER_TIMES,
    SEEN_IDS,
    SESSION_STATE,
    WINDOW_STATE,
    CHUNK_SUMMARY,
    SHARD_STATE,
    STATE_LOG,
)

_BY_MAGIC = {f.magic: f for f in FORMATS}
if len(_BY_MAGIC) != len(FORMATS):
    raise ValueError("two stored formats share a magic")


def identify(data: bytes | bytearray | memoryview) -> Format:
    """The format a blob says it is (by its magic); ``ValueError`` if none (debugging aid)."""
    magic = bytes(data[:MAGIC_SIZE])
    found = _BY_MAGIC.get(magic)
    if found is None:
        known = ", ".join(f.magic.decode() for f in FORMATS)
        raise ValueError(f"no stored format has the magic {magic!r} (known: {known})")
    return found
