"""Waiting for a local Spark cluster: the master's status page while it starts.

A starting master's web UI may accept a connection and answer with an empty body before its
JSON status exists; waiting for workers must treat that as "not yet", not fail.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from cli.local.cluster import LocalCluster
from cli.local.services import Service

ALIVE = {"workers": [{"id": "w1", "state": "ALIVE"}, {"id": "w2", "state": "DEAD"}]}


@pytest.fixture
def master_page() -> Iterator[tuple[str, list[int]]]:
    """A status page whose first two answers are empty bodies, then the JSON status."""
    served: list[int] = []

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            served.append(1)
            body = b"" if len(served) <= 2 else json.dumps(ALIVE).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", served
    finally:
        server.shutdown()


def test_an_empty_status_page_while_starting_is_waited_out(
    master_page: tuple[str, list[int]], tmp_path: Path
) -> None:
    webui, served = master_page
    proc = subprocess.Popen(["sleep", "30"])
    try:
        master = Service("spark-master", proc, "127.0.0.1", 1, tmp_path / "master.log")
        alive = LocalCluster(master, webui).wait_for_workers(1, timeout_s=20)
    finally:
        proc.kill()
        proc.wait()
    assert [w["id"] for w in alive] == ["w1"]
    assert len(served) == 3
