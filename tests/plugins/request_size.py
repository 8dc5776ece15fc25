"""A plugin as a user would write one: response size percentiles from a new `bytes` field.

Loaded by `TIDEGAUGE_PLUGINS=tests.plugins.request_size` (tests/integration/test_extending.py).
It is the whole change: no file of Tidegauge is touched to add the field and the metric.
"""

from __future__ import annotations

from typing import Any

from sketches.tdigest import TDigest
from tidegauge.core.events import EventField, register_field
from tidegauge.core.metrics import digest_quantiles, update_digest_of
from tidegauge.core.registry import Batch, Metric, ResultContext, register_metric

FIELD = register_field(EventField("bytes", "float", minimum=0.0, doc="response size in bytes"))


def _update(state: TDigest, batch: Batch) -> TDigest:
    return update_digest_of(state, batch.get("bytes"))


def _results(state: TDigest, _: ResultContext) -> dict[str, Any]:
    return digest_quantiles(state, {"bytes_p50": 0.5, "bytes_p99": 0.99})


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
