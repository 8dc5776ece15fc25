"""`tidegauge alerts` against a real redis-server and a real HTTP receiver.

The store is written by the job's own sink code, batch by batch, as a job would write a window
whose stragglers push its p99 over the threshold, back under and over again while it is open,
before the watermark closes it. Between batches, `tidegauge alerts --once` (a real process)
evaluates and delivers to a local HTTP server that fails its first answers, so the retries are
exercised too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
import redis

from jobs.sink.redis_sink import SinkBatch, write_batch
from jobs.sink.status import write_progress
from jobs.state.rows import WindowCount, WindowUpdate
from sketches.tg64 import hash32
from tests.fixtures import T as T0
from tests.integration.helpers import tidegauge
from tidegauge.core.config import RedisSettings
from tidegauge.core.store import Keys
from tidegauge.core.window_agg import WindowAgg
from tidegauge.core.windows import WindowSpec

pytestmark = pytest.mark.integration

W = 10_000
SPEC = WindowSpec.tumbling(W)
RULE = "p99 > 800 for 3 on api"


class Receiver:
    """A webhook: records every POST body; answers 503 to the first `fail_first` requests."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.fail_first = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests += 1
                if outer.requests <= outer.fail_first:
                    self.send_response(503)
                else:
                    assert self.headers["Content-Type"] == "application/json"
                    outer.bodies.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def states(self) -> list[str]:
        return [b["state"] for b in self.bodies]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver(fail_first=2)
    yield rec
    rec.server.shutdown()


def update(i: int, latencies: list[float]) -> WindowUpdate:
    agg = WindowAgg()
    lat = np.array(latencies, dtype=np.float64)
    users = np.array([f"u{k % 40}" for k in range(len(lat))], dtype=object)
    agg.add_hashed(lat, np.full(len(lat), 200, dtype=np.int64), hash32(users))
    return WindowUpdate(SPEC.key, T0 + i * W, "api", agg.to_bytes())


class Job:
    """Writes batches as the job would: absolute window states, stragglers, progress."""

    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.keys, self.batch = r, keys, 0
        self.windows: dict[int, list[float]] = {}

    def write(self, add: dict[int, list[float]], watermark: int, stragglers: bool) -> None:
        for i, lat in add.items():
            self.windows[i] = self.windows.get(i, []) + lat
        updates = [update(i, self.windows[i]) for i in add]
        strag = [WindowCount(SPEC.key, T0 + i * W, "api", len(v)) for i, v in add.items()]
        write_batch(
            self.r,
            self.keys,
            SinkBatch(self.batch, updates, stragglers=strag if stragglers else ()),
        )
        write_progress(
            self.r,
            self.keys,
            {
                "batch_id": self.batch,
                "batch_time": T0 + 100_000 + self.batch * 1000,
                "watermark": watermark,
                "input_rows": sum(len(v) for v in add.values()),
                "offsets": {"0": self.batch},
                "start_offsets": {"0": 0},
                "latest_offsets": {"0": self.batch},
                "batch_duration_ms": 300,
                "query_id": "q",
            },
        )
        self.batch += 1


def evaluate(settings: RedisSettings, rec: Receiver) -> str:
    out = tidegauge(
        "alerts", "--once", "--rule", RULE, "--webhook", rec.url, "--redis", settings.url
    )
    return out.stdout


