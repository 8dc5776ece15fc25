"""`tidegauge produce` on the real broker: the truth file matches the topic, record by record.

Every record's Kafka timestamp must be the truth's `receive_ms` (the broker keeps the producer's
CreateTime), and control records (`--scenario backlog`) must reach Redis, never the topic. With
`--live-commands`, commands written through `tidegauge.core.control` while the producer runs change
what it sends, and the truth says so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from kafka import KafkaConsumer, TopicPartition
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cli.local.services import free_port, start_broker, start_redis
from jobs.source.kafka_log import LogClient
from jobs.source.log_batches import LogRecord
from tests import procs
from tidegauge.core.codecs import codec_by_name
from tidegauge.core.config import KafkaSettings, RedisSettings
from tidegauge.core.control import request_late_burst, request_pause, start_incident
from tidegauge.core.events import Event, Heartbeat, Rejected, parse_record
from tidegauge.core.store import Keys
from tidegauge.traffic.config import GeneratorConfig
from tidegauge.traffic.generator import generate
from tidegauge.traffic.producer import produce
from tidegauge.traffic.records import HEARTBEAT_SOURCE

T0 = 1_800_000_000_000
CLI = [sys.executable, "-m", "cli.main", "produce"]


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


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_writes_batches_in_that_codec(
    topic_factory: Callable[..., KafkaSettings],
    produce: Callable[..., Any],
    tmp_path: Path,
    codec: str,
) -> None:
    kafka = topic_factory(2)
    truth_path = tmp_path / "truth.jsonl"
    produce(
        kafka.topic,
        partitions=2,
        count=600,
        malformed_fraction=0.02,
        compression=codec,
        truth=truth_path,
    )
    truth = read_truth(truth_path)
    assert_topic_matches_truth(kafka, truth)  # what a consumer reads back is what was meant
    # and on the broker, the data batches really are in that codec
    client = LogClient(kafka.bootstrap, kafka.topic, client_id="test")
    try:
        codecs: Counter[str] = Counter()
        for p in (0, 1):
            end = max(t["offset"] for t in truth if t["partition"] == p) + 1
            pos, deadline = 0, time.monotonic() + 30
            while pos < end and time.monotonic() < deadline:
                batches = client.fetch(p, pos).batches  # may be empty: the broker was quick
                for b in batches:
                    if not b.records:
                        continue
                    codecs[b.codec] += 1
                    if b.codec == "none":  # allowed only where the codec would not have helped
                        assert not _compression_pays(b.records, codec), (p, b.base_offset)
                pos = batches[-1].next_offset if batches else pos
            assert pos >= end
    finally:
        client.close()
    assert codecs[codec] > 0 and set(codecs) <= {codec, "none"}, codecs


def _compression_pays(records: Sequence[LogRecord], codec: str) -> bool:
    """Whether kafka-python's producer would have sent these records compressed with `codec`.

    Its batch builder sends a batch uncompressed when compressing does not make it smaller (a
    batch of one or two short records, say), so a `none` batch from a compressing producer is
    right exactly when rebuilding it with the codec still comes out uncompressed.
    """
    wire_id = codec_by_name(codec).wire_id
    builder = DefaultRecordBatchBuilder(2, wire_id, False, -1, -1, -1, 1 << 20)
    base = records[0].offset
    for r in records:
        builder.append(r.offset - base, r.timestamp_ms, r.key, r.value, [])
    return DefaultRecordBatch(bytes(builder.build())).compression_type != 0


def test_compression_with_an_unknown_codec_exits_2() -> None:
    proc = subprocess.run(
        [*CLI, "--pace", "fast", "--count", "5", "--compression", "brotli"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "invalid choice: 'brotli'" in proc.stderr and "zstd" in proc.stderr


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
        # running in realtime: stop it once a fair number of records were acknowledged
        def events_acknowledged() -> int:
            lines = truth_path.read_text().splitlines() if truth_path.exists() else []
            return sum(json.loads(line)["kind"] == "event" for line in lines)

        procs.wait_until(lambda: events_acknowledged() > 150, 30, "150 acknowledged events")
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


def test_a_stop_after_the_broker_went_away_is_bounded(tmp_path: Path) -> None:
    """A supervisor stopping everything at once stops the broker too: the records still pending
    then get a few seconds, not a minute, and the generator says what it could not confirm."""
    broker = start_broker(log_path=tmp_path / "broker.log")
    truth_path = tmp_path / "truth.jsonl"
    proc = subprocess.Popen(
        [*CLI, "--bootstrap", broker.address, "--topic", "gone", "--rate", "500"]
        + ["--truth", str(truth_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        procs.wait_until(
            lambda: truth_path.exists() and len(truth_path.read_text().splitlines()) > 100,
            30,
            "100 acknowledged records",
        )
        broker.proc.kill()
        broker.proc.wait(5)
        time.sleep(0.5)  # records sent after the broker died wait for their acknowledgement
        stopped = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
        broker.stop()
    assert elapsed < 10, (elapsed, err)
    assert proc.returncode == 1, err
    said = r"stopped, but [\d,]+ records sent to 'gone' were not acknowledged within 5s"
    assert re.search(said, err), err
    assert "Traceback" not in err
    truth = read_truth(truth_path)  # every line whole: the acknowledged records, in order
    assert len(truth) > 100
    assert [t["seq"] for t in truth] == sorted(t["seq"] for t in truth)


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


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--count", "5", "--duration", "5s"], "give --duration or --count, not both"),
        (["--count", "5", "--live-commands"], "--live-commands needs --pace realtime"),
    ],
)
def test_bad_flags_exit_2(flags: list[str], message: str) -> None:
    proc = subprocess.run(
        [*CLI, "--pace", "fast", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
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


# --- live commands (tidegauge.core.control) ---------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


def _start_live_producer(
    kafka: KafkaSettings, redis_url: str, truth_path: Path, *flags: str
) -> subprocess.Popen[str]:
    """A realtime producer with --live-commands, started once it has records acknowledged."""
    proc = subprocess.Popen(
        [
            *CLI,
            "--bootstrap",
            kafka.bootstrap,
            "--topic",
            kafka.topic,
            "--heartbeat-interval",
            "500ms",
            "--live-commands",
            "--redis",
            redis_url,
            "--redis-prefix",
            "tgl",
            "--truth",
            str(truth_path),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (truth_path.exists() and truth_path.stat().st_size > 0):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the producer did not start: {out}\n{err}")
        time.sleep(0.05)
    return proc


def _plain_run(truth: list[dict[str, Any]], **knobs: Any) -> dict[str | None, Any]:
    """The same run without commands, from the pure generator: its events by id.

    Realtime pace starts event time at the producer's start, which the first heartbeat gives
    away (it is due 500 ms after it).
    """
    start = min(t["receive_ms"] for t in truth if t["kind"] == "heartbeat") - 500
    config = GeneratorConfig(pace="realtime", heartbeat_interval_ms=500, **knobs)
    return {r.event_id: r for r in generate(config, start) if r.kind == "event"}


def _scaled(t: dict[str, Any], plain: dict[str | None, Any], factor: float) -> bool:
    """Whether the event went out with `factor` times its plain latency (else: unchanged)."""
    base = plain[t["event_id"]]
    assert (t["true_time"], t["service"], t["user_id"]) == (
        base.true_time,
        base.service,
        base.user_id,
    )
    if t["latency_ms"] == base.latency_ms:
        assert t["status"] == base.status, t
        return False
    assert t["latency_ms"] == pytest.approx(base.latency_ms * factor, abs=6e-4), t
    assert t["status"] in (base.status, 500, 502, 503, 504), t  # an incident may add 5xx only
    return True


def test_live_commands_change_what_is_sent(
    topic_factory: Callable[..., KafkaSettings],
    redis_settings: RedisSettings,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    """While a real producer runs, the dashboard's three commands go in through control.py.

    Checked against the same run computed without commands: only `api` latencies inside the
    incident change (x5, from one switch point on, until its end), one burst of 30 buffered
    events appears once (though its request is read again every second), nothing else differs,
    and the topic holds exactly what the truth says.
    """
    kafka = topic_factory(3)
    truth_path = tmp_path / "truth.jsonl"
    keys = Keys("tgl")
    proc = _start_live_producer(
        kafka, redis_settings.url, truth_path, "--seed", "21", "--rate", "200", "--duration", "9s"
    )
    try:
        issued = _now_ms()
        incident = start_incident(redis_client, keys, issued, duration_ms=4_000, service="api")
        time.sleep(0.3)
        burst = request_late_burst(redis_client, keys, _now_ms(), span_ms=30_000)
        pause_until = request_pause(redis_client, keys, _now_ms(), pause_ms=60_000)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err

    truth = read_truth(truth_path)
    plain = _plain_run(truth, seed=21, rate=200, duration_ms=9_000)
    events = [t for t in truth if t["kind"] == "event"]
    ordinary = [t for t in events if t["intent"] != "buffered"]
    assert {t["event_id"] for t in ordinary} == set(plain)

    # The incident: `api` only; plain until one switch point (the first poll after the
    # request, so between ~1 s before it, for a lagging producer, and ~3 s after), then x5
    # until its end, then plain again.
    assert not any(_scaled(t, plain, 5.0) for t in ordinary if t["service"] != "api")
    api = sorted((t for t in ordinary if t["service"] == "api"), key=lambda t: t["true_time"])
    flags = [_scaled(t, plain, 5.0) for t in api]
    first = flags.index(True)
    switch = api[first]["true_time"]
    assert issued - 1_000 <= switch <= issued + 3_000
    for t, scaled in zip(api[first:], flags[first:], strict=True):
        assert scaled == (t["true_time"] < incident.until_ms), t
    assert not any(flags[:first])
    assert sum(flags) > 50  # ~80 api events a second, for 1-3 s

    # The burst: exactly once, 30 s at 1 event/s, all sent when the request was picked up.
    buffered = [t for t in events if t["intent"] == "buffered"]
    ids = [t["event_id"] for t in buffered]
    assert ids == [f"15-r{burst.id}-{k:07d}" for k in range(30)]
    (sent_at,) = {t["true_time"] + t["delay_ms"] for t in buffered}
    assert burst.id - 1_000 <= sent_at <= burst.id + 3_000  # picked up by the next poll
    assert all(sent_at - 30_000 <= t["true_time"] < sent_at for t in buffered)
    assert len({t["user_id"] for t in buffered}) == 1

    assert_topic_matches_truth(kafka, truth)  # what was sent is what the truth says
    assert (
        "commands             3   live from Redis: incidents 1, late bursts 1 (30 events), "
        "pauses seen 1" in out
    )
    assert "incident: latency x5 for 'api' until" in err
    assert f"late burst {burst.id}: 30 buffered events of user" in err
    assert "pause of the job until" in err
    assert int(redis_client.hget("tgl:control", "pause_until") or 0) == pause_until


def test_live_commands_survive_a_redis_outage(
    topic_factory: Callable[..., KafkaSettings], tmp_path: Path
) -> None:
    """Redis goes away mid-run: a warning, the run goes on, the last incident stays in force."""
    kafka = topic_factory(3)
    truth_path = tmp_path / "truth.jsonl"
    server = start_redis(log_path=tmp_path / "redis.log")
    url = f"redis://{server.address}/0"
    try:
        proc = _start_live_producer(
            kafka, url, truth_path, "--seed", "4", "--rate", "100", "--duration", "6s"
        )
        try:
            client = redis.Redis.from_url(url)
            issued = _now_ms()
            start_incident(client, Keys("tgl"), issued, duration_ms=600_000, factor=3.0)
            client.close()
            time.sleep(2.0)  # a poll or two read it
            server.stop()
            gone = _now_ms()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        server.stop()
    assert proc.returncode == 0, err
    assert "cannot read live commands from Redis at" in err
    assert "keeping the last commands and sending on" in err
    assert err.count("cannot read live commands") == 1  # once per problem, not once a second
    assert "Traceback" not in err

    truth = read_truth(truth_path)
    plain = _plain_run(truth, seed=4, rate=100, duration_ms=6_000)
    events = [t for t in truth if t["kind"] == "event"]
    assert {t["event_id"] for t in events} == set(plain)  # all of the run was sent
    after = [t for t in events if t["true_time"] > gone + 500]
    assert len(after) > 100  # > 1 s of the run after Redis went away ...
    assert all(_scaled(t, plain, 3.0) for t in after)  # ... still under the incident
    assert all(not _scaled(t, plain, 3.0) for t in events if t["true_time"] < issued - 1_000)
    assert "incidents 1, late bursts 0 (0 events), pauses seen 0" in out
    assert_topic_matches_truth(kafka, truth)


def test_live_commands_need_a_reachable_redis(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.run(
        [
            *CLI,
            "--bootstrap",
            f"127.0.0.1:{free_port()}",
            "--live-commands",
            "--redis",
            f"redis://127.0.0.1:{port}/0",
            "--connect-timeout",
            "2s",
            "--truth",
            str(tmp_path / "t.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"--live-commands: cannot reach Redis at redis://127.0.0.1:{port}/0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_junk_in_the_control_hash_is_ignored_until_fixed(
    topic_factory: Callable[..., KafkaSettings],
    redis_settings: RedisSettings,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    """Junk left in the hash warns once and sends on; a valid request afterwards works."""
    kafka = topic_factory(3)
    truth_path = tmp_path / "truth.jsonl"
    redis_client.hset("tgl:control", "late_burst", "not json")
    proc = _start_live_producer(
        kafka, redis_settings.url, truth_path, "--rate", "100", "--duration", "4s"
    )
    try:
        time.sleep(1.5)  # polls see the same junk: no new warning
        burst = request_late_burst(redis_client, Keys("tgl"), _now_ms(), span_ms=12_000)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert err.count("control field late_burst is not JSON: 'not json'") == 1, err
    assert "live commands: reading tgl:control again" in err
    truth = read_truth(truth_path)
    buffered = [t["event_id"] for t in truth if t["intent"] == "buffered"]
    assert buffered == [f"0-r{burst.id}-{k:07d}" for k in range(12)]
    assert "late bursts 1 (12 events)" in out
