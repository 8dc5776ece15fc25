"""The job joins each event to the catalog entry in force at the event's time.

Two runs of `tidegauge job --catalog ... --dimension team --dimension tier` on one checkpoint,
with the catalog changed between them: before the first, checkout (team payments, tier 1) and
search (team discovery) are catalogued, ledger is not; between the runs, checkout moves to team
core *for the past* (effective 30 s before the stream's midpoint) and search is removed (a
tombstone, holding from its broker time, inside the second run's event times). Events arrive
out of order, and the second run brings late events too. Redis must then hold, per (10 s
window, service or `*`, team or tier), exactly the events (and late events) an independent
as-of lookup gives: an event meets the catalog as its run read it, as of its own event time;
the first run's events keep the team they were counted under (a change for the past reaches
only events read after it).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.catalog_truth import entry_at
from tests.integration.helpers import send_events, tidegauge
from tidegauge.catalog import SLO_COUNTS_PLUGIN
from tidegauge.catalog.history import CatalogRecord
from tidegauge.catalog.topic import read_catalog
from tidegauge.core.config import KafkaSettings
from tidegauge.core.dimensions import SEP
from tidegauge.core.events import Event
from tidegauge.core.store import Keys, read_batches, read_windows
from tidegauge.core.store.annotations import read_annotations

SIZE = 10_000
LATENESS = 15_000


def _events(rng: random.Random, lo: int, hi: int, n: int, tag: str) -> list[Event]:
    out = []
    for i in range(n):
        service = rng.choice(["checkout", "checkout", "search", "ledger"])
        latency = round(rng.lognormvariate(3.7, 0.5), 1)  # ~40 ms, a tail past 50 and 80
        status = 503 if rng.random() < 0.05 else 200
        out.append(Event(f"{tag}{i}", rng.randrange(lo, hi), service, None, latency, status))
    out.sort(key=lambda e: e.event_time + rng.randrange(0, 4_000))  # out of order by up to 4 s
    return out


def _truth(
    events: list[Event], records: list[CatalogRecord], watermark: int
) -> tuple[Counter[tuple[str, int, str]], Counter[tuple[str, int, str]]]:
    """(dimension, window start, `service SEP value`) -> accepted events, and -> late events."""
    counted: Counter[tuple[str, int, str]] = Counter()
    late: Counter[tuple[str, int, str]] = Counter()
    for e in events:
        start = e.event_time - e.event_time % SIZE
        entry = entry_at(records, e.service, e.event_time)
        into = late if start + SIZE <= watermark else counted
        for dim in ("team", "tier"):
            value = getattr(entry, dim) if entry else None
            if value is not None:
                for who in (e.service, "*"):
                    into[(dim, start, f"{who}{SEP}{value}")] += 1
    return counted, late


def _slo_truth(
    events: list[Event], records: list[CatalogRecord], watermark: int
) -> Counter[tuple[int, str, str]]:
    """(window start, service, SLO count) -> the exact count, of the events on time."""
    out: Counter[tuple[int, str, str]] = Counter()
    for e in events:
        start = e.event_time - e.event_time % SIZE
        entry = entry_at(records, e.service, e.event_time)
        if start + SIZE <= watermark or entry is None or entry.slo is None:
            continue
        slo = entry.slo
        for who in (e.service, "*"):
            if slo.latency_ms is not None and e.latency_ms is not None:
                out[(start, who, "slo_latency_events")] += 1
                out[(start, who, "slo_slow")] += e.latency_ms > slo.latency_ms
            if slo.availability is not None and e.status is not None:
                out[(start, who, "slo_availability_events")] += 1
                out[(start, who, "slo_errors")] += e.status >= 500
    return out


def test_each_event_meets_the_catalog_as_of_its_time(
    broker, job, redis_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(4)
    catalog = KafkaSettings(bootstrap=broker.address, topic="catalog-join")
    cli = ["catalog", "--bootstrap", broker.address, "--topic", catalog.topic]
    now = int(time.time() * 1000)
    mid = now - now % SIZE  # the stream's midpoint: the first run's events are before it
    hour_ago = str(mid - 3_600_000)
    tidegauge(
        *cli, "put", "checkout", "--team", "payments", "--tier", "1",
        "--availability", "99.9", "--latency", "50ms:99", "--effective-from", hour_ago,
    )  # fmt: skip
    tidegauge(
        *cli, "put", "search", "--team", "discovery", "--availability", "99.5",
        "--effective-from", hour_ago,
    )  # fmt: skip
    first = _events(rng, mid - 60_000, mid, 1_200, "a")
    send_events(broker.address, "catalog-events", first, partitions=3, partition_of=lambda i: i % 3)
    options = dict(
        window="10s",
        allowed_lateness="15s",
        catalog=catalog.topic,
        dimension=["team", "tier"],
    )
    checkpoint = tmp_path / "checkpoint"
    job("catalog-events", redis_settings.url, checkpoint, **options)
    records_first = read_catalog(catalog)

    # between the runs: checkout moves team for the past, search leaves the catalog
    tidegauge(
        *cli, "put", "checkout", "--team", "core", "--tier", "1", "--latency", "80ms:99",
        "--effective-from", str(mid - 30_000),
    )  # fmt: skip
    tidegauge(*cli, "rm", "search")
    records_second = read_catalog(catalog)
    removed = records_second[-1].broker_ms
    assert records_second[-1].value is None and mid < removed
    second = _events(rng, mid - 50_000, removed + 30_000, 1_500, "b")  # late ones among them
    send_events(
        broker.address, "catalog-events", second, partitions=3, partition_of=lambda i: i % 3
    )
    job("catalog-events", redis_settings.url, checkpoint, **options)

    counted, late = _truth(first, records_first, watermark=0)
    watermark = max(e.event_time for e in first) - LATENESS
    more, more_late = _truth(second, records_second, watermark)
    slo = _slo_truth(first, records_first, 0) + _slo_truth(second, records_second, watermark)
    counted.update(more)
    late.update(more_late)
    assert sum(late.values()) > 100  # the second run brought late events
    assert any(k[2] == f"checkout{SEP}core" for k in counted)  # the change for the past
    assert any(k[2] == f"checkout{SEP}payments" and k[1] >= mid - 30_000 for k in counted)

    r = redis.Redis.from_url(redis_settings.url)
    for dim in ("team", "tier"):
        rows = {(w.window_start, w.service): w for w in read_windows(r, Keys().by(dim))}
        want = {(s, n): c for (d, s, n), c in counted.items() if d == dim}
        want_late = {(s, n): c for (d, s, n), c in late.items() if d == dim}
        got = {k: w.count for k, w in rows.items() if w.count}
        assert got == want, dim
        got_late = {k: w.late for k, w in rows.items() if w.late}
        assert got_late == want_late, dim
        assert not any(name.startswith("ledger") for _, name in rows)  # never catalogued

    # the exact SLO counts, per window and service, under the objectives in force at each time
    rows = json.loads(
        tidegauge(
            "query", "windows", "--json", "--redis", redis_settings.url, "--since", "1h",
            env={"TIDEGAUGE_PLUGINS": SLO_COUNTS_PLUGIN},
        ).stdout
    )  # fmt: skip
    fields = ("slo_latency_events", "slo_slow", "slo_availability_events", "slo_errors")
    got_slo = Counter(
        {(w["window_start"], w["service"], f): w[f] for w in rows for f in fields if w.get(f)}
    )
    assert got_slo == +slo
    assert slo[(mid - 20_000, "checkout", "slo_slow")] and sum(
        c for (_, who, f), c in slo.items() if who == "search" and f == "slo_errors"
    )

    # `query slo`: checkout's objective now (99 % under 80 ms), over its period and the rules'
    # windows (every one of them holds the whole stream here), from those exact counts
    slo_cli = ["--redis", redis_settings.url, "--bootstrap", broker.address]
    slo_cli += ["--catalog-topic", catalog.topic, "--at", str(removed + 60_000)]
    report = json.loads(
        tidegauge("query", "slo", "--service", "checkout", "--json", *slo_cli).stdout
    )
    (latency,) = report["objectives"]
    events = sum(
        c for (_, who, f), c in slo.items() if who == "checkout" and f == "slo_latency_events"
    )
    slow = sum(c for (_, who, f), c in slo.items() if who == "checkout" and f == "slo_slow")
    assert (latency["objective"], latency["target"]) == ("latency", 99.0)
    assert (latency["events"], latency["bad"]) == (events, slow)
    burn = (slow / events) / 0.01
    assert latency["budget_consumed"] == pytest.approx(burn)
    assert [(r["long"], r["short"]) for r in latency["rules"]] == [pytest.approx((burn, burn))] * 3
    assert [r["fires"] for r in latency["rules"]] == [burn >= r["rate"] for r in latency["rules"]]
    gone = tidegauge("query", "slo", "--service", "search", *slo_cli, check=False)
    assert gone.returncode == 1 and "search has no SLO in the catalog" in gone.stderr
    # without Kafka flags: the catalog as the job published it to Redis, the same objective
    published = json.loads(
        tidegauge(
            "query", "slo", "--service", "checkout", "--json", "--redis", redis_settings.url
        ).stdout
    )
    assert [(o["objective"], o["target"]) for o in published["objectives"]] == [("latency", 99.0)]

    # the catalog as the job last joined it, and its changes on the event-time charts
    stored = {k.decode(): json.loads(v) for k, v in r.hgetall(Keys().catalog).items()}
    assert set(stored) == {"checkout"}  # search was removed
    assert stored["checkout"]["entry"]["team"] == "core"
    assert stored["checkout"]["from"] == mid - 30_000
    marks = {
        (a.service, a.start, a.label)
        for a in read_annotations(r, Keys(), 0, removed + 60_000)
        if a.kind == "catalog"
    }
    assert (
        "checkout",
        mid - 30_000,
        "checkout moved to team core, SLO changed",
    ) in marks
    assert ("search", removed, "search removed from the catalog") in marks

    # `tidegauge alerts --slo`: checkout burns its latency budget ~20x in every window, so both
    # page rules fire, confirmed (their first breaching windows are closed), with their labels
    alerted = tidegauge("alerts", "--slo", "--once", "--redis", redis_settings.url)
    assert "burn-rate rules of every SLO" in alerted.stdout
    firings = json.loads(
        tidegauge("query", "alerts", "--json", "--redis", redis_settings.url).stdout
    )["firings"]
    pages = {f["labels"]["alertname"]: f for f in firings if f["labels"].get("severity") == "page"}
    assert set(pages) == {"SLO fast burn", "SLO slow burn"}, firings
    fast = pages["SLO fast burn"]
    assert fast["labels"] == {
        "alertname": "SLO fast burn",
        "service": "checkout",
        "severity": "page",
        "slo": "latency 99% under 80 ms",
        "team": "core",
    }
    assert fast["state"] == "confirmed" and fast["peak"] >= 1.0
    assert {f["service"] for f in firings} == {"checkout"}  # search left the catalog

    # the page's SLO panel: the same figures, one row per service and objective
    panel = subprocess.run(
        [sys.executable, "-c", PANEL, redis_settings.url, str(removed + 60_000)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (row,) = json.loads(panel.stdout)
    assert (row["service"], row["team"]) == ("checkout", "core")
    assert row["objective"] == "99% under 80 ms / 720h"
    assert row["budget left"] == pytest.approx(round(100 * (1 - burn), 1))
    assert row["burn (1h)"] == pytest.approx(round(burn, 2))
    assert row["firing"] == "fast burn, slow burn, budget leak"

    # a crash between the last batch's write and its commit, the catalog changed meanwhile:
    # the batch runs again, joins the catalog it first read, and writes the same windows
    team_windows = {
        (w.window_start, w.service): (w.count, w.late) for w in read_windows(r, Keys().by("team"))
    }
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    last = commits[-1]
    assert {b["batch_id"]: b["input_rows"] for b in read_batches(r, Keys())}[last] > 0
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    tidegauge(*cli, "put", "checkout", "--team", "replayed", "--effective-from", str(mid - 120_000))
    job("catalog-events", redis_settings.url, checkpoint, **options)
    assert (checkpoint / "commits" / str(last)).exists(), "the batch was not run again"
    again = {
        (w.window_start, w.service): (w.count, w.late) for w in read_windows(r, Keys().by("team"))
    }
    assert again == team_windows


#: The dashboard's SLO panel read in a process of its own (it loads the SLO counts' plugin).
PANEL = """
import json, sys
import redis
from dashboard.slo import slo_table
from tidegauge.catalog import SLO_COUNTS_PLUGIN
from tidegauge.catalog.report import service_reports
from tidegauge.core.plugins import load_plugins
from tidegauge.core.store import Keys
load_plugins([SLO_COUNTS_PLUGIN])
rows = service_reports(redis.Redis.from_url(sys.argv[1]), Keys(), int(sys.argv[2]))
print(slo_table(rows).to_json(orient="records"))
"""
