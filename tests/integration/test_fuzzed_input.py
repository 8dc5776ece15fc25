"""Fuzzed input through the whole job: bad records never hurt the good ones, and none is lost.

A seeded stream of valid events with over 10,000 fuzzed records mixed in (`tidegauge produce
--fuzz`: random bytes, invalid UTF-8, truncated and deeply nested JSON, NaN and Infinity, numbers
as strings, booleans, duplicate keys, nulls, reserved and too-long names, 64 KiB and 1 MB records,
empty keys and values...) goes through a real broker, `tidegauge job --trigger available-now`
and a real redis-server. Then: the job ran to the end, the valid events' windows equal the ground
truth exactly, the dead-letter counts per reason equal the generator's truth, and every dead
letter's stored bytes are the first 4,096 bytes of what was sent.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import pytest
import redis

from tests.conftest import flags
from tests.integration.helpers import (
    assert_clean_run,
    batch_rows,
    expected_windows,
    load_truth,
    tidegauge,
)
from tidegauge.core.events import DEAD_LETTER_RAW_CAP, Reason
from tidegauge.core.store import Keys, read_batches, read_dead_counts, read_dead_letters
from tidegauge.traffic.cli import add_arguments, config_from_args
from tidegauge.traffic.generator import generate

LATENESS_MS = 20_000
SEED = 11
START = "2026-01-01T00:00:00Z"


#: `tidegauge produce` options of the stream (besides broker, topic and truth file).
PRODUCE = {
    "start_time": START,
    "count": "22000",
    "rate": "200",
    "seed": str(SEED),
    "out_of_order_fraction": "0.05",
    "late_fraction": "0.02",
    "lateness": "20s",
    "malformed_fraction": "0.5",
    "fuzz": True,
}


def _sent_values() -> dict[int, bytes]:
    """Each malformed record's value by `seq`, made again from the same flags and seed.

    The truth file holds no values; the generator is deterministic, so it makes them again.
    """
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(flags(pace="fast", **PRODUCE)))
    return {r.seq: r.value for r in generate(cfg) if r.kind == "malformed"}


@pytest.fixture(scope="module")
def run(broker, module_redis_db, produce, job, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fuzz")
    topic = "fuzz-events"
    url = module_redis_db().url
    truth_path = tmp / "truth.jsonl"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic, "--partitions", "3")
    produce(topic, truth=str(truth_path), **PRODUCE)
    ran = job(
        topic,
        url,
        str(tmp / "checkpoint"),
        window="10s",
        allowed_lateness="20s",
        starting_offsets="earliest",
        # one batch: a first run, whose stop line must still name the next run's watermark
        dead_letter_max="20000",
    )
    return {
        "url": url,
        "truth": load_truth(truth_path),
        "job": ran,
        "checkpoint": tmp / "checkpoint",
        "client": redis.Redis.from_url(url),
    }


def test_the_stream_is_what_the_test_claims(run: dict) -> None:
    malformed = [t for t in run["truth"] if t["kind"] == "malformed"]
    assert len(malformed) >= 10_000
    reasons = Counter(t["reason"] for t in malformed)
    assert set(reasons) == {r.value for r in Reason}, "every reason is exercised"
    assert run["job"].returncode == 0


def test_valid_events_windows_are_exact(run: dict) -> None:
    truth, r = run["truth"], run["client"]
    accepted, late = expected_windows(
        batch_rows(truth, read_batches(r, Keys())), 10_000, LATENESS_MS
    )
    assert sum(accepted.values()) > 9_000
    rows = json.loads(tidegauge("query", "windows", "--redis", run["url"], "--json").stdout)
    got = {(w["window_start"], w["service"]): w["count"] for w in rows if w["count"]}
    got_late = {(w["window_start"], w["service"]): w["late"] for w in rows if w["late"]}
    assert got == dict(accepted)
    assert got_late == dict(late)


def test_dead_letters_per_reason_equal_the_truth(run: dict) -> None:
    malformed = [t for t in run["truth"] if t["kind"] == "malformed"]
    assert read_dead_counts(run["client"], Keys()) == dict(Counter(t["reason"] for t in malformed))


def test_every_dead_letter_keeps_the_bytes_that_were_sent(run: dict) -> None:
    truth = run["truth"]
    where = {(t["partition"], t["offset"]): t for t in truth if t["kind"] == "malformed"}
    sent = _sent_values()
    value_at = {key: sent[t["seq"]] for key, t in where.items()}
    letters = read_dead_letters(run["client"], Keys(), limit=20_000)
    assert {(d.partition, d.offset) for d in letters} == set(where)
    for d in letters:
        value = value_at[(d.partition, d.offset)]
        assert d.raw == value[:DEAD_LETTER_RAW_CAP], (d.partition, d.offset, d.reason)
        assert d.raw_size == len(value)
        assert d.reason == where[(d.partition, d.offset)]["reason"]
    assert max(d.raw_size for d in letters) == 1_000_000


def test_the_run_is_clean(run: dict) -> None:
    assert_clean_run(run["job"].stdout, run["job"].stderr, run["checkpoint"])
