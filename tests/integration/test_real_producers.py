"""Topics written the way production services write them, through the whole job.

A librdkafka producer (confluent-kafka, the client most services run) writes events to the real
broker in every codec Kafka defines, with headers, null keys and tombstones, plus a
transactional producer's committed and aborted transactions interleaved with plain records.
`tidegauge job` (available-now, small micro-batches, so ranges cut through transactions) must
then count per window exactly the events a read-committed consumer would deliver: every
committed event once, no aborted one, and every tombstone as an `empty` dead letter. The
expected counts are built here from what the producers were told to send, not from the job.

A second test hides a codec library from the job's Python and checks it stops with one clear
line naming the codec, the partition, the offset and what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Producer

from jobs.source.kafka_source import true_end_offsets
from tests.integration.helpers import tidegauge
from tidegauge.core.store import Keys, read_dead_counts, read_dead_letters, read_status

T0 = 1_772_323_200_000  # 2026-03-01T00:00:00Z
WINDOW_MS = 10_000
SERVICES = ("api", "web", "search")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PREFIX = "producers"


class Stream:
    """What was sent, by intent, with the broker's positions from delivery reports."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.committed: list[dict[str, Any]] = []  # events that must count
        self.aborted: list[dict[str, Any]] = []  # events that must never count
        self.tombstones: list[tuple[int, int]] = []  # (partition, offset)
        self.txn_partitions: dict[int, set[int]] = {}  # transaction -> partitions it wrote
        self.errors: list[str] = []
        self._seq = 0

    def event(self, tag: str) -> dict[str, Any]:
        i = self._seq
        self._seq += 1
        return {
            "event_id": f"{tag}-{i}",
            "event_time": T0 + (i * 397) % 180_000,  # three minutes, visited out of order
            "service": SERVICES[i % 3],
            "user_id": f"u{i % 97}",
            "latency_ms": float(5 + i % 200),
            "status": 503 if i % 17 == 0 else 200,
        }

    def send(
        self,
        producer: Producer,
        ev: dict[str, Any] | None,
        key: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        into: list | None = None,
        txn: int | None = None,
    ) -> None:
        value = None if ev is None else json.dumps(ev).encode()

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            elif ev is None:
                self.tombstones.append((msg.partition(), msg.offset()))
            if err is None and txn is not None:
                self.txn_partitions.setdefault(txn, set()).add(msg.partition())

        producer.produce(self.topic, value=value, key=key, headers=headers, on_delivery=report)
        if into is not None and ev is not None:
            into.append(ev)


def write_stream(bootstrap: str, topic: str) -> Stream:
    s = Stream(bootstrap, topic)
    plain = {}
    for codec in CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
        plain[codec] = p
        for k in range(300):
            ev = s.event(codec)
            key = None if k % 4 == 0 else ev["user_id"].encode()
            headers = [("trace-id", b"%d" % k), ("codec", codec.encode())] if k % 2 else None
            s.send(p, ev, key, headers, into=s.committed)
        for k in range(4):
            s.send(p, None, b"gone-%s-%d" % (codec.encode(), k))
        p.flush(30)
    tx = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tidegauge-test-{topic}",
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    tx.init_transactions(30)
    other = plain["zstd"]
    # committed, then aborted, then committed again; plain records land in between
    for txn, (outcome, n) in enumerate((("commit", 200), ("abort", 150), ("commit", 120))):
        tx.begin_transaction()
        for k in range(n):
            ev = s.event(f"tx-{outcome}")
            target = s.committed if outcome == "commit" else s.aborted
            headers = [("txn", outcome.encode())]
            s.send(tx, ev, ev["user_id"].encode(), headers, into=target, txn=txn)
            if k % 10 == 0:
                s.send(other, s.event("between"), None, into=s.committed)
        tx.flush(30)
        other.flush(30)
        if outcome == "commit":
            tx.commit_transaction(30)
        else:
            tx.abort_transaction(30)
    for p in plain.values():
        p.flush(30)
    assert not s.errors, s.errors
    return s


