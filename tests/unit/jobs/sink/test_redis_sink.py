"""The sink's window documents (jobs/sink/redis_sink.py `_doc`): one text however given."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobs.sink.redis_sink import _doc


@pytest.mark.parametrize(
    "metrics",
    [
        {},
        {"count": 3, "p99": 12.5, "errors": 0, "latency_mean": None, "distinct_users": 2},
        {"avg_bytes": 1.5, "count": 1},  # a plugin's field sorting before "batch"
        {"batch": 7, "count": 1},  # the batch id wins, as for a mapping
        {"count": 1, "label": 'a "quoted", text'},
    ],
)
def test_a_document_is_the_same_text_from_a_mapping_or_from_sorted_json(
    metrics: dict[str, Any],
) -> None:
    expected = json.dumps({**metrics, "batch": 42}, separators=(",", ":"), sort_keys=True)
    text = json.dumps(metrics, separators=(",", ":"), sort_keys=True)
    assert _doc(metrics, 42) == expected
    assert _doc(text, 42) == expected
