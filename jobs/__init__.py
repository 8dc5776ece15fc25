"""The Spark job: Kafka -> source -> parse -> summary -> state -> sink -> Redis.

The stages, in the order an event crosses them, are docs/architecture.md's map of this package.
"""
