"""Adding a metric from outside the tree: a plugin's field and metric reach every output.

`tests/plugins/request_size.py` registers an optional `bytes` event field and a t-digest of it
(`bytes_p50`, `bytes_p99`), the way docs/extending.md describes. With
`TIDEGAUGE_PLUGINS=tests.plugins.request_size`, `tidegauge job` must parse the field (bad values
are dead letters with the contract's reasons), compute the metric per window and store it in
Redis; `tidegauge query windows --json` must show it; the dashboard's metrics frame must carry
it. Expected values are exact quantiles computed here (rank error within t-digest bounds). A
process without the plugin must still read the same store, without the metric.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from kafka import KafkaProducer

from tests.integration.helpers import tidegauge
from tidegauge.core import registry
from tidegauge.core.events import unregister_field
from tidegauge.core.store import Keys, read_dead_counts, read_windows
from tidegauge.core.window_agg import WindowAgg

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "tests.plugins.request_size"
ENV = {"TIDEGAUGE_PLUGINS": PLUGIN, "PYTHONPATH": str(ROOT)}
T0 = 1_775_000_000_000
WINDOW_MS = 10_000
PREFIX = "extending"


def rank_error(values: list[float], estimate: float, q: float) -> float:
    """Rank error of `estimate` as the q-quantile, less one sample: an estimate interpolated
    between two neighbouring values is off by at most one rank however good the digest is."""
    data = np.sort(np.asarray(values))
    lo = np.searchsorted(data, estimate, side="left") / len(data)
    hi = np.searchsorted(data, estimate, side="right") / len(data)
    err = 0.0 if lo <= q <= hi else min(abs(lo - q), abs(hi - q))
    return max(0.0, err - 1 / len(data))


@pytest.fixture(scope="module")
def run(broker, module_redis_db, job, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("extending")
    topic = "extending-events"
    url = module_redis_db().url
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "2")
    rng = np.random.default_rng(5)
    expected: dict[tuple[int, str], list[float]] = defaultdict(list)
    bad = {"invalid_value": 0, "wrong_type": 0}
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=5)
    for i in range(3_000):
        ev: dict[str, Any] = {
            "event_id": f"x-{i}",
            "event_time": T0 + i * 20,
            "service": ("api", "web")[i % 2],
            "latency_ms": 10.0,
        }
        if i % 10 == 0:
            pass  # no size: the metric leaves the event out, the event still counts
        elif i % 101 == 0:
            ev["bytes"] = -5
            bad["invalid_value"] += 1
        elif i % 103 == 0:
            ev["bytes"] = "1200"
            bad["wrong_type"] += 1
        else:
            ev["bytes"] = float(round(rng.lognormal(8, 1)))
            start = ev["event_time"] - ev["event_time"] % WINDOW_MS
            expected[(start, ev["service"])].append(ev["bytes"])
            expected[(start, "*")].append(ev["bytes"])
        producer.send(topic, json.dumps(ev).encode(), partition=i % 2)
    producer.flush()
    producer.close()
    common = ["--redis", url, "--redis-prefix", PREFIX]
    job(
        topic,
        url,
        tmp / "checkpoint",
        redis_prefix=PREFIX,
        window="10s",
        allowed_lateness="1h",
        max_records_per_trigger=1000,
        env=ENV,
    )
    with_plugin = json.loads(tidegauge("query", "windows", *common, "--json", env=ENV).stdout)
    without = json.loads(tidegauge("query", "windows", *common, "--json").stdout)
    table = tidegauge("query", "windows", *common, env=ENV).stdout
    return {
        "url": url,
        "expected": expected,
        "bad": bad,
        "with_plugin": with_plugin,
        "without": without,
        "table": table,
        "client": redis.Redis.from_url(url),
    }


def test_the_job_stores_the_plugin_metric_per_window(run: dict[str, Any]) -> None:
    r, keys = run["client"], Keys(PREFIX)
    module = importlib.import_module(PLUGIN)
    try:
        stored = {}
        for start in r.zrange(keys.window_index(str(WINDOW_MS)), 0, -1):
            key = keys.window_aggs(str(WINDOW_MS), int(start))
            for service, blob in r.hgetall(key).items():
                agg = WindowAgg.from_bytes(blob)
                stored[(int(start), service.decode())] = agg.metrics(WINDOW_MS)
    finally:
        registry.unregister_metric(module.METRIC.name)
        unregister_field(module.FIELD.name)
        sys.modules.pop(PLUGIN, None)
    assert set(stored) >= set(run["expected"]) and len(run["expected"]) >= 12
    for key, sizes in run["expected"].items():
        doc = stored[key]
        assert rank_error(sizes, doc["bytes_p50"], 0.5) <= 0.01, key
        assert rank_error(sizes, doc["bytes_p99"], 0.99) <= 0.01, key
    assert read_dead_counts(r, keys) == run["bad"]


def test_query_windows_shows_it(run: dict[str, Any]) -> None:
    rows = {(w["window_start"], w["service"]): w for w in run["with_plugin"]}
    for key, sizes in run["expected"].items():
        assert rank_error(sizes, rows[key]["bytes_p99"], 0.99) <= 0.01
    assert "bytes p99" in run["table"].splitlines()[0]
    # without the plugin the same store reads fine; the metric is simply not there
    assert run["without"] and all("bytes_p99" not in w for w in run["without"])
    assert [w["count"] for w in run["without"]] == [w["count"] for w in run["with_plugin"]]


def test_the_dashboards_metrics_frame_carries_it(run: dict[str, Any]) -> None:
    from dashboard.windows import metrics_frame

    module = importlib.import_module(PLUGIN)
    try:
        rows = read_windows(run["client"], Keys(PREFIX))
        df = metrics_frame(rows)
        assert {"bytes_p50", "bytes_p99"} <= set(df.columns)
        got = {
            (int(s.timestamp() * 1000), svc): v
            for s, svc, v in zip(df["window_start"], df["service"], df["bytes_p99"], strict=True)
        }
        for key, sizes in run["expected"].items():
            assert rank_error(sizes, got[key], 0.99) <= 0.01
    finally:
        registry.unregister_metric(module.METRIC.name)
        unregister_field(module.FIELD.name)
        sys.modules.pop(PLUGIN, None)
