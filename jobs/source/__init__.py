"""Stage 1, source: Kafka as a Spark streaming Python Data Source (offsets, fetches)."""
