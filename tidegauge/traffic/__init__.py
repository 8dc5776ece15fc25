"""Synthetic traffic: the deterministic generator and the Kafka producer that sends it."""
