"""The chaos soak, three minutes of it (tests/chaos.py; `benchmarks/bench_chaos.py` runs 30).

The whole pipeline at 1,000 events/s while a seeded schedule kills the job (SIGKILL), stops it
as a supervisor would (SIGTERM), pauses the broker, restarts Redis and kills the job's Python
workers, one fault at a time, every kind at least once. Afterwards every window in Redis must
equal the ground truth replayed over the batches the job committed (counts, late rows,
duplicates; dead letters), and the pipeline must have committed new batches after each fault.
"""

from __future__ import annotations

from pathlib import Path

from tests.chaos import FAULTS, Soak


def test_three_minutes_of_faults_lose_nothing_and_count_nothing_twice(tmp_path: Path) -> None:
    result = Soak(tmp_path / "soak", seconds=180, rate=1_000, seed=7, gap_s=(18.0, 26.0)).run()
    print(result.table())
    assert {f.kind for f in result.faults} == set(FAULTS), result.table()
    assert all(f.recovered_s is not None for f in result.faults), result.table()
    assert result.events > 150_000 and result.windows > 50
    assert result.mismatches == [], "\n".join(result.mismatches[:30])
