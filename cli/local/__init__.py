"""Local services and the demo: the broker and redis-server as child processes, the whole stack."""
