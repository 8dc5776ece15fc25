"""`tidegauge alerts`: evaluate alert rules against the store and tell webhooks (docs/alerts.md).

    rules.py      the rules and the states of a firing, pure (also read by query and dashboard)
    store.py      firings and their notices in Redis
    evaluator.py  one evaluation: read windows and batches, advance the firings, write them
    webhook.py    drain the outbox: POST each notice, retried with back-off
    cli.py        the command: rules from a file and the command line, the loop

Reads and writes only Redis (no Spark, no Kafka): it can run anywhere the store is reachable,
as many rules as needed, restarted at will (its state is in Redis).
"""
