"""The state log (jobs/state/held.py): what a batch reads is what the batch before it left."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.state.held import LOG_DIR, HeldState, StateLog, StateMissing, read_file, write_file

A = {("event", 0): b"zero", ("event", 1): b"", ("dead", 0): b'{"v": 1}'}
B = {("event", 0): b"zero, then more", ("dead", 0): b'{"v": 1, "n": 2}'}


def _commit(checkpoint: Path, batch_id: int) -> None:
    """What Spark writes when it has committed a batch."""
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch_id)).write_text("v1\n{}")


def test_a_file_reads_back_every_group_byte_for_byte(tmp_path: Path) -> None:
    write_file(tmp_path, 7, A)
    assert read_file(tmp_path / "7") == A
    write_file(tmp_path, 8, {})
    assert read_file(tmp_path / "8") == {}
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]


def test_a_cut_or_foreign_file_is_refused(tmp_path: Path) -> None:
    write_file(tmp_path, 1, A)
    data = (tmp_path / "1").read_bytes()
    (tmp_path / "1").write_bytes(data[:-2])
    with pytest.raises(ValueError, match="its index says"):
        read_file(tmp_path / "1")
    (tmp_path / "2").write_bytes(b"PK\x03\x04 not ours at all")
    with pytest.raises(ValueError, match="2: not a TGSL state log file"):
        read_file(tmp_path / "2")


def test_each_batch_reads_the_state_of_the_batch_before(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path))
    assert log.before(0) == {}  # a new checkpoint
    log.commit(0, A)
    _commit(tmp_path, 0)
    assert log.before(1) == A
    log.commit(1, B)
    _commit(tmp_path, 1)
    # a new process (a restart) reads the file of the batch before
    assert StateLog(str(tmp_path)).before(2) == B


def test_a_redone_batch_reads_what_its_first_run_read(tmp_path: Path) -> None:
    """Spark redoes a batch it had not committed: the state it starts from is the same."""
    log = StateLog(str(tmp_path))
    log.commit(0, A)
    _commit(tmp_path, 0)
    state = log.before(1)
    state[("event", 0)] = b"changed by the batch"
    log.commit(1, state)  # its results were written, then the process died before Spark's commit
    assert log.before(1) == A
    assert StateLog(str(tmp_path)).before(1) == A


def test_what_a_batch_changes_is_not_the_log_until_committed(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path))
    log.commit(0, A)
    state = log.before(1)
    state.pop(("dead", 0))
    assert log.before(1) == A


def test_only_the_newest_files_are_kept(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path))
    for b in range(10):
        log.commit(b, {("event", 0): str(b).encode()})
        _commit(tmp_path, b)
    assert sorted(int(f.name) for f in (tmp_path / LOG_DIR).iterdir()) == [7, 8, 9]


def test_committed_batches_without_their_state_are_an_error(tmp_path: Path) -> None:
    _commit(tmp_path, 4)
    with pytest.raises(StateMissing, match="no state for the committed batches up to 4"):
        StateLog(str(tmp_path)).before(5)
    write_file(tmp_path / LOG_DIR, 2, A)
    with pytest.raises(StateMissing, match="newest state is of batch 2, but batch 4"):
        StateLog(str(tmp_path)).before(5)


def test_without_a_checkpoint_the_state_is_held_in_memory(tmp_path: Path) -> None:
    log = StateLog(None)
    assert log.before(0) == {}
    log.commit(0, A)
    assert log.before(1) == A
    with pytest.raises(StateMissing):
        log.before(5)


def test_held_state_behaves_as_sparks_group_state() -> None:
    held = HeldState(1234)
    assert not held.exists and not held.changed and held.getCurrentWatermarkMs() == 1234
    with pytest.raises(ValueError):
        _ = held.get
    held.update((b"abc",))
    assert held.exists and held.get == (b"abc",) and held.changed
    held.remove()
    assert not held.exists
