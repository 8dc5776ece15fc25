"""What unit tests of several packages share: brute-force references, hypothesis strategies."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tidegauge.core.events import MAX_TIME_MS, MIN_TIME_MS
from tidegauge.core.sliding import Frame


def brute_peak(times: list[int], errors: list[bool], frame: Frame) -> tuple[int, int, int, int]:
    """(events, start, errors, start) of the busiest interval, by counting each one."""
    best = [(-1, 0), (-1, 0)]
    for e in range(frame.first_end_ms, frame.last_end_ms + 1, frame.resolution_ms):
        lo = e - frame.length_ms
        n = sum(lo <= t < e for t in times)
        k = sum(lo <= t < e and err for t, err in zip(times, errors, strict=True))
        if n > best[0][0]:
            best[0] = (n, lo)
        if k > best[1][0]:
            best[1] = (k, lo)
    return best[0][0], best[0][1], best[1][0], best[1][1]


# --- hypothesis: records of the event contract ------------------------------------------------

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)


names = st.text(min_size=1, max_size=40).filter(lambda s: s != "*")
times = st.integers(MIN_TIME_MS, MAX_TIME_MS - 1)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event as a JSON object, optional fields drawn in or out."""
    obj: dict[str, Any] = {
        "event_id": draw(names),
        "event_time": draw(times),
        "service": draw(names),
    }
    if draw(st.booleans()):
        obj["user_id"] = draw(st.text(max_size=40))
    if draw(st.booleans()):
        obj["latency_ms"] = draw(st.floats(0, 1e12, allow_nan=False))
    if draw(st.booleans()):
        obj["status"] = draw(st.integers(-(2**31), 2**31 - 1))
    if draw(st.booleans()):
        obj["sent_time"] = draw(times)
    return obj


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
