"""`tidegauge produce` on the real broker: the truth file matches the topic, record by record.

Every record's Kafka timestamp must be the truth's `receive_ms` (the broker keeps the producer's
CreateTime), and control records (`--scenario backlog`) must reach Redis, never the topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from kafka import KafkaConsumer, TopicPartition

from tidegauge.config import KafkaSettings, RedisSettings
from tidegauge.events import Event, Heartbeat, Rejected, parse_record
from tidegauge.generator import HEARTBEAT_SOURCE, GeneratorConfig
from tidegauge.producer import produce
from tidegauge.services import free_port

T0 = 1_800_000_000_000
CLI = [sys.executable, "-m", "tidegauge.cli", "produce"]


def read_truth(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# kafka-python's ConsumerRecord.timestamp_type: 0 is CreateTime (the producer's timestamp).
CREATE_TIME = 0
TopicRecord = tuple[bytes | None, bytes | None, int, int]  # key, value, timestamp, its type


def read_topic(
    kafka: KafkaSettings, expected: int, timeout_s: float = 30
) -> dict[tuple[int, int], TopicRecord]:
    """Every record of the topic by (partition, offset). Stops at `expected` records (the truth's
    count: end_offsets is unreliable on Tansu), then polls a little longer to catch extras."""
    consumer = KafkaConsumer(
        bootstrap_servers=kafka.bootstrap, enable_auto_commit=False, group_id=None
    )
    try:
        parts = consumer.partitions_for_topic(kafka.topic) or set()
        tps = [TopicPartition(kafka.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        seen: dict[tuple[int, int], TopicRecord] = {}
        deadline = time.monotonic() + timeout_s
        extra_until: float | None = None
        while time.monotonic() < deadline:
            for tp, batch in consumer.poll(timeout_ms=500, max_records=10_000).items():
                for m in batch:
                    assert (tp.partition, m.offset) not in seen, "record delivered twice"
                    seen[(tp.partition, m.offset)] = (m.key, m.value, m.timestamp, m.timestamp_type)
            if len(seen) >= expected:
                extra_until = extra_until or time.monotonic() + 1.0
                if time.monotonic() >= extra_until:
                    break
        for tp in tps:  # the fetch high watermark is exact (unlike ListOffsets here)
            offsets = [off for (p, off) in seen if p == tp.partition]
            assert consumer.highwater(tp) == (max(offsets) + 1 if offsets else 0)
        return seen
    finally:
        consumer.close()


def expected_value(t: dict[str, Any]) -> Event | Heartbeat | Rejected:
    kind = t["kind"]
    if kind == "heartbeat":
        return Heartbeat(t["event_time"], t["partition"], HEARTBEAT_SOURCE)
    if kind == "malformed":
        return Rejected(t["reason"], "")
    return Event(
        t["event_id"],
        t["event_time"],
        t["service"],
        t["user_id"],
        t["latency_ms"],
        t["status"],
        t["sent_time"],
    )


def assert_topic_matches_truth(kafka: KafkaSettings, truth: list[dict[str, Any]]) -> None:
    controls = [t for t in truth if t["kind"] == "control"]
    assert all(t["partition"] is None and t["offset"] is None for t in controls)
    truth = [t for t in truth if t["kind"] != "control"]  # executed, never sent
    topic = read_topic(kafka, len(truth))
    assert set(topic) == {(t["partition"], t["offset"]) for t in truth}  # none missing or extra
    for t in truth:
        key, value, timestamp, timestamp_type = topic[(t["partition"], t["offset"])]
        assert key == t["key"].encode(), t
        # The broker keeps the producer's timestamp: the generator's receive time.
        assert (timestamp, timestamp_type) == (t["receive_ms"], CREATE_TIME), t
        got = parse_record(value)
        want = expected_value(t)
        if isinstance(want, Rejected):
            assert isinstance(got, Rejected) and got.reason == want.reason, (t, got)
        else:
            assert got == want, t
    # Send order is offset order within each partition (receive times need not be), and
    # duplicates sit right after their original, as a producer retry would put them.
    last: dict[int, int] = defaultdict(lambda: -1)
    for prev, t in zip([None, *truth], truth, strict=False):
        assert t["offset"] == last[t["partition"]] + 1
        last[t["partition"]] = t["offset"]
        if t["kind"] == "duplicate":
            assert prev is not None and prev["kind"] == "event"
            assert (prev["partition"], prev["offset"] + 1) == (t["partition"], t["offset"])
            assert prev["event_id"] == t["event_id"]


def test_every_knob_lands_where_the_truth_says(
    topic_factory: Callable[..., KafkaSettings], tmp_path: Path
) -> None:
    kafka = topic_factory(3)
    config = GeneratorConfig(
        seed=11,
        rate=4_000,
        count=19_000,
        pace="fast",
        start_time_ms=T0,
        partitions=3,
        users=2_000,
        anonymous_fraction=0.05,
        error_rate=0.02,
        out_of_order_fraction=0.1,
        max_delay_ms=2_000,
        late_fraction=0.03,
        lateness_ms=1_000,
        skew_fraction=0.2,
        max_skew_ms=30_000,
        duplicate_fraction=0.03,
        malformed_fraction=0.03,
        iso_fraction=0.2,
        heartbeat_interval_ms=250,
        network_delay_ms=400,
        scenarios=("late-burst",),
        burst_at_ms=2_000,
        burst_span_ms=60_000,
        burst_rate=5.0,
    )
    truth_path = tmp_path / "truth.jsonl"
    summary = produce(config, kafka, truth_path=truth_path)

    truth = read_truth(truth_path)
    kinds = Counter(t["kind"] for t in truth)
    assert [t["seq"] for t in truth] == list(range(len(truth)))
    assert summary.records == len(truth) > 19_000
    assert (summary.events, summary.duplicates, summary.malformed, summary.heartbeats) == (
        kinds["event"],
        kinds["duplicate"],
        kinds["malformed"],
        kinds["heartbeat"],
    )
    assert summary.events + summary.malformed == 19_000 + summary.buffered
    assert min(summary.duplicates, summary.malformed, summary.late, summary.out_of_order) > 0
    assert not summary.interrupted
    # Receive times are spread over the whole network delay.
    delays = [
        t["receive_ms"] - t["true_time"] - t["delay_ms"] for t in truth if t["kind"] == "event"
    ]
    assert min(delays) == 0 and max(delays) == 400
    # The late burst: 60 s of one device's buffering at 5/s, all on its user's partition,
    # back to back, oldest first.
    burst = [t for t in truth if t["intent"] == "buffered"]
    assert summary.buffered == len(burst) == 300
    assert len({t["partition"] for t in burst}) == 1
    offsets = [t["offset"] for t in burst]
    assert offsets == list(range(offsets[0], offsets[0] + 300))
    assert [t["true_time"] for t in burst] == sorted(t["true_time"] for t in burst)
    assert_topic_matches_truth(kafka, truth)


def test_cli_produces_and_summarises(
    topic_factory: Callable[..., KafkaSettings], tmp_path: Path
) -> None:
    kafka = topic_factory(3)
    truth_path = tmp_path / "truth.jsonl"
    proc = subprocess.run(
        [
            *CLI,
            "--bootstrap",
            kafka.bootstrap,
            "--topic",
            kafka.topic,
            "--pace",
            "fast",
            "--count",
            "3000",
            "--rate",
            "1000",
            "--malformed-fraction",
            "0.02",
            "--duplicate-fraction",
            "0.02",
            "--truth",
            str(truth_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    truth = read_truth(truth_path)
    kinds = Counter(t["kind"] for t in truth)
    out = proc.stdout
    assert f"sent {len(truth):,} records to {kafka.topic!r} (3 partitions)" in out
    assert f"events      {kinds['event']:>10,}" in out
    assert f"heartbeats  {kinds['heartbeat']:>10,}" in out
    assert "records/s" in out and "out-of-order" in out
    assert kinds["event"] + kinds["malformed"] == 3_000
    assert "Traceback" not in proc.stderr
    assert_topic_matches_truth(kafka, truth)


def test_sigterm_stops_cleanly(topic_factory: Callable[..., KafkaSettings], tmp_path: Path) -> None:
    kafka = topic_factory(3)
    truth_path = tmp_path / "truth.jsonl"
    proc = subprocess.Popen(
        [
            *CLI,
            "--bootstrap",
            kafka.bootstrap,
            "--topic",
            kafka.topic,
            "--rate",
            "300",
            "--truth",
            str(truth_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # running in realtime: wait for acknowledged records
            if truth_path.exists() and truth_path.stat().st_size > 0:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped early" in out
    truth = read_truth(truth_path)
    assert f"sent {len(truth):,} records" in out
    assert Counter(t["kind"] for t in truth)["event"] > 100
    assert_topic_matches_truth(kafka, truth)


def test_unreachable_broker_is_a_clean_error(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [
            *CLI,
            "--bootstrap",
            f"127.0.0.1:{free_port()}",
            "--topic",
            "nowhere",
            "--pace",
            "fast",
            "--count",
            "10",
            "--connect-timeout",
            "2s",
            "--truth",
            str(tmp_path / "t.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    assert "cannot reach Kafka at 127.0.0.1:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert elapsed < 15


def test_bad_flags_exit_2() -> None:
    proc = subprocess.run(
        [*CLI, "--pace", "fast", "--count", "5", "--duration", "5s"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "give --duration or --count, not both" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_backlog_pauses_the_job_through_redis(
    topic_factory: Callable[..., KafkaSettings],
    redis_settings: RedisSettings,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    """Realtime, 2 s of traffic; 750 ms in, the producer sets a 1 s pause in Redis (not Kafka)."""
    kafka = topic_factory(3)
    truth_path = tmp_path / "truth.jsonl"
    wall_before = time.time() * 1000
    proc = subprocess.run(
        [
            *CLI,
            "--bootstrap",
            kafka.bootstrap,
            "--topic",
            kafka.topic,
            "--rate",
            "100",
            "--duration",
            "2s",
            "--out-of-order-fraction",
            "0",
            "--scenario",
            "backlog",
            "--backlog-at",
            "750ms",
            "--backlog-pause",
            "1s",
            "--heartbeat-interval",
            "500ms",
            "--heartbeat-tail",
            "500ms",
            "--redis",
            redis_settings.url,
            "--redis-prefix",
            "tgx",
            "--truth",
            str(truth_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    wall_after = time.time() * 1000
    assert proc.returncode == 0, proc.stderr
    truth = read_truth(truth_path)
    (control,) = [t for t in truth if t["kind"] == "control"]
    assert control["key"] == "__control__"
    assert "controls             1   executed in Redis, not sent" in proc.stdout

    raw = redis_client.hget("tgx:control", "pause_until")
    assert raw is not None and redis_client.hkeys("tg:control") == []
    pause_until = int(raw)
    # Realtime pace pins the generator clock to the wall clock, so the control record's time is
    # the wall time it was due; the producer ran it then (a little late at worst), adding 1 s.
    due = control["receive_ms"]
    assert due + 1_000 <= pause_until <= due + 1_000 + 500
    assert wall_before + 750 + 1_000 <= pause_until <= wall_after
    first_beat = min(t["receive_ms"] for t in truth if t["kind"] == "heartbeat")
    assert due - first_beat == 250  # start + 500 ms vs start + 750 ms

    # The last event is ~2 s in, then a 500 ms heartbeat tail, paced on the wall clock too.
    start = first_beat - 500
    assert truth[-1]["kind"] == "heartbeat" and truth[-1]["receive_ms"] == start + 2_500
    assert wall_after - wall_before >= 2_500
    assert_topic_matches_truth(kafka, truth)  # all but the control record, and nothing else


def test_backlog_needs_a_reachable_redis(tmp_path: Path) -> None:
    truth_path = tmp_path / "t.jsonl"
    port = free_port()
    proc = subprocess.run(
        [
            *CLI,
            "--bootstrap",
            f"127.0.0.1:{free_port()}",
            "--scenario",
            "backlog",
            "--duration",
            "2s",
            "--redis",
            f"redis://127.0.0.1:{port}/0",
            "--connect-timeout",
            "2s",
            "--truth",
            str(truth_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    # Checked before Kafka is even tried, so nothing was sent and no truth was written.
    assert f"--scenario backlog: cannot reach Redis at redis://127.0.0.1:{port}/0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not truth_path.exists()


def test_backlog_needs_realtime_pace() -> None:
    proc = subprocess.run(
        [*CLI, "--pace", "fast", "--count", "5", "--scenario", "backlog"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--scenario backlog needs --pace realtime" in proc.stderr
    assert "Traceback" not in proc.stderr
