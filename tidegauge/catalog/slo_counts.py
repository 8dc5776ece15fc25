"""Exact SLO counts per window: the events each catalogued objective judged, and the bad ones.

Loaded like a plugin by `tidegauge job --catalog` (and by the readers of SLOs).

Percentiles from a t-digest cannot say exactly how many events were slower than 800 ms, and an
error budget is a count. So the catalog join gives every event its service's objectives in
force at its event time (`slo_latency_ms`, `slo_availability`: tidegauge/catalog/join.py), and
this metric counts, per pane and so per window, roll-up and range (counts merge by summing):

* `slo_latency_events`: events with a latency and a latency objective; `slo_slow`: those of
  them slower than the objective's threshold (an event of exactly 800 ms meets "800 ms");
* `slo_availability_events`: events with a status and an availability objective;
  `slo_errors`: those of them with a status of 500 or more.

Stored as four varints per aggregate (a window of an uncatalogued service: four zero bytes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tidegauge.core.events import EventField, event_fields, register_field
from tidegauge.core.registry import Batch, Metric, ResultContext, metrics, register_metric

__all__ = ["FIELDS", "METRIC", "RESULT_FIELDS"]

#: The result fields, in the metric's order.
RESULT_FIELDS = ("slo_latency_events", "slo_slow", "slo_availability_events", "slo_errors")


def _field(name: str, doc: str) -> EventField:
    have = {f.name: f for f in event_fields()}
    return have.get(name) or register_field(EventField(name, "float", minimum=0.0, doc=doc))


#: Filled by the catalog join (an event's own value is replaced): the objectives in force.
FIELDS = (
    _field("slo_latency_ms", "the latency objective's threshold in force (catalog join)"),
    _field("slo_availability", "the availability target in force, percent (catalog join)"),
)


def _update(state: list[int], batch: Batch) -> list[int]:
    threshold = batch.get("slo_latency_ms")
    latency = batch.get("latency_ms")
    if threshold is not None and latency is not None:
        judged = ~np.isnan(threshold) & ~np.isnan(latency)
        state[0] += int(judged.sum())
        state[1] += int((latency[judged] > threshold[judged]).sum())
    target = batch.get("slo_availability")
    status = batch.get("status")
    if target is not None and status is not None:
        judged = ~np.isnan(target) & (status >= 0)
        state[2] += int(judged.sum())
        state[3] += int((status[judged] >= 500).sum())
    return state


def _merge(states: Any) -> list[int]:
    out = [0, 0, 0, 0]
    for s in states:
        for i in range(4):
            out[i] += s[i]
    return out


def _encode(state: list[int]) -> bytes:
    out = bytearray()
    for v in state:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def _decode(data: bytes) -> list[int]:
    out, v, shift = [], 0, 0
    for b in data:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(v)
            v, shift = 0, 0
    if len(out) != 4 or shift:
        raise ValueError(f"slo counts: 4 varints expected, got {len(out)}")
    return out


def _results(state: list[int], _: ResultContext) -> dict[str, Any]:
    return dict(zip(RESULT_FIELDS, state, strict=True))


def _register() -> Metric:
    for m in metrics():
        if m.name == "slo":
            return m
    return register_metric(
        Metric(
            name="slo",
            empty=lambda: [0, 0, 0, 0],
            update=_update,
            merge=_merge,
            results=_results,
            fields=RESULT_FIELDS,
            encode=_encode,
            decode=_decode,
            labels={
                "slo_latency_events": "events judged (latency)",
                "slo_slow": "slower than the objective",
                "slo_availability_events": "events judged (availability)",
                "slo_errors": "errors (availability)",
            },
        )
    )


METRIC = _register()
