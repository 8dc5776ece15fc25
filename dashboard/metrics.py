"""The dashboard server's own figures for Prometheus: `/tidegauge/metrics` and `/tidegauge/readyz`.

Served on the dashboard's own port beside the page and the wall page (dashboard/server.py), so a
scrape config names the address viewers already use. What an operator watches: the Redis reads
the server does (one per view and refresh, however many viewers: dashboard/shared.py), how long
they take and how many fail, the views held, the wall documents served (200) and those a
screen already had (304), and when the last read succeeded. `/tidegauge/readyz` is 200 while
Redis answers a PING, else 503 with why; Streamlit's own `/_stcore/health` says the server runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

__all__ = [
    "CONTENT_TYPE",
    "METRICS_PATH",
    "READY_PATH",
    "REGISTRY",
    "exposition",
    "ready",
    "routes",
    "timed_read",
    "wall_document",
]

METRICS_PATH = "/tidegauge/metrics"
READY_PATH = "/tidegauge/readyz"

T = TypeVar("T")

#: The server process's registry (the page's script runs in that process, once per session).
REGISTRY = CollectorRegistry()
CONTENT_TYPE = CONTENT_TYPE_LATEST

_READS = Counter(
    "tidegauge_dashboard_reads",
    "Reads of Redis for a view (page or wall snapshot, breakdown), shared by its viewers",
    ["view"],
    registry=REGISTRY,
)
_READ_ERRORS = Counter(
    "tidegauge_dashboard_read_errors",
    "Reads of Redis that failed (the page and the wall say why)",
    ["view"],
    registry=REGISTRY,
)
_READ_SECONDS = Histogram(
    "tidegauge_dashboard_read_seconds",
    "Time one read of a view took",
    ["view"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0),
    registry=REGISTRY,
)
_LAST_READ = Gauge(
    "tidegauge_dashboard_last_read_timestamp_seconds",
    "When a read of Redis last succeeded (Unix time)",
    registry=REGISTRY,
)
_WALL = Counter(
    "tidegauge_dashboard_wall_documents",
    "Wall documents answered: 200 with the document, 304 when the screen had it",
    ["status"],
    registry=REGISTRY,
)
VIEWS = Gauge(
    "tidegauge_dashboard_views",
    "Views (filters, ranges, breakdowns) the server keeps shared reads of",
    registry=REGISTRY,
)


def timed_read(view: str, read: Callable[[], T]) -> T:
    """Run one read of Redis for `view`, counted and timed (a failure counted and raised)."""
    started = time.monotonic()
    try:
        value = read()
    except Exception:
        _READ_ERRORS.labels(view).inc()
        raise
    _READ_SECONDS.labels(view).observe(time.monotonic() - started)
    _READS.labels(view).inc()
    _LAST_READ.set(time.time())
    return value


def wall_document(status: int) -> None:
    """A wall document answered with `status` (200 or 304)."""
    _WALL.labels(str(status)).inc()


def exposition() -> bytes:
    """The registry in Prometheus' text format."""
    return generate_latest(REGISTRY)


def ready(client: redis.Redis) -> str | None:
    """None while Redis answers a PING, else why not."""
    try:
        client.ping()
    except redis.exceptions.RedisError as e:
        return f"Redis does not answer: {e}"
    return None


def routes(client: Callable[[], redis.Redis]) -> list[Route]:
    """`/tidegauge/metrics` and `/tidegauge/readyz` for `st.App(routes=...)`."""

    async def metrics(request: Request) -> Response:
        return Response(exposition(), media_type=CONTENT_TYPE)

    async def readyz(request: Request) -> Response:
        why = await run_in_threadpool(ready, client())
        return PlainTextResponse("ok\n" if why is None else why + "\n", 200 if why is None else 503)

    return [Route(METRICS_PATH, metrics), Route(READY_PATH, readyz)]
