"""The closed-window memo's bookkeeping (tidegauge/core/closed_windows.py), without Redis."""

from __future__ import annotations

from tidegauge.core.closed_windows import ClosedWindows

STORE = ("epoch-1", "query-1")


def test_entries_live_while_the_store_and_watermark_hold() -> None:
    memo = ClosedWindows()
    assert memo.sync(STORE, 100) == 100 and memo.synced
    memo.put("aggs", "10000", 0, "a")
    assert memo.sync(STORE, 100) == 100
    assert memo.sync(STORE, 250) == 250  # the watermark moving on keeps what is closed
    assert memo.get("aggs", "10000", 0) == "a"
    assert memo.get("aggs", "10000", 10) is None
    assert memo.get("rows", "10000", 0) is None  # kinds are apart


def test_a_new_epoch_query_or_backwards_watermark_forgets_everything() -> None:
    for identity, watermark in (
        (("epoch-2", "query-1"), 300),  # the store was flushed and written again
        (("epoch-1", "query-2"), 300),  # a job from a fresh checkpoint
        (STORE, 99),  # the watermark went backwards
    ):
        memo = ClosedWindows()
        memo.sync(STORE, 200)
        memo.put("aggs", "10000", 0, "a")
        assert memo.sync(identity, watermark) == watermark
        assert memo.get("aggs", "10000", 0) is None
        assert memo.size("aggs") == 0


def test_no_epoch_or_no_watermark_means_no_reuse() -> None:
    memo = ClosedWindows()
    memo.sync(STORE, 200)
    memo.put("aggs", "10000", 0, "a")
    assert memo.sync(None, 200) is None and not memo.synced
    assert memo.get("aggs", "10000", 0) is None
    memo.sync(STORE, 200)
    assert memo.sync(STORE, None) is None and not memo.synced


def test_the_oldest_windows_go_first_when_full() -> None:
    memo = ClosedWindows(max_windows=10)
    memo.sync(STORE, 10**9)
    for start in range(11):
        memo.put("rows", "10000", start * 10_000, start)
    assert memo.size("rows") == 9  # down to 90 % at once, not one per put
    assert memo.get("rows", "10000", 0) is None and memo.get("rows", "10000", 10_000) is None
    assert memo.get("rows", "10000", 100_000) == 10


def test_the_least_recently_used_kinds_go_first_when_there_are_too_many() -> None:
    memo = ClosedWindows(max_kinds=3)
    memo.sync(("epoch", "query"), 1_000)
    for kind in ("rows", "rows|a", "rows|b"):
        memo.put(kind, "10000", 0, kind)
    assert memo.get("rows", "10000", 0) == "rows"  # used: now the most recent
    memo.put("rows|c", "10000", 0, "c")  # a fourth kind: the least recently used goes
    assert memo.get("rows|a", "10000", 0) is None
    assert [memo.get(k, "10000", 0) for k in ("rows", "rows|b", "rows|c")] == [
        "rows",
        "rows|b",
        "c",
    ]
