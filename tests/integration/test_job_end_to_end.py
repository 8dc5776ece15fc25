"""The walking skeleton, end to end, through the CLI a user runs.

A seeded stream with out-of-order, late, duplicate and malformed records goes through a real
broker, `tidegauge job --trigger available-now` (a real local Spark) and a real redis-server;
`tidegauge query` must then show exactly the counts computed here from the generator's ground
truth and the job's recorded batch boundaries, and every malformed record must sit in the
dead-letter store with the reason the contract gives it.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import redis

from jobs.state.held import LOG_DIR, read_file
from tests.integration.helpers import (
    assert_clean_run,
    batch_rows,
    expected_corrections,
    expected_windows,
    load_truth,
    tidegauge,
)
from tidegauge.core.durations import to_iso
from tidegauge.core.store import (
    Keys,
    read_batches,
    read_dead_counts,
    read_dead_letters,
    read_status,
)

LATENESS_MS = 20_000
MAX_PER_TRIGGER = 1_000


@pytest.fixture(scope="module")
def run(broker, module_redis_db, produce, job, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[no-untyped-def]
    """Produce once, run the job once; the tests below look at the result from several sides."""
    tmp = tmp_path_factory.mktemp("e2e")
    topic = "e2e-events"
    url = module_redis_db().url
    truth_path = tmp / "truth.jsonl"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    produced = produce(
        topic,
        start_time="2026-01-01T00:00:00Z",
        count="6000",
        rate="100",
        seed="7",
        out_of_order_fraction="0.1",
        max_delay="8s",
        late_fraction="0.03",
        lateness="20s",
        malformed_fraction="0.01",
        duplicate_fraction="0.01",
        iso_fraction="0.1",
        heartbeat_interval="1s",
        truth=str(truth_path),
    )
    ran = job(
        topic,
        url,
        str(tmp / "checkpoint"),
        window="10s",
        allowed_lateness="20s",
        starting_offsets="earliest",
        max_records_per_trigger=str(MAX_PER_TRIGGER),
        # every record counts, duplicates too: this run's truth (de-duplication: test_dedup.py)
        no_dedup=True,
    )
    return {
        "url": url,
        "checkpoint": tmp / "checkpoint",
        "truth": load_truth(truth_path),
        "produced": produced.stdout,
        "job": ran.stdout,
        "job_stderr": ran.stderr,
        "client": redis.Redis.from_url(url),
    }


def test_batches_follow_the_rate_limit_and_cover_the_topic(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    batches = read_batches(r, Keys())
    assert batches, "the job recorded no batches"
    position = {p: 0 for p in ("0", "1", "2")}
    for b in batches:
        start = {p: b["start_offsets"].get(p, 0) for p in position}
        assert start == position, f"batch {b['batch_id']} does not start where the last ended"
        size = sum(b["offsets"][p] - start[p] for p in position)
        assert size <= MAX_PER_TRIGGER
        assert size == b["input_rows"]
        position = {p: b["offsets"][p] for p in position}
    ends = Counter()
    for t in truth:
        ends[str(t["partition"])] = max(ends[str(t["partition"])], t["offset"] + 1)
    assert position == dict(ends), "the job did not read the whole topic"
    assert len([b for b in batches if b["input_rows"]]) >= len(truth) // MAX_PER_TRIGGER
    # Where the topic ends, as the job asked Kafka (its batches' own ends are rate-limited):
    # what the dashboard's catch-up estimate reads (dashboard/job_status.py `catch_up`).
    told = [b["topic_end_offsets"] for b in batches if "topic_end_offsets" in b]
    assert told and all(t == {p: ends[p] for p in t} for t in told), told


def test_window_counts_equal_ground_truth(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    batches = read_batches(r, Keys())
    accepted, late = expected_windows(batch_rows(truth, batches), 10_000, LATENESS_MS)
    # The stream must exercise what it claims to test.
    assert sum(late.values()) > 20, "seeded stream produced too few late events to test lateness"
    assert any(t["intent"] == "out_of_order" for t in truth)

    out = tidegauge("query", "windows", "--redis", run["url"], "--json").stdout
    rows = json.loads(out)
    got = {(row["window_start"], row["service"]): row["count"] for row in rows if row["count"]}
    got_late = {(row["window_start"], row["service"]): row["late"] for row in rows if row["late"]}
    assert got == dict(accepted)
    assert got_late == dict(late)
    for row in rows:
        assert row["window_end"] - row["window_start"] == 10_000
        assert row["events_per_s"] == pytest.approx(row["count"] / 10)


def test_stragglers_and_revisions_equal_an_independent_replay(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    batches = read_batches(r, Keys())
    stragglers, revisions = expected_corrections(batch_rows(truth, batches), 10_000, LATENESS_MS)
    # The stream must exercise corrections: several windows revised, some more than once.
    assert sum(stragglers.values()) > 50
    assert max(revisions.values()) >= 2

    rows = json.loads(tidegauge("query", "windows", "--redis", run["url"], "--json").stdout)
    got = {(w["window_start"], w["service"]): w["stragglers"] for w in rows if w["stragglers"]}
    got_rev = {(w["window_start"], w["service"]): w["revision"] for w in rows if w["revision"]}
    assert got == dict(stragglers)
    assert got_rev == dict(revisions)
    # Every window is closed once the topic is drained and the watermark passed its end.
    status = json.loads(tidegauge("query", "status", "--redis", run["url"], "--json").stdout)
    for w in rows:
        assert w["closed"] == (w["window_end"] <= status["watermark"])


def test_every_malformed_record_is_a_dead_letter_with_its_reason(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    malformed = {(t["partition"], t["offset"]): t for t in truth if t["kind"] == "malformed"}
    assert len(malformed) >= 30
    letters = read_dead_letters(r, Keys())
    assert {(d.partition, d.offset) for d in letters} == set(malformed)
    for d in letters:
        t = malformed[(d.partition, d.offset)]
        assert d.reason == t["reason"], (d, t)
        assert d.detail
        assert d.raw_size >= len(d.raw)
    assert read_dead_counts(r, Keys()) == dict(Counter(t["reason"] for t in malformed.values()))

    shown = json.loads(
        tidegauge("query", "dead-letters", "--redis", run["url"], "--json", "--limit", "5").stdout
    )
    assert len(shown["letters"]) == 5
    assert sum(shown["counts"].values()) == len(malformed)


def test_status_reports_last_batch_watermark_and_offsets(run: dict) -> None:
    truth = run["truth"]
    status = json.loads(tidegauge("query", "status", "--redis", run["url"], "--json").stdout)
    batches = read_batches(run["client"], Keys())
    assert status["batch_id"] == batches[-1]["batch_id"]
    ends: dict[str, int] = {}
    for t in truth:
        ends[str(t["partition"])] = max(ends.get(str(t["partition"]), 0), t["offset"] + 1)
    assert status["offsets"] == ends
    max_time = max(t["event_time"] for t in truth if t["kind"] != "malformed")
    assert status["watermark"] == max_time - LATENESS_MS
    # the last batch's history entry: the state it left, as its file in the checkpoint holds it
    log_dir = run["checkpoint"] / LOG_DIR
    held = read_file(log_dir / str(batches[-1]["batch_id"]))
    assert batches[-1]["state_groups"] == len(held) >= 2  # the dead-letter group, event shards
    assert batches[-1]["state_bytes"] == sum(map(len, held.values()))


def _replay_overdue(truth: list[dict], batches: list[dict]) -> list[int | None]:
    """Per event: frontier before its batch - its window end (None before any frontier)."""
    out: list[int | None] = []
    frontier = None
    for rows in batch_rows(truth, batches):
        max_seen = frontier
        for t in rows:
            if t["kind"] in ("event", "duplicate", "heartbeat"):
                max_seen = t["event_time"] if max_seen is None else max(max_seen, t["event_time"])
            if t["kind"] in ("event", "duplicate"):
                end = t["event_time"] - t["event_time"] % 10_000 + 10_000
                out.append(None if frontier is None else frontier - end)
        frontier = max_seen
    return out


def test_what_if_lateness_matches_an_independent_replay(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    overdue = _replay_overdue(truth, read_batches(r, Keys()))
    values = [0, 1_000, 5_000, 10_000, 20_000, 30_000, 60_000]
    doc = json.loads(
        tidegauge(
            "query",
            "lateness",
            "--redis",
            run["url"],
            "--json",
            "--from",
            "2025-12-31T00:00:00Z",
            "--to",
            "2026-01-02T00:00:00Z",
            *[a for v in values for a in ("--allowed-lateness", f"{v}ms")],
        ).stdout
    )
    assert doc["events"] == len(overdue)
    assert doc["late"] == sum(1 for y in overdue if y is not None and y >= LATENESS_MS)
    for row in doc["what_if"]:
        lateness = row["allowed_lateness_ms"]
        expected = sum(1 for y in overdue if y is not None and y >= lateness) / len(overdue)
        assert row["fraction_late"] == pytest.approx(expected, abs=0.01), lateness
    # With the job's own allowed lateness the answer is the late share it really saw.
    actual = next(w for w in doc["what_if"] if w["allowed_lateness_ms"] == LATENESS_MS)
    assert actual["fraction_late"] == pytest.approx(doc["late"] / doc["events"], abs=0.005)
    # Beside ours, Spark's own counter over the same batches: this job lets Spark drop nothing.
    counters = doc["job_late_counters"]
    assert counters["tidegauge"] == doc["late"]
    assert counters["spark"] == 0


def test_time_domains_count_every_event_once(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    batches = read_batches(r, Keys())
    events = [t for t in truth if t["kind"] in ("event", "duplicate")]

    def series(domain: str) -> list[dict]:
        out = tidegauge("query", "arrivals", "--redis", run["url"], "--json", "--domain", domain)
        return [row for row in json.loads(out.stdout) if row["service"] == "*"]

    for domain in ("event", "processing", "broker"):
        rows = series(domain)
        assert sum(row["events"] for row in rows) == len(events), domain
    # Broker time: the Kafka record timestamp of each event, counted by its tumbling window.
    expected = Counter(t["receive_ms"] - t["receive_ms"] % 10_000 for t in events)
    assert {row["window_start"]: row["events"] for row in series("broker")} == dict(expected)
    # Processing time: a batch's events all land in the window of the batch's timestamp.
    per_batch = [
        sum(1 for t in rows if t["kind"] in ("event", "duplicate"))
        for rows in batch_rows(truth, batches)
    ]
    got = {row["window_start"]: row["events"] for row in series("processing")}
    assert sorted(got.values()) != [] and sum(got.values()) == sum(per_batch)


def test_late_events_are_kept_with_how_late_they_were(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    batches = read_batches(r, Keys())
    _, late = expected_windows(batch_rows(truth, batches), 10_000, LATENESS_MS)
    kept = json.loads(
        tidegauge(
            "query", "late-events", "--redis", run["url"], "--json", "--limit", "100000"
        ).stdout
    )
    assert len(kept) == sum(n for (_, svc), n in late.items() if svc == "*")
    by_pos = {(t["partition"], t["offset"]): t for t in truth}
    for e in kept:
        t = by_pos[(e["partition"], e["offset"])]
        assert (e["event_id"], e["event_time"], e["service"]) == (
            t["event_id"],
            t["event_time"],
            t["service"],
        )
        assert e["window_end"] <= e["watermark"] and e["behind_ms"] >= 0


def _nearest_rank(ages: list[int], q: float) -> int:
    return sorted(ages)[max(1, math.ceil(q * len(ages))) - 1]


def test_freshness_of_every_batch_equals_its_records_broker_times(run: dict) -> None:
    """Per batch: commit time - broker timestamp of each of its records, p50/p99/max exact."""
    truth, r = run["truth"], run["client"]
    batches = read_batches(r, Keys())
    measured = 0
    for b, rows in zip(batches, batch_rows(truth, batches), strict=True):
        fresh = b["freshness"]
        if not rows:
            assert fresh is None
            continue
        assert fresh["batch_id"] == b["batch_id"]
        # Committed while the batch ran.
        assert b["batch_time"] <= fresh["commit_time"] <= b["batch_time"] + b["batch_duration_ms"]
        ages = [fresh["commit_time"] - t["receive_ms"] for t in rows]
        assert fresh["records"] == len(rows) == b["input_rows"]
        assert fresh["p50_ms"] == _nearest_rank(ages, 0.5)
        assert fresh["p99_ms"] == _nearest_rank(ages, 0.99)
        assert fresh["max_ms"] == max(ages)
        measured += 1
    assert measured >= len(truth) // MAX_PER_TRIGGER
    status = read_status(r, Keys())
    assert status is not None
    last = [b for b in batches if b["freshness"]][-1]
    assert status.freshness == last["freshness"]


def test_a_successful_run_is_clean_and_says_where_the_next_starts(run: dict) -> None:
    assert_clean_run(run["job"], run["job_stderr"], run["checkpoint"])
    status = json.loads(tidegauge("query", "status", "--redis", run["url"], "--json").stdout)
    assert f"the next run starts at watermark {to_iso(status['watermark'])}" in run["job"]
