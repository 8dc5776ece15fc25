"""A process's Prometheus endpoint: `/metrics`, `/healthz` and `/readyz` on one port.

The job (`jobs/runtime/metrics.py`) and `tidegauge alerts` (`tidegauge/alerts/metrics.py`) keep
their figures in a `prometheus_client` registry of their own and serve it here, in a daemon
thread: `/metrics` the registry in Prometheus text (any other path too, as Prometheus's own
servers do), `/healthz` 200 while the process runs, `/readyz` 200 while `ready()` says so,
else 503 with why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

__all__ = ["MetricsServer", "metrics_app", "serve_metrics"]


class MetricsServer(ThreadingMixIn, WSGIServer):
    """The server `serve_metrics` starts; `shutdown()` and `server_close()` end it."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


def metrics_app(
    registry: CollectorRegistry, ready: Callable[[], bool], not_ready: str
) -> Callable[..., Any]:
    """The WSGI app: /metrics (and any other path), /healthz, /readyz."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            ok = path == "/healthz" or ready()
            body = b"ok\n" if ok else f"{not_ready}\n".encode()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [body]
        return metrics(environ, start_response)

    return app


def serve_metrics(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    host: str,
    port: int,
    not_ready: str = "not ready",
) -> MetricsServer:
    """Serve `registry` on host:port (0: any free port) from a daemon thread."""
    server = make_server(
        host,
        port,
        metrics_app(registry, ready, not_ready),
        MetricsServer,
        handler_class=_QuietHandler,
    )
    threading.Thread(target=server.serve_forever, name="tidegauge-metrics", daemon=True).start()
    return server
