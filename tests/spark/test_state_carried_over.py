"""A checkpoint whose state Spark's state store kept goes on, exactly, under the state log.

Jobs used to run their stateful step as an `applyInPandasWithState` keyed by (group, shard key),
the keys recorded in `<checkpoint>/state-keys.json`. This test runs that query (the state
function as it is, in Spark's state store, with keys that are not the shard numbers) over the
first part of a seeded stream, then today's job on the same checkpoint over the rest. The
windows open at the upgrade hold events of both runs; every window, its late rows and its
duplicates must equal the generator's ground truth over the whole stream, the rule replayed
independently (tests/spark/helpers.py, tests/integration/helpers.py): a state left behind would
count only the second run's events in those windows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

import jobs.pipeline as pipeline
from jobs.state.aggregate import StateGroup, make_state_fn
from jobs.state.codec import STATE_SCHEMA
from jobs.state.held import LOG_DIR, StateLog, read_file
from jobs.state.migrate import KEYS_FILE, SPARK_STATE_KEPT
from jobs.state.rows import OUTPUT_SCHEMA
from jobs.summary.schema import SummaryKind
from tests.integration.helpers import batch_rows, deduplicated, load_truth, tidegauge
from tests.spark.helpers import LATENESS_MS, accepted_events
from tidegauge.core.config import JobConfig
from tidegauge.core.store import Keys, read_batches, read_windows
from tidegauge.core.windows import WindowSpec

TUMBLING = WindowSpec.tumbling(10_000)
HOPPING = WindowSpec(30_000, 10_000)
SHARDS = 4
#: The state store's key of each shard, as such a checkpoint recorded them (not 0..3).
KEYS = (5, 2, 9, 0)
#: Today's stream: the watermarked summaries the read tasks hand the driver.
_SUMMARIES = pipeline.build_stream


def _rows_as_they_are(fn: Any, rows: Any, *_: Any, on_idle: Callable[[], object]) -> Any:
    """`apply_state` for a stream whose rows come out of Spark's stateful query already."""
    on_idle()
    return rows


def _spark_state_stream(spark: Any, cfg: JobConfig) -> DataFrame:
    """The stateful step as Spark ran it: grouped by (group, shard key), state in its store."""
    summaries = _SUMMARIES(spark, cfg)
    key_of = F.array(*[F.lit(k) for k in KEYS])
    kind = F.col("kind")
    routed = summaries.withColumn(
        "shard",
        F.explode(
            F.when(kind == SummaryKind.HEARTBEAT.value, key_of)
            .when(kind == SummaryKind.SHARD.value, F.array(key_of[F.col("shard")]))
            .otherwise(F.array(F.lit(0)))
        ),
    ).withColumn(
        "group",
        F.when(
            kind.isin(SummaryKind.DEAD.value, SummaryKind.TIMES.value), F.lit(StateGroup.DEAD.value)
        ).otherwise(F.lit(StateGroup.EVENT.value)),
    )
    fn = make_state_fn(pipeline.executor_config(cfg))

    def by_key(key: tuple[Any, ...], pdfs: Any, state: Any) -> Any:
        shard = KEYS.index(int(key[1])) if key[0] == StateGroup.EVENT else int(key[1])
        # the function yields Arrow tables; Spark's stateful operator takes pandas frames
        return (t.to_pandas() for t in fn((key[0], shard), pdfs, state))

    return routed.groupBy("group", "shard").applyInPandasWithState(
        by_key,
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="update",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )


