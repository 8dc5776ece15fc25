"""Stage 5, sink: one Redis transaction per micro-batch, roll-ups and the job's status (driver)."""
