"""A state shard's batch: its chunk summaries placed in Kafka order, routed, de-duplicated.

The read tasks send one `ChunkSummary` (jobs/summary/chunk.py) per state shard and chunk. The
state function applies each service's parts in Kafka order (by the first record of the service
in each chunk), whatever order the shuffle delivered them in, so the sketches depend only on the
batch's records and a replay is byte-identical. A `ShardBatch` places every (chunk, service)
part: the name it counts under (the cardinality guard may send it to the overflow service) and
its rank in Kafka order; `gather` then hands the state function one table of a kind (panes,
late aggregates, counts) for the whole shard, each row with its service and rank. Pure: no
Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from jobs.panes.dedup import SeenIds, first_occurrences, service_keys
from jobs.parse.columns import Columns, take_rows
from jobs.summary.chunk import ChunkSummary, Table, concat_tables, empty_table
from jobs.summary.late_events import concat
from jobs.summary.settings import ExecutorConfig
from jobs.summary.summarise import redo_summary
from tidegauge.core.dimensions import SEP
from tidegauge.core.events import ALL_SERVICES
from tidegauge.core.windows import ARRIVAL_DOMAINS

__all__ = ["ShardBatch"]

IntArray = npt.NDArray[np.int64]


def check_chunk(chunk: ChunkSummary, watermark_ms: int, shard: int, shards: int) -> None:
    """Refuse a summary made against another watermark or for another shard."""
    if chunk.watermark_ms != watermark_ms:
        raise RuntimeError(
            f"the read task applied watermark {chunk.watermark_ms} (from the offset log) but "
            f"Spark's watermark for this batch is {watermark_ms}: the summaries would be "
            "classified against the wrong watermark (jobs/source/offset_log.py)"
        )
    if (chunk.shard, chunk.shards) != (shard, shards):
        raise RuntimeError(
            f"a read task bundled services for shard {chunk.shard} of {chunk.shards}, but they "
            f"reached shard {shard} of {shards}: the read tasks and the state must use the same "
            "--state-shards (jobs/summary/shards.py)"
        )


@dataclass
class ShardBatch:
    """Every (chunk, service) part of a shard's batch, placed (see the module docstring)."""

    chunks: list[ChunkSummary]
    #: The names the parts count under, sorted: `service[c][i]` indexes it.
    names: list[str] = field(default_factory=list)
    #: Per chunk: each of its services' index into `names`, and rank in Kafka order.
    service: list[IntArray] = field(default_factory=list)
    rank: list[IntArray] = field(default_factory=list)
    #: Per chunk: services whose part was replaced (by a redone summary, appended as a chunk).
    dropped: list[npt.NDArray[np.bool_]] = field(default_factory=list)

    @classmethod
    def place(
        cls,
        chunks: Sequence[ChunkSummary],
        route: Callable[[str, int, int], str],
        watermark_ms: int,
    ) -> ShardBatch:
        """Rank the parts in Kafka order and name each by `route(name, seen_ms, events)`.

        `seen_ms` is the newest pane start of the part (the watermark if it has none) and
        `events` how many events it holds (accepted or late), as the guard counts them.
        """
        out = cls(list(chunks))
        first = [c.tables["services"] for c in chunks]
        partition = np.concatenate([f["partition"] for f in first]) if first else np.empty(0)
        offset = np.concatenate([f["offset"] for f in first]) if first else np.empty(0)
        order = np.lexsort((offset, partition))
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        sizes = [len(c) for c in chunks]
        at = np.cumsum([0, *sizes]).tolist()
        out.rank = [rank[a:b] for a, b in zip(at[:-1], at[1:], strict=True)]
        seen = [_newest_pane(c, watermark_ms) for c in chunks]
        events = [_events_of(c) for c in chunks]
        pair = np.repeat(np.arange(len(chunks)), sizes)
        within = np.concatenate([np.arange(n) for n in sizes]) if sizes else np.empty(0, np.int64)
        routed: list[list[str]] = [[""] * n for n in sizes]
        for k in order.tolist():
            c, i = int(pair[k]), int(within[k])
            routed[c][i] = route(chunks[c].names[i], int(seen[c][i]), int(events[c][i]))
        out.names = sorted({name for names in routed for name in names})
        index = {name: g for g, name in enumerate(out.names)}
        out.service = [np.array([index[n] for n in names], np.int64) for names in routed]
        out.dropped = [np.zeros(n, bool) for n in sizes]
        return out

    def dedup(self, ids: SeenIds, watermark_ms: int, cfg: ExecutorConfig) -> None:
        """Drop the events whose id was accepted before, for every service of the shard at once.

        De-duplication by event id (jobs/panes/dedup.py): each part's accepted ids are checked
        against the shard's ids (earlier batches) and the parts of its service before it in
        Kafka order; a part with a hit is summarised again without those events
        (`redo_summary`) and replaces the old part.
        """
        ids.evict(watermark_ms)  # ids whose windows all closed no longer make duplicates
        table = self.gather("ids")
        if not len(table["id"]):
            return
        order = np.lexsort((table["row"], table["rank"], table["service"]))
        table = {c: v[order] for c, v in table.items()}
        keys = service_keys(self.names)
        hashes = table["id"] ^ keys[table["service"]]
        owner = _owners(self.names)[table["service"]]
        follows = owner >= 0
        own = ~follows
        # Ids are distinct within a part: a repeat is of an earlier part of the service.
        hit = np.zeros(len(hashes), bool)
        hit[own] = ids.contains(hashes[own]) | ~first_occurrences(hashes[own])
        ids.add(hashes[own & ~hit], table["horizon"][own & ~hit])
        if follows.any():
            hit[follows] = _followed(table, hashes, hit, owner, keys)
        if not hit.any():
            return
        redo = sorted(
            set(zip(table["chunk"][hit].tolist(), table["part"][hit].tolist(), strict=True))
        )
        for c, i in redo:
            chunk = self.chunks[c]
            summary = chunk.service(i)
            mine = (table["chunk"] == c) & (table["part"] == i)
            seen = np.sort(table["id"][mine & hit])
            again = redo_summary(summary, seen, cfg)
            services = {k: v[i : i + 1] for k, v in chunk.tables["services"].items()}
            one = ChunkSummary.of_services(
                [chunk.names[i]], [again], services, chunk.specs, chunk.shard, chunk.shards
            )
            self.dropped[c][i] = True
            self.chunks.append(one)
            self.service.append(self.service[c][i : i + 1])
            self.rank.append(self.rank[c][i : i + 1])
            self.dropped.append(np.zeros(1, bool))

    def gather(self, name: str) -> Table:
        """Table `name` of every chunk, without replaced parts, with each row's placement.

        Added columns: `service` (now an index into `names`), `rank` (of its part in Kafka
        order), `chunk`, `part` (its service index in the chunk) and `row` (its row there).
        """
        parts = []
        for c, chunk in enumerate(self.chunks):
            table = chunk.tables[name]
            own = table["service"] if "service" in table else np.arange(len(chunk))
            keep = ~self.dropped[c][own]
            part = {k: v[keep] for k, v in table.items() if k != "service"}
            part["service"] = self.service[c][own[keep]]
            part["rank"] = self.rank[c][own[keep]]
            part["chunk"] = np.full(int(keep.sum()), c, np.int64)
            part["part"] = own[keep]
            part["row"] = np.flatnonzero(keep)
            parts.append(part)
        if not parts:
            empty = empty_table(name)
            return {  # (`services` has one row per service, no `service` column)
                **{k: v for k, v in empty.items() if k != "service"},
                **{k: np.empty(0, np.int64) for k in ("service", "rank", "chunk", "part", "row")},
            }
        return concat_tables(parts)

    def blobs(self, name: str, table: Table) -> list[bytes]:
        """The `panes` or `late` blobs of the rows of a gathered `table`."""
        chunks, rows = table["chunk"].tolist(), table["row"].tolist()
        source = [c.panes if name == "panes" else c.late for c in self.chunks]
        return [source[c][r] for c, r in zip(chunks, rows, strict=True)]

    def late_events(self) -> Columns:
        """Every part's late events, with the name each counts under in `service`."""
        table = self.gather("late_events")
        parts = []
        for c, chunk in enumerate(self.chunks):
            mine = table["chunk"] == c
            if not mine.any():
                continue
            rows = table["row"][mine]
            cols = take_rows(chunk.late_events, rows)
            cols["service"] = pa.array([self.names[g] for g in table["service"][mine].tolist()])
            parts.append(cols)
        return concat(parts) if parts else {}

    def sessions(self) -> dict[int, tuple[npt.NDArray[Any], IntArray, npt.NDArray[np.float64]]]:
        """Each service's session inputs (users, event times, lateness), parts in Kafka order."""
        table = self.gather("sessions")
        if not len(table["row"]):
            return {}
        users = np.empty(len(table["row"]), dtype=object)
        for c, chunk in enumerate(self.chunks):
            mine = table["chunk"] == c
            users[mine] = chunk.users[table["row"][mine]]
        order = np.lexsort((table["row"], table["rank"], table["service"]))
        service = table["service"][order]
        users, event_ms, lateness = users[order], table["event_ms"][order], table["lateness"][order]
        out = {}
        bounds = np.flatnonzero(np.diff(service)) + 1
        for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(service)], strict=True):
            out[int(service[lo])] = (users[lo:hi], event_ms[lo:hi], lateness[lo:hi])
        return out


