"""Rows and job statuses the dashboard's unit tests build their ground truth from."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from tidegauge.core.store import JobStatus, WindowRow
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z
T0 = 1_795_000_000_000  # 2026-11-18T11:06:40Z, a multiple of 10 s
W = 10_000


def reporting_status(**kw: object) -> JobStatus:
    """A job that ran batch #7 at T + 100 s and reported then; `kw` overrides any field."""
    base = dict(
        batch_id=7,
        batch_time=T + 100_000,
        watermark=T + 50_000,
        input_rows=10,
        offsets={"0": 5},
        latest_offsets={"0": 9},
        batch_duration_ms=120,
        query_id="q",
        status_time=T + 100_000,
    )
    base.update(kw)
    return JobStatus(**base)  # type: ignore[arg-type]


def plain_row(start: int, service: str, count: int, **kw: object) -> WindowRow:
    """A window of W from `start` with `count` events and only the fields given in `kw`."""
    return WindowRow(start, start + W, service, count, count * 1000 / W, **kw)  # type: ignore[arg-type]


def sketched_row(start: int, service: str, count: int, size: int = W) -> WindowRow:
    """A row as `read_windows` returns it: every metric of a WindowAgg of `count` events."""
    spec = WindowSpec.tumbling(size)
    rng = np.random.default_rng([start % 1_000_003, count, len(service)])
    agg = WindowAgg()
    agg.add(
        rng.lognormal(np.log(30.0), 0.5, count),
        rng.choice(np.array([200, 404, 503]), count, p=[0.9, 0.08, 0.02]),
        np.array([f"{service}-{u}" for u in rng.integers(0, 50, count)], dtype=object),
    )
    metrics = agg.metrics(size)
    names = {f.name for f in fields(WindowRow)}
    return WindowRow(
        window_start=start,
        window_end=start + size,
        service=service,
        spec=spec.key,
        kind=spec.kind,
        **{k: v for k, v in metrics.items() if k in names},
    )


def rows_for(services: dict[str, list[int]], t0: int = T0) -> list[WindowRow]:
    """Windows of W starting at t0, one list of counts per service, plus the `*` totals."""
    out = []
    n = max(len(v) for v in services.values())
    for i in range(n):
        start = t0 + i * W
        total = 0
        for svc, counts in services.items():
            if i < len(counts):
                out.append(sketched_row(start, svc, counts[i]))
                total += counts[i]
        out.append(sketched_row(start, "*", total))
    return out
