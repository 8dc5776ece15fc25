"""Packed (sketches/packed.py): fields and runs read from many blobs at once equal slicing each."""

from __future__ import annotations

import numpy as np
import pytest

from sketches import packed
from sketches.packed import Packed


@pytest.mark.parametrize("joined_from", [0, 1 << 30])  # runs joined a slice each, or indexed
@pytest.mark.parametrize("size", [3, 40, 5_000])
def test_runs_equal_each_blobs_slice_and_refuse_to_run_past_the_end(
    joined_from: int, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packed, "_JOINED_FROM", joined_from)
    rng = np.random.default_rng(size)
    blobs = [rng.bytes(int(n)) for n in rng.integers(8, 8 + 8 * size, 50)]
    blobs[7] = b""  # an empty blob, an empty run
    p = Packed(blobs)
    counts = np.array([(len(b) - 4) // 4 if b else 0 for b in blobs], np.int64)
    got = p.runs(p.starts + np.minimum(p.sizes, 4), counts, "<f4")
    want = np.concatenate(
        [np.frombuffer(b[4 : 4 + 4 * int(c)], "<f4") for b, c in zip(blobs, counts, strict=True)]
    )
    assert got.tobytes() == want.tobytes()
    got[:1] = 0  # writable, whichever way it was read
    with pytest.raises(IndexError, match="past the end"):
        p.runs(p.starts[-1:] + 4, counts[-1:] + 1, "<f4")
