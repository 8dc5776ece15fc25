"""Outages survived: Redis or the broker gone mid-stream, the job's processes stopped or killed.

Each test runs `tidegauge job` as a process, continuously (500 ms trigger, 400 records per
batch), over the seeded stream of tests/integration/test_job_replay.py, and breaks something
after a few batches: Redis stopped (SIGSTOP) for 60 s, Redis restarted with persistence on,
Redis gone for longer than `--sink-retry-for`, the broker stopped for 30 s, or (the topic
drained) for longer than the Kafka client's request timeout; the Python workers killed, the
whole job stopped by a supervisor, the driver killed outright. Then the job must have drained
the topic and Redis must hold exactly what an uninterrupted run wrote (`snapshot`), and the
job's log must say what happened. docs/reliability.md lists these. One file per part that
fails (test_redis.py, test_broker.py, test_stops.py), so that the test workers share them.
"""