def test_stragglers_over_and_back_give_provisional_retracted_confirmed_once_each(
    redis_settings: RedisSettings, redis_client: redis.Redis, receiver: Receiver
) -> None:
    job = Job(redis_client, Keys())
    # windows 0 and 1 closed over the threshold, window 2 open (the watermark is in it)
    open_wm = T0 + 2 * W + 5_000
    job.write({0: [900.0] * 100, 1: [950.0] * 100, 2: [900.0] * 100}, open_wm, stragglers=False)
    assert "PROVISIONAL" in evaluate(redis_settings, receiver)
    assert receiver.states() == ["provisional"] and receiver.requests == 3  # 2 refused first

    # stragglers: many fast requests bring window 2's p99 under 800 ...
    job.write({2: [100.0] * 9_900}, open_wm, stragglers=True)
    assert "RETRACTED" in evaluate(redis_settings, receiver)
    # ... then slow ones push it over again while it is still open: no new notice
    job.write({2: [2_000.0] * 300}, open_wm, stragglers=True)
    assert evaluate(redis_settings, receiver).count("\n") == 2  # the start lines only
    assert receiver.states() == ["provisional", "retracted"]

    # the watermark closes window 2 over the threshold: confirmed, final
    job.write({3: [100.0] * 10}, T0 + 4 * W, stragglers=False)
    assert "CONFIRMED" in evaluate(redis_settings, receiver)
    assert receiver.states() == ["provisional", "retracted", "confirmed"]
    assert len({b["firing"]["id"] for b in receiver.bodies}) == 1  # one firing throughout
    confirmed = receiver.bodies[-1]["firing"]
    assert (confirmed["start"], confirmed["end"], confirmed["windows"]) == (T0, T0 + 3 * W, 3)
    assert confirmed["peak"] >= 1_900  # the worst p99 the firing saw

    # a restarted evaluator finds its state in Redis, tells nobody anything twice and rewrites
    # no firing that did not change (keyspace events show every write of the firings hash)
    redis_client.config_set("notify-keyspace-events", "Kh")
    watch = redis_client.pubsub()
    db = redis_client.connection_pool.connection_kwargs.get("db", 0)
    watch.subscribe(f"__keyspace@{db}__:{Keys().alerts}")
    evaluate(redis_settings, receiver)
    assert receiver.states() == ["provisional", "retracted", "confirmed"]
    writes = []
    while (m := watch.get_message(timeout=0.2)) is not None:
        if m["type"] == "message":
            writes.append(m["data"])
    assert writes == []
    watch.close()

    shown = tidegauge("query", "alerts", "--redis", redis_settings.url).stdout
    assert "CONFIRMED" in shown and RULE in shown and shown.count("retracted") == 1
    as_json = json.loads(
        tidegauge("query", "alerts", "--json", "--redis", redis_settings.url).stdout
    )
    assert [n["state"] for n in as_json["notices"]] == ["confirmed", "retracted", "provisional"]
    firing = tidegauge(
        "query", "alerts", "--state", "confirmed", "--redis", redis_settings.url, check=False
    )
    assert firing.returncode == 1  # usable as a check: exit 1 while a firing is in that state


def test_bad_rules_and_an_unreachable_webhook_are_told_clearly(
    redis_settings: RedisSettings, redis_client: redis.Redis, tmp_path: Any
) -> None:
    bad = tidegauge("alerts", "--once", "--rule", "latency > 5", check=False)
    assert bad.returncode == 2 and "unknown metric 'latency'" in bad.stderr
    none = tidegauge("alerts", "--once", "--redis", redis_settings.url, check=False)
    assert none.returncode == 2 and "no rules" in none.stderr
    f = tmp_path / "alerts.toml"
    f.write_text('[[rule]]\nname = "slow"\nwhen = "p99 > 800"\ncolor = "red"\n')
    wrong = tidegauge("alerts", "--once", "--rules", str(f), check=False)
    assert wrong.returncode == 2 and "unknown keys color" in wrong.stderr

    job = Job(redis_client, Keys())
    job.write({i: [900.0] * 10 for i in range(3)}, T0 + 10 * W, stragglers=False)
    # nothing listens on port 9: the notice is retried, then given up on with a clear log line
    gone = tidegauge(
        "alerts", "--once", "--rule", RULE, "--webhook", "http://127.0.0.1:9/hook",
        "--give-up", "2s", "--redis", redis_settings.url, check=False,
    )  # fmt: skip
    assert "CONFIRMED" in gone.stdout and gone.returncode == 1
    assert "retrying in" in gone.stderr and "giving up on a notice" in gone.stderr