@pytest.fixture(scope="module")
def run(
    broker, module_redis_db, produce, job_in_process, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("carried")
    topic = "carried-events"
    url = module_redis_db().url
    checkpoint = tmp / "checkpoint"
    tidegauge("topic", "--bootstrap", broker.address, "--topic", topic)
    common = {
        "rate": "100",
        "users": "300",
        "error_rate": "0.05",
        "out_of_order_fraction": "0.1",
        "max_delay": "5s",
        "late_fraction": "0.02",
        "lateness": "40s",
        "duplicate_fraction": "0.05",
    }
    options = {
        "window": ["10s", "30s/10s"],
        "allowed_lateness": "15s",
        "max_records_per_trigger": "1000",
        "state_shards": str(SHARDS),
    }
    # no late events in the first part: they are sent 40 s after their time, and the stream's
    # closing heartbeat would carry the watermark past the windows the second part reopens
    produce(topic, start_time="2026-03-01T00:00:00Z", count="4000", seed="3",
            truth=str(tmp / "truth1.jsonl"), **{**common, "late_fraction": "0"})  # fmt: skip
    checkpoint.mkdir()
    (checkpoint / KEYS_FILE).write_text(json.dumps({"shards": SHARDS, "keys": list(KEYS)}))
    with pytest.MonkeyPatch.context() as mp:
        # the job as it ran with Spark's state store: its rows come out of the stateful query
        mp.setattr(pipeline, "build_stream", _spark_state_stream)
        mp.setattr(pipeline, "apply_state", _rows_as_they_are)
        mp.setattr(pipeline, "StateLog", lambda _checkpoint: StateLog(None))
        job_in_process(topic, url, str(checkpoint), **options)
    assert (checkpoint / "state" / "0").is_dir() and not (checkpoint / LOG_DIR).exists()
    first = read_batches(redis.Redis.from_url(url), Keys())
    # the second half overlaps the first's last windows: they hold events of both runs
    produce(topic, start_time="2026-03-01T00:00:30Z", count="4000", seed="4",
            truth=str(tmp / "truth2.jsonl"), **common)  # fmt: skip
    job_in_process(topic, url, str(checkpoint), **options)
    r = redis.Redis.from_url(url)
    truth = load_truth(tmp / "truth1.jsonl") + load_truth(tmp / "truth2.jsonl")
    every = read_batches(r, Keys())
    kept, dups = deduplicated(batch_rows(truth, every), (TUMBLING, HOPPING), LATENESS_MS)
    return {
        "client": r,
        "checkpoint": checkpoint,
        "kept": kept,
        "dups": dups,
        "first": len(first),
        "every": every,
        "records": len(truth),
    }


def test_the_state_log_begins_with_the_state_stores_state(run: dict[str, Any]) -> None:
    checkpoint: Path = run["checkpoint"]
    files = sorted(int(f.name) for f in (checkpoint / LOG_DIR).iterdir() if f.name.isdigit())
    assert files and files[0] > run["first"] - 1  # the log goes on from the carried batch
    newest = read_file(checkpoint / LOG_DIR / str(files[-1]))
    assert {g for g, _ in newest} == {"event", "dead"}
    # shards named by their number, not by the store's key (5, 2, 9, 0)
    assert {s for g, s in newest if g == "event"} <= set(range(SHARDS))
    # Spark's store is moved aside whole (its metadata would refuse the new plan), not deleted
    assert not (checkpoint / "state").exists()
    (kept,) = checkpoint.glob(f"{SPARK_STATE_KEPT}-*")
    assert (kept / "0").is_dir() and int(kept.name.rsplit("-", 1)[1]) < files[0]


@pytest.mark.parametrize("spec", [TUMBLING, HOPPING], ids=["tumbling-10s", "hopping-30s-10s"])
def test_windows_across_the_upgrade_equal_the_truth(run: dict[str, Any], spec: WindowSpec) -> None:
    first = run["first"]
    expected = accepted_events(run["kept"], spec)
    before = accepted_events(run["kept"][:first], spec)
    stored = {(w.window_start, w.service): w for w in read_windows(run["client"], Keys(), spec)}
    assert {k for k, w in stored.items() if w.count} == set(expected)
    spanning = [k for k in expected if k in before and len(before[k]) < len(expected[k])]
    assert len(spanning) >= 6  # windows with events from both runs (services and `*`)
    for key, events in expected.items():
        w = stored[key]
        assert w.count == len(events), key
        assert w.errors == sum(1 for t in events if (t["status"] or 0) >= 500), key
        assert w.duplicates == run["dups"].get((spec.key, *key), 0), key
        lat = np.array([t["latency_ms"] for t in events if t["latency_ms"] is not None])
        assert w.latency_mean == pytest.approx(lat.mean(), rel=1e-9), key


def test_every_record_is_in_exactly_one_batch_of_the_two_runs(run: dict[str, Any]) -> None:
    ends: dict[str, int] = {}
    for b in run["every"]:
        for p, end in b["offsets"].items():
            assert b["start_offsets"].get(p, 0) == ends.get(p, 0), (b["batch_id"], p)
            ends[p] = end
    assert sum(ends.values()) == run["records"]
