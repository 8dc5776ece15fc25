"""The library every process shares, floor 1 of the tree (docs/architecture.md).

    core/      no Spark, no Streamlit: the event contract, time and window math, metrics and
               their registry, configuration, the Redis key layout and its read API
    alerts/    alert rules, their stored states, the evaluator and webhooks (`tidegauge alerts`)
    traffic/   the generator, the producer and the topic (`tidegauge produce`, `tidegauge topic`)
    query.py   `tidegauge query`

Only `sketches/` lies below it; `jobs/`, `dashboard/` and `cli/` build on it.
"""
