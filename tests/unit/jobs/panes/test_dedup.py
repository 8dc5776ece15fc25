"""De-duplication by event id (jobs/panes/dedup.py): the rule, the id state, its size and its hash.

The state function with de-duplication must give exactly what it gives without it for the same
records with the duplicates taken out beforehand by a plain replay of the rule (docs/time.md),
however the records are cut into chunks; the id state must cost `ID_BYTES` per id; and the
collision figure the docs state must be the birthday bound of the 64-bit hash.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.panes.dedup import (
    ID_BYTES,
    SeenIds,
    collision_probability,
    duplicate_windows,
    first_occurrences,
    horizons,
    id_hashes,
)
from jobs.parse.parser import RecordKind
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import summarise, summary_frame
from tests.fixtures import S, T
from tests.unit.jobs.fixtures import (
    HOPPING,
    SESSION,
    TUMBLING,
    FakeGroupState,
    chunks_of,
    comparable,
    parsed,
    state_outputs,
)
from tidegauge.core.windows import WindowSpec

REPO = Path(__file__).resolve().parents[4]


def test_seen_ids_hold_until_their_horizon_and_round_trip() -> None:
    ids = SeenIds()
    ids.add(np.array([5, 3, 9], dtype=np.uint64), np.array([100, 100, 200]))
    ids.add(np.array([7], dtype=np.uint64), np.array([100]))
    probe = np.array([3, 4, 5, 7, 9, 10], dtype=np.uint64)
    assert ids.contains(probe).tolist() == [True, False, True, True, True, False]
    assert ids.groups[100].tolist() == [3, 5, 7]  # kept sorted
    back = SeenIds.from_bytes(ids.to_bytes())
    assert back.contains(probe).tolist() == ids.contains(probe).tolist()
    ids.evict(100)  # horizon 100 <= watermark 100: those windows are all closed
    assert ids.contains(probe).tolist() == [False, False, False, False, True, False]
    assert len(ids) == 1
    for broken in (b"", b"TGID", ids.to_bytes()[:-1], b"XXXX" + ids.to_bytes()[4:]):
        with pytest.raises(ValueError):
            SeenIds.from_bytes(broken)


def test_state_costs_eight_bytes_per_id() -> None:
    n = 1_000_000
    ids = SeenIds()
    hashes = id_hashes(np.array([f"7-{i:09d}" for i in range(n)], dtype=object))
    ids.add(hashes, T + (np.arange(n) // 100_000) * 10 * S)  # 10 horizon groups
    blob = ids.to_bytes()
    assert ID_BYTES == 8
    assert len(blob) <= n * ID_BYTES + 10 * 12 + 9
    assert len(ids) == n  # no two of a million generator ids share a hash


def test_collision_probability_is_the_birthday_bound_the_docs_state() -> None:
    p = collision_probability(1_000_000)
    assert p == pytest.approx(1_000_000 * 999_999 / 2**65, rel=1e-6)
    assert 2.7e-8 < p < 2.72e-8
    time_md = (REPO / "docs" / "time.md").read_text()
    assert re.search(r"2\.7\s*×\s*10⁻⁸", time_md), "docs/time.md must state the figure"
    assert f"{ID_BYTES} bytes per id" in time_md


def test_hashes_spread_evenly() -> None:
    h = id_hashes(np.array([f"3-{i:09d}" for i in range(200_000)], dtype=object))
    for shift in (0, 32, 56):  # low, middle and top bits
        buckets = np.bincount(
            ((h >> np.uint64(shift)) & np.uint64(255)).astype(np.int64), minlength=256
        )
        assert buckets.min() > 0.85 * len(h) / 256 and buckets.max() < 1.15 * len(h) / 256


def test_horizon_is_the_last_window_end_of_any_spec() -> None:
    e = np.array([T + 1, T + 9_999, T + 10_000], dtype=np.int64)
    user = np.array([True, False, True])
    assert horizons(e, user, (TUMBLING,)).tolist() == [T + 10 * S, T + 10 * S, T + 20 * S]
    assert horizons(e, user, (TUMBLING, HOPPING)).tolist() == [T + 30 * S, T + 30 * S, T + 40 * S]
    session = horizons(e, user, (TUMBLING, SESSION)).tolist()
    assert session == [T + 1 + 30 * S, T + 10 * S, T + 10_000 + 30 * S]


def test_dedup_keeps_ids_as_long_as_a_peak_can_take_the_event() -> None:
    sliding = WindowSpec.sliding(6_000, 2_000, 100)
    at = np.array([0, 1_999, 2_000], np.int64)
    got = horizons(at, np.ones(3, bool), [WindowSpec.tumbling(2_000), sliding])
    assert got.tolist() == [8_000, 8_000, 10_000]  # last rolling end + one step


def test_first_occurrence_wins() -> None:
    h = np.array([4, 2, 4, 4, 1, 2], dtype=np.uint64)
    assert first_occurrences(h).tolist() == [True, True, False, False, True, False]


@pytest.mark.parametrize("repeats", [0, 1, 50])
def test_first_occurrences_match_a_replay(repeats: int) -> None:
    """Chunks without repeats take a shortcut; with a few or many, positions are found."""
    rng = np.random.default_rng(repeats)
    h = rng.integers(0, 2**64, 5_000, dtype=np.uint64)
    for _ in range(repeats):
        h[rng.integers(0, len(h))] = h[rng.integers(0, len(h))]
    seen: set[int] = set()
    want = []
    for v in h.tolist():
        want.append(v not in seen)
        seen.add(v)
    assert first_occurrences(h).tolist() == want
    assert first_occurrences(h[:0]).tolist() == []
    assert first_occurrences(h[:1]).tolist() == [True]


def _brute_windows(
    events: list[tuple[int, bool]], specs: tuple[WindowSpec, ...], watermark: int
) -> Counter[tuple[str, int]]:
    out: Counter[tuple[str, int]] = Counter()
    for e, has_user in events:
        for spec in specs:
            if spec.kind == "session":
                if has_user and e + spec.gap_ms > watermark:
                    out[(spec.key, e - e % spec.size_ms)] += 1
                continue
            for start in range(e - e % spec.slide_ms, e - spec.size_ms, -spec.slide_ms):
                if start + spec.size_ms > watermark:
                    out[(spec.key, start)] += 1
    return out


@pytest.mark.parametrize("seed", range(5))
def test_duplicate_windows_by_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    e = T + rng.integers(0, 60 * S, 300)
    user = rng.random(300) < 0.8
    specs = (TUMBLING, HOPPING, SESSION)
    watermark = T + 25 * S
    got = duplicate_windows(e, user, specs, watermark)
    assert got == _brute_windows(
        list(zip(e.tolist(), user.tolist(), strict=True)), specs, watermark
    )


def _with_repeats(rng: np.random.Generator, pdf: pd.DataFrame, pool: int) -> pd.DataFrame:
    """The rows with event ids drawn from a small pool, so ids repeat within and across batches.

    Rows that share an id keep their own event times: the rule does not compare them.
    """
    out = pdf.copy()
    out["event_id"] = [f"id{i}" for i in rng.integers(0, pool, len(out))]
    return out


def _replay(
    batches: list[pd.DataFrame], specs: tuple[WindowSpec, ...], watermarks: list[int]
) -> tuple[list[pd.DataFrame], list[Counter[tuple[str, str, int]]]]:
    """The rule of docs/time.md, row by row: each batch without its duplicates, and each
    batch's duplicates per (service, spec key, window start)."""
    held: dict[tuple[str, str], int] = {}
    out, per_batch = [], []
    for pdf, wm in zip(batches, watermarks, strict=True):
        dups: Counter[tuple[str, str, int]] = Counter()
        keep = []
        for row in pdf.sort_values(["partition", "offset"]).to_dict("records"):
            if row["kind"] != RecordKind.EVENT:
                keep.append(row)
                continue
            e, has_user = int(row["event_ms"]), row["user_id"] is not None
            horizon = int(horizons(np.array([e]), np.array([has_user]), specs)[0])
            key = (row["service"], row["event_id"])
            if horizon > wm and held.get(key, wm) > wm:
                for (spec, start), n in _brute_windows([(e, has_user)], specs, wm).items():
                    dups[(row["service"], spec, start)] += n
                continue
            if horizon > wm:
                held[key] = horizon
            keep.append(row)
        out.append(pd.DataFrame(keep, columns=pdf.columns))
        per_batch.append(dups)
    return out, per_batch


