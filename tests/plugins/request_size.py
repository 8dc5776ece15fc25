"""A plugin as a user would write one: response size percentiles from a new `bytes` field.

Loaded by `TIDEGAUGE_PLUGINS=tests.plugins.request_size` (tests/integration/test_extending.py).
It is the whole change: no file of Tidegauge is touched to add the field and the metric.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sketches.tdigest import TDigest
from tidegauge.core.events import EventField, register_field
from tidegauge.core.registry import Batch, Metric, ResultContext, register_metric

FIELD = register_field(EventField("bytes", "float", minimum=0.0, doc="response size in bytes"))


def _update(state: TDigest, batch: Batch) -> TDigest:
    values = batch.get("bytes")
    if values is not None and len(values):
        values = values[~np.isnan(values)]
        if len(values):
            state.update(values)
    return state


def _results(state: TDigest, _: ResultContext) -> dict[str, Any]:
    if not state.count:
        return {"bytes_p50": None, "bytes_p99": None}
    p50, p99 = state.quantile(np.array([0.5, 0.99]))
    return {"bytes_p50": float(p50), "bytes_p99": float(p99)}


METRIC = register_metric(
    Metric(
        name="response_bytes",
        empty=TDigest,
        update=_update,
        merge=TDigest.merged,
        results=_results,
        fields=("bytes_p50", "bytes_p99"),
        encode=TDigest.to_bytes,
        decode=TDigest.from_bytes,
        labels={"bytes_p50": "bytes p50", "bytes_p99": "bytes p99"},
    )
)
