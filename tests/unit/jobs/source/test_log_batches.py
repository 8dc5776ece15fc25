"""Which records of an offset range a read-committed reader delivers (jobs/source/log_batches.py).

Logs are drawn as one letter per offset:
  d  a non-transactional data record
  1, 2 ...  a transactional record of producer 1, 2 ...
  C1, A1    a commit / abort marker of producer 1 (a control batch of one offset)
Each token is one record batch of one record, except where a test builds bigger batches.
"""

from __future__ import annotations

import random
import struct

import pytest

from jobs.source.log_batches import CommittedRange, LogBatch, LogRecord, control_type


def log_of(drawing: str) -> list[LogBatch]:
    """One batch per token; offsets count from 0."""
    out = []
    for offset, token in enumerate(drawing.split()):
        if token[0] in "CA":
            marker = "commit" if token[0] == "C" else "abort"
            out.append(LogBatch(offset, offset + 1, int(token[1:]), True, marker))  # type: ignore[arg-type]
        elif token == "d":
            out.append(LogBatch(offset, offset + 1, records=[rec(offset)]))
        else:
            out.append(LogBatch(offset, offset + 1, int(token), True, None, [rec(offset)]))
    return out


def rec(offset: int) -> LogRecord:
    return LogRecord(offset, 1_000 + offset, None, b"v%d" % offset)


def read(batches: list[LogBatch], start: int, end: int) -> tuple[list[int], int, int]:
    """Feed batches from the one holding `start` until complete; (offsets, aborted, read to)."""
    rng = CommittedRange(start, end)
    out: list[int] = []
    pos = start
    for b in batches:
        if b.next_offset <= start:
            continue
        if rng.complete(pos):
            break
        out += [r.offset for r in rng.feed(b)]
        pos = b.next_offset
    assert rng.complete(pos), f"log ended with producers {rng.waiting} still waiting"
    return out, rng.aborted, pos


@pytest.mark.parametrize(
    ("drawing", "start", "end", "delivered", "aborted", "read_to"),
    [
        #        0 1 2 3  4 5
        ("d d d d", 0, 4, [0, 1, 2, 3], 0, 4),
        ("d d d d", 1, 3, [1, 2], 0, 3),
        # a committed transaction inside the range
        ("d 1 1 C1 d", 0, 5, [0, 1, 2, 4], 0, 5),
        # an aborted one: its records never come out, and are counted
        ("d 1 1 A1 d", 0, 5, [0, 4], 2, 5),
        # the range ends inside a transaction: read on to its marker, deliver only the range
        ("d 1 1 d C1 d", 0, 2, [0, 1], 0, 5),
        ("d 1 1 d A1 d", 0, 2, [0], 1, 5),
        # the range starts after the transaction's first records: the earlier ones are not ours
        ("1 1 d 1 C1 d", 2, 6, [2, 3, 5], 0, 6),
        # a marker whose records all came before the range changes nothing
        ("1 1 C1 d", 2, 4, [3], 0, 4),
        # a range of markers only is empty and needs no look-ahead
        ("d C1 A2", 1, 3, [], 0, 3),
        # two producers interleaved, one commits, one aborts
        ("1 2 1 2 A2 C1 d", 0, 7, [0, 2, 6], 2, 7),
        # one producer, two transactions in a row: each marker ends its own
        ("1 A1 1 C1", 0, 4, [2], 1, 4),
        # a transaction that starts at the end of the range is not looked at
        ("d d 1 1 C1", 0, 2, [0, 1], 0, 2),
    ],
)
def test_committed_range_table(
    drawing: str, start: int, end: int, delivered: list[int], aborted: int, read_to: int
) -> None:
    out, n_aborted, pos = read(log_of(drawing), start, end)
    assert out == delivered
    assert n_aborted == aborted
    assert pos == read_to


def test_a_batch_straddling_the_range_delivers_only_its_part() -> None:
    #  offsets 0..9 in one batch; range [3, 7)
    batch = LogBatch(0, 10, records=[rec(i) for i in range(10)])
    assert [r.offset for r in CommittedRange(3, 7).feed(batch)] == [3, 4, 5, 6]


def test_compacted_gaps_keep_their_offsets() -> None:
    # a batch whose records 2..4 were compacted away still ends at its next offset
    batch = LogBatch(0, 8, records=[rec(0), rec(1), rec(5), rec(6), rec(7)])
    rng = CommittedRange(1, 6)
    assert [r.offset for r in rng.feed(batch)] == [1, 5]
    assert rng.complete(8)


@pytest.mark.parametrize("seed", range(20))
def test_committed_range_equals_a_whole_log_oracle(seed: int) -> None:
    """Any split of a log into consecutive ranges delivers exactly its committed records, once."""
    rng = random.Random(seed)
    tokens: list[str] = []
    open_txn: set[int] = set()
    for _ in range(200):
        roll = rng.random()
        if roll < 0.4:
            tokens.append("d")
        elif roll < 0.75:
            pid = rng.randint(1, 3)
            tokens.append(str(pid))
            open_txn.add(pid)
        elif open_txn:
            pid = rng.choice(sorted(open_txn))
            tokens.append(("C" if rng.random() < 0.6 else "A") + str(pid))
            open_txn.discard(pid)
    for pid in sorted(open_txn):  # the planner never reads into an open transaction
        tokens.append(f"C{pid}")
    log = log_of(" ".join(tokens))
    # oracle: a record counts if it is plain data or its producer's next marker is a commit
    expected = set()
    for i, t in enumerate(tokens):
        if t == "d":
            expected.add(i)
        elif t[0] not in "CA":
            marker = next(u for u in tokens[i + 1 :] if u[0] in "CA" and u[1:] == t)
            if marker[0] == "C":
                expected.add(i)
    cuts = sorted({0, len(tokens), *rng.sample(range(1, len(tokens)), 6)})
    seen: list[int] = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        out, _, _ = read(log, start, end)
        assert all(start <= o < end for o in out)
        seen += out
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(
    ("key", "marker"),
    [
        (struct.pack(">hh", 0, 0), "abort"),
        (struct.pack(">hh", 0, 1), "commit"),
        (struct.pack(">hh", 0, 5), None),  # a control type Kafka may add later
        (b"\x00", None),
        (None, None),
    ],
)
def test_control_type(key: bytes | None, marker: str | None) -> None:
    assert control_type(key) == marker