def windows_of(events: list[dict[str, Any]]) -> tuple[Counter, Counter]:
    counts: Counter[tuple[int, str]] = Counter()
    errors: Counter[tuple[int, str]] = Counter()
    for ev in events:
        start = ev["event_time"] - ev["event_time"] % WINDOW_MS
        for svc in (ev["service"], "*"):
            counts[(start, svc)] += 1
            errors[(start, svc)] += ev["status"] >= 500
    return counts, +errors


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, produce, job, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("producers")
    topic = "real-producers"
    url = module_redis_db().url
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    stream = write_stream(broker.address, topic)
    job(
        topic,
        url,
        str(tmp / "checkpoint"),
        redis_prefix=PREFIX,
        window="10s",
        allowed_lateness="1h",
        max_records_per_trigger="350",
    )
    rows = json.loads(
        tidegauge("query", "windows", "--redis", url, "--redis-prefix", PREFIX, "--json").stdout
    )
    return {"stream": stream, "rows": rows, "client": redis.Redis.from_url(url)}


def test_every_committed_event_counts_once_and_no_aborted_one(run: dict[str, Any]) -> None:
    stream: Stream = run["stream"]
    assert len(stream.committed) == 5 * 300 + 200 + 120 + 47 and len(stream.aborted) == 150
    counts, errors = windows_of(stream.committed)
    got = {(r["window_start"], r["service"]): r["count"] for r in run["rows"] if r["count"]}
    got_errors = {
        (r["window_start"], r["service"]): r["errors"] for r in run["rows"] if r["errors"]
    }
    assert got == dict(counts)
    assert got_errors == dict(errors)
    assert sum(r["late"] for r in run["rows"]) == 0  # nothing here is late: every event counts


def test_tombstones_are_empty_dead_letters(run: dict[str, Any]) -> None:
    stream: Stream = run["stream"]
    keys = Keys(PREFIX)
    assert read_dead_counts(run["client"], keys) == {"empty": len(CODECS) * 4}
    letters = read_dead_letters(run["client"], keys)
    assert {(d.partition, d.offset) for d in letters} == set(stream.tombstones)
    assert all(d.reason == "empty" and d.raw == b"" for d in letters)


def test_the_job_read_to_the_end_markers_included(run: dict[str, Any]) -> None:
    stream: Stream = run["stream"]
    status = read_status(run["client"], Keys(PREFIX))
    assert status is not None
    end = true_end_offsets(stream.bootstrap, stream.topic)
    assert status.offsets == end
    # each transaction leaves one marker in every partition it wrote to, and markers take
    # offsets: the log holds exactly that many more offsets than records
    records = len(stream.committed) + len(stream.aborted) + len(CODECS) * 4
    markers = sum(len(parts) for parts in stream.txn_partitions.values())
    assert len(stream.txn_partitions) == 3 and markers >= 3
    assert sum(end.values()) == records + markers


def test_a_codec_the_job_cannot_decode_stops_it_with_one_clear_line(
    broker,
    redis_settings,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    topic = "hidden-codec"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "1")
    stream = Stream(broker.address, topic)
    plain = Producer({"bootstrap.servers": broker.address, "linger.ms": 5})
    for _ in range(10):
        stream.send(plain, stream.event("plain"), None)
    plain.flush(30)
    packed = Producer(
        {"bootstrap.servers": broker.address, "compression.type": "lz4", "linger.ms": 5}
    )
    for _ in range(10):
        stream.send(packed, stream.event("lz4"), None)
    packed.flush(30)
    # the job's Python (driver, planner and workers) finds this `lz4` first, and it fails
    hide = tmp_path / "hide"
    (hide / "lz4").mkdir(parents=True)
    (hide / "lz4" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=str(hide), PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "job",
            "--bootstrap",
            broker.address,
            "--topic",
            topic,
            "--redis",
            redis_settings.url,
            "--redis-prefix",
            "hidden",
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--trigger",
            "available-now",
            "--master",
            "local[2]",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tidegauge job:")]
    assert lines == [
        f"tidegauge job: failed: cannot decode {topic}[0]: the record batch at offset 10 is "
        "compressed with lz4, and the lz4 library is not installed in this Python; install it "
        "with `pip install lz4` (a dependency of tidegauge: `make setup` installs it)"
    ], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
