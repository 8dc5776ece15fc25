"""Stage 2, parse: raw Kafka records into typed event columns and dead letters (read tasks)."""
