"""The truth the spark tier's tests compare the job with: the job's rules spelled out in Python.

`accepted_events` and `closed_sessions` replay Spark's watermark rule (allowed lateness
`LATENESS_MS`) over the generator's ground truth, batch by batch; the unit tests of the session
windows (tests/unit/jobs/panes/test_sessions.py) hold `Sessions` to `closed_sessions` too.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from tidegauge.core.windows import WindowSpec

LATENESS_MS = 15_000


def accepted_events(
    batches_of_rows: list[list[dict[str, Any]]], spec: WindowSpec
) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """Events each (window, service) accepted, per Spark's rule, windows of `spec` (`*` too).

    A row belongs to every window [s, s + size) with s a multiple of slide that holds its
    event time; for each such window it is accepted iff the window's end > the watermark in
    force when its batch started (watermark: max event time so far - lateness, from 0).
    """
    out: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    watermark = 0
    for rows in batches_of_rows:
        seen = [t["event_time"] for t in rows if t["kind"] in ("event", "duplicate", "heartbeat")]
        for t in rows:
            if t["kind"] not in ("event", "duplicate"):
                continue
            et = t["event_time"]
            last = et - et % spec.slide_ms
            for start in range(last, et - spec.size_ms, -spec.slide_ms):
                if start + spec.size_ms > watermark:
                    out[(start, t["service"])].append(t)
                    out[(start, "*")].append(t)
        if seen:
            watermark = max(watermark, max(seen) - LATENESS_MS)
    return out


def rank_error(values: np.ndarray, estimate: float, q: float) -> float:
    data = np.sort(values)
    lo = np.searchsorted(data, estimate, side="left") / len(data)
    hi = np.searchsorted(data, estimate, side="right") / len(data)
    return 0.0 if lo <= q <= hi else min(abs(lo - q), abs(hi - q))


def closed_sessions(
    batches_of_rows: list[list[dict[str, Any]]], gap: int, bucket: int
) -> dict[tuple[int, str], list[tuple[str, int]]]:
    """Sessions per (bucket of last event, service): (user, length ms), the rule spelled out.

    Per service, whenever a batch holds events of that service: events whose own session is
    already over (time + gap <= watermark in force) are ignored; the user's open sessions and
    the new events are merged (points closer than or equal to `gap` join); sessions whose last
    event + gap <= watermark close and count in the bucket of their last event.
    """
    open_: dict[str, dict[str, list[list[int]]]] = defaultdict(lambda: defaultdict(list))
    out: dict[tuple[int, str], list[tuple[str, int]]] = defaultdict(list)
    watermark = 0
    for rows in batches_of_rows:
        events = [t for t in rows if t["kind"] in ("event", "duplicate")]
        for service in sorted({t["service"] for t in events}):
            fresh: dict[str, list[int]] = defaultdict(list)
            for t in events:
                if t["service"] == service and t["user_id"] and t["event_time"] + gap > watermark:
                    fresh[t["user_id"]].append(t["event_time"])
            sessions = open_[service]
            for user in set(sessions) | set(fresh):
                spans = sorted([list(s) for s in sessions[user]] + [[x, x] for x in fresh[user]])
                merged: list[list[int]] = []
                for first, last in spans:
                    if merged and first - merged[-1][1] <= gap:
                        merged[-1][1] = max(merged[-1][1], last)
                    else:
                        merged.append([first, last])
                still = []
                for first, last in merged:
                    if last + gap <= watermark:
                        b = last - last % bucket
                        out[(b, service)].append((user, last - first))
                        out[(b, "*")].append((user, last - first))
                    else:
                        still.append([first, last])
                sessions[user] = still
        seen = [t["event_time"] for t in rows if t["kind"] in ("event", "duplicate", "heartbeat")]
        if seen:
            watermark = max(watermark, max(seen) - LATENESS_MS)
    return out
