"""The core every process shares: no Spark, no Streamlit.

The event contract, durations, window and watermark math, the window aggregates and their
metrics, configuration, Kafka codecs, and the Redis key layout with its read API. Only
`sketches` lies below it; the rest of `tidegauge/`, `jobs/`, `dashboard/` and `cli/` build on it
(docs/architecture.md, tests/unit/test_layers.py).
"""