def _owners(names: Sequence[str]) -> IntArray:
    """Per group: its service's group if it is a slice of a service, else -1.

    A service's slice follows its service's de-duplication; services and `*`'s slices keep
    ids of their own.
    """
    index = {name: g for g, name in enumerate(names)}
    out = np.full(len(names), -1, np.int64)
    for g, name in enumerate(names):
        if SEP in name:
            service = name.split(SEP, 1)[0]
            if service != ALL_SERVICES:
                out[g] = index.get(service, -1)
    return out


def _followed(
    table: Table,
    hashes: npt.NDArray[np.uint64],
    hit: npt.NDArray[np.bool_],
    owner: IntArray,
    keys: npt.NDArray[np.uint64],
) -> npt.NDArray[np.bool_]:
    """Which ids of the service slices' parts are duplicates.

    Those their service's part of the same chunk found to be: a slice's copy of an event is in
    the chunk its service's copy is in.
    """
    follows = owner >= 0
    as_service = table["id"][follows] ^ keys[owner[follows]]
    chunk = table["chunk"][follows]
    out = np.zeros(len(as_service), bool)
    dup = hit & ~follows
    for c in np.unique(chunk).tolist():
        found = np.sort(hashes[dup & (table["chunk"] == c)])
        if not len(found):
            continue
        mine = chunk == c
        at = np.searchsorted(found, as_service[mine]).clip(max=len(found) - 1)
        out[mine] = found[at] == as_service[mine]
    return out


def _newest_pane(chunk: ChunkSummary, watermark_ms: int) -> IntArray:
    out = np.full(len(chunk), watermark_ms, np.int64)
    panes = chunk.tables["panes"]
    if len(panes["start"]):
        has = np.zeros(len(chunk), bool)
        has[panes["service"]] = True
        newest = np.full(len(chunk), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(newest, panes["service"], panes["start"])
        out[has] = newest[has]
    return out


def _events_of(chunk: ChunkSummary) -> IntArray:
    """Events each part holds, accepted or late: its arrival counts in one time domain.

    Each event counts once per domain it has a time in, and broker time is on every record.
    """
    a = chunk.tables["arrivals"]
    per = np.zeros((len(chunk), len(ARRIVAL_DOMAINS)), np.int64)
    np.add.at(per, (a["service"], a["domain"]), a["events"])
    return per.max(axis=1) if len(chunk) else np.zeros(0, np.int64)
