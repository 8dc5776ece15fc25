"""`tidegauge query status` output (tidegauge/query.py), with the store read replaced: no Redis."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from tidegauge import query
from tidegauge.core.retention import Retention
from tidegauge.core.store import JobStatus, Keys, StoredRetention
from tidegauge.core.windows import WindowSpec

pytestmark = pytest.mark.unit

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z

FRESH = {
    "batch_id": 12,
    "commit_time": T + 5_400,
    "records": 3000,
    "p50_ms": 120,
    "p99_ms": 480,
    "max_ms": 61_900,
}


def status(**kw: object) -> JobStatus:
    base: dict[str, object] = dict(
        batch_id=12,
        batch_time=T + 5_000,
        watermark=T - 30_000,
        input_rows=3000,
        offsets={"0": 5},
        latest_offsets={"0": 9},
        batch_duration_ms=400,
        query_id="q",
        status_time=T + 5_400,
    )
    base.update(kw)
    return JobStatus(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("freshness", "line"),
    [
        (FRESH, "freshness p50 120ms, p99 480ms, max 1m1s900ms (batch 12, 3,000 records)"),
        (
            {**FRESH, "records": 1, "p50_ms": 0, "p99_ms": 0, "max_ms": 0},
            "freshness p50 0s, p99 0s, max 0s (batch 12, 1 record)",
        ),
        # the broker's clock ahead of the job's: the sign stays, nothing is clamped
        (
            {**FRESH, "p50_ms": -250, "p99_ms": -20, "max_ms": 30},
            "freshness p50 -250ms, p99 -20ms, max 30ms (batch 12, 3,000 records)",
        ),
        (None, "freshness: no batch with records yet"),
    ],
)
def test_format_freshness(freshness: dict[str, int] | None, line: str) -> None:
    assert query.format_freshness(freshness) == line


def _run_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], st: JobStatus, **kw: Any
) -> tuple[int, str]:
    batches = kw.pop("batches", [])
    kept = kw.pop("retention", None)
    monkeypatch.setattr(query.store, "read_status", lambda r, keys: st)
    monkeypatch.setattr(query.store, "read_retention", lambda r, keys: kept)
    monkeypatch.setattr(query.store, "read_batches", lambda r, keys, limit=None: batches)
    args = argparse.Namespace(**({"json": False, "max_age": None} | kw))
    code = query._status(None, Keys("tg"), args, T + 6_000)  # type: ignore[arg-type]
    return code, capsys.readouterr().out


def test_status_text_has_the_freshness_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    batches = [{"duplicates": 3}, {"duplicates": None}, {}, {"duplicates": 1_200}]
    code, out = _run_status(monkeypatch, capsys, status(freshness=FRESH), batches=batches)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "batch 12 at 2026-01-01T00:00:05.000Z (600ms ago), 3000 rows"
    assert lines[1] == "watermark 2025-12-31T23:59:30.000Z (delay 36s)"
    assert lines[2] == "freshness p50 120ms, p99 480ms, max 1m1s900ms (batch 12, 3,000 records)"
    assert lines[3] == "duplicates dropped: 1,203 in the last 4 batches"
    assert lines[4] == "service names over --max-services: none in the last 4 batches"
    assert lines[5] == "offsets p0=5"


def test_status_text_says_what_overflowed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    batches = [
        {"overflow": {"names": 2_300, "events": 2_400}},
        {"overflow": None},
        {"overflow": {"names": 120, "events": 130}},
    ]
    _, out = _run_status(monkeypatch, capsys, status(freshness=FRESH), batches=batches)
    assert (
        "service names over --max-services: 120 in the last batch, up to 2,300 per batch; "
        "2,530 events counted under '(other)' in the last 3 batches"
    ) in out.splitlines()
    _, out = _run_status(monkeypatch, capsys, status(), batches=batches, json=True)
    assert json.loads(out)["overflow"] == {
        "batches": 3,
        "last_names": 120,
        "max_names": 2_300,
        "events": 2_530,
    }


def test_status_text_before_any_batch_with_records(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = _run_status(monkeypatch, capsys, status())
    assert "freshness: no batch with records yet" in out.splitlines()


def test_status_json_carries_freshness_as_stored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = _run_status(monkeypatch, capsys, status(freshness=FRESH), json=True)
    doc = json.loads(out)
    assert doc["freshness"] == FRESH
    assert doc["age_ms"] == 6_000 - 5_400
    _, out = _run_status(monkeypatch, capsys, status(), json=True)
    assert json.loads(out)["freshness"] is None


@pytest.mark.parametrize(
    ("in_force", "budget", "line"),
    [
        ("6h,1m:7d,1h:90d", None, "retention 6h,1m:7d,1h:90d"),
        ("6h,1m:7d,1h:90d", 2 << 30, "retention 6h,1m:7d,1h:90d (within --retention-size 2GB)"),
        (
            "16m,1m:7h29m,1h:4d",
            2 << 30,
            "retention 16m,1m:7h29m,1h:4d (--retention 6h,1m:7d,1h:90d shortened to fit 2GB)",
        ),
    ],
)
def test_status_says_which_retention_is_in_force_and_why(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    in_force: str,
    budget: int | None,
    line: str,
) -> None:
    kept = StoredRetention(
        Retention.parse(in_force),
        WindowSpec.tumbling(10_000),
        T,
        (),
        Retention.parse("6h,1m:7d,1h:90d") if budget else None,
        budget,
    )
    code, out = _run_status(monkeypatch, capsys, status(), retention=kept)
    assert code == 0 and out.splitlines()[-1] == line
    _, out = _run_status(monkeypatch, capsys, status(), retention=kept, json=True)
    assert json.loads(out)["retention"] == {
        "in_force": in_force,
        "set": "6h,1m:7d,1h:90d" if budget else None,
        "size_bytes": budget,
    }
