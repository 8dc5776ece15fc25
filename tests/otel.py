"""OTLP messages as the OpenTelemetry Collector's Kafka exporter writes them, from SDK spans.

`otlp_proto` is the SDK's own encoder (`encode_spans(...).SerializeToString()`); `otlp_json` is
OTLP's JSON encoding of the same message: protobuf's JSON mapping with integer enums and ids in
hex (the OTLP specification's one difference from the generic mapping, which writes base64).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

_IDS = ("traceId", "spanId", "parentSpanId")


def otlp_proto(spans: Sequence[ReadableSpan]) -> bytes:
    """One `ExportTraceServiceRequest` of `spans`, protobuf-encoded."""
    return encode_spans(spans).SerializeToString()


def otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """The same message in OTLP's JSON encoding."""

    def hex_ids(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex() if k in _IDS else hex_ids(v) for k, v in node.items()
            }
        if isinstance(node, list):
            return [hex_ids(v) for v in node]
        return node

    message = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    return json.dumps(hex_ids(message)).encode()