@pytest.mark.parametrize(
    "specs", [(TUMBLING,), (TUMBLING, HOPPING), (TUMBLING, SESSION)], ids=lambda s: len(s)
)
@pytest.mark.parametrize("seed", range(3))
def test_dedup_equals_dropping_the_duplicates_first(
    specs: tuple[WindowSpec, ...], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    on = ExecutorConfig(specs, allowed_lateness_ms=20 * S, late_events_max=25)
    off = ExecutorConfig(specs, allowed_lateness_ms=20 * S, late_events_max=25, dedup=False)
    batches, watermarks = [], []
    watermark = 0
    for b in range(4):
        now = T + b * 40 * S
        batches.append(_with_repeats(rng, parsed(rng, 600, now), pool=250))
        watermarks.append(watermark)
        watermark = max(watermark, int(batches[-1]["event_ms"].max()) - on.allowed_lateness_ms)
    kept, dups = _replay(batches, specs, watermarks)
    assert sum(sum(d.values()) for d in dups) > 100
    on_state, off_state = FakeGroupState(0), FakeGroupState(0)
    for pdf, clean, wm, batch_dups in zip(batches, kept, watermarks, dups, strict=True):
        proc = wm + 1
        chunked = [summary_frame(summarise(c, wm, proc, on)) for c in chunks_of(pdf, rng)]
        got = state_outputs(chunked, on, wm, on_state)
        want = state_outputs([summary_frame(summarise(clean, wm, proc, off))], off, wm, off_state)
        is_dup = got["kind"].isin(["duplicate", "duplicate_events"])
        exact_got, aggs_got = comparable(got[~is_dup])
        exact_want, aggs_want = comparable(want)
        assert exact_got == exact_want
        for key, agg in aggs_want.items():
            other = aggs_got[key].latency
            if agg.latency == other:
                continue
            for q in (0.5, 0.99):  # two estimates: each within the rank error of the truth
                rank = agg.latency.cdf(other.quantile(q))
                assert abs(rank - q) <= 2 * (0.01 + 1 / agg.latency.count), key
        rows = got[got["kind"] == "duplicate"]
        counted = Counter(
            {
                (s, k, int(w)): int(n)
                for s, k, w, n in zip(
                    rows["service"], rows["spec"], rows["window_start"], rows["count"], strict=True
                )
            }
        )
        assert counted == batch_dups
        dropped = len(pdf[pdf["kind"] == RecordKind.EVENT]) - len(
            clean[clean["kind"] == RecordKind.EVENT]
        )
        assert got.loc[got["kind"] == "duplicate_events", "count"].sum() == dropped
    assert on_state.value is not None
