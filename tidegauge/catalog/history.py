"""The catalog as versions in event time: which entry was in force for a service at a moment.

A stream-table join done right joins each event to the table *as it was at the event's time*
(DDIA's time-dependent join; Flink's `FOR SYSTEM_TIME AS OF`), not as it is when the event
happens to be processed: an event of 10:00 processed at 10:05, after its service changed
team at 10:02, belongs to the 10:00 team. So the catalog is kept as every service's versions,
each holding from its effective time (the entry's `effective_from`, else the broker time of its
record; a tombstone from its broker time), and `as_of` picks the one in force at a time. For
one effective time the later record wins. Versions that no event still open can need are
dropped by `prune`. Pure: no Kafka.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tidegauge.catalog.entry import CatalogEntry

__all__ = ["CatalogHistory", "CatalogRecord", "Version", "describe_change"]


@dataclass(frozen=True)
class CatalogRecord:
    """One record of the catalog topic, as read (value None: a tombstone)."""

    offset: int
    broker_ms: int
    service: str
    value: bytes | None
    partition: int = 0


@dataclass(frozen=True, order=True)
class Version:
    """A service's entry from `effective_ms` on (None: the service was removed)."""

    effective_ms: int
    offset: int
    entry: CatalogEntry | None = field(compare=False)


@dataclass
class CatalogHistory:
    """Every service's versions, in effective order, and the records that did not parse."""

    versions: dict[str, list[Version]] = field(default_factory=dict)
    #: (record, why) of the records whose value is not an entry: kept, never joined.
    rejected: list[tuple[CatalogRecord, str]] = field(default_factory=list)

    @classmethod
    def of(cls, records: Iterable[CatalogRecord]) -> CatalogHistory:
        """The history of a topic's records (any order: versions are placed by time)."""
        out = cls()
        for record in records:
            out.add(record)
        return out

    def add(self, record: CatalogRecord) -> Version | None:
        """Place one record; None (and kept in `rejected`) when its value is not an entry."""
        entry = None
        if record.value is not None:
            try:
                entry = CatalogEntry.from_bytes(record.value)
            except ValueError as e:
                self.rejected.append((record, str(e)))
                return None
        effective = record.broker_ms
        if entry is not None and entry.effective_from_ms is not None:
            effective = entry.effective_from_ms
        version = Version(effective, record.offset, entry)
        bisect.insort(self.versions.setdefault(record.service, []), version)
        return version

    def as_of(self, service: str, at_ms: int) -> CatalogEntry | None:
        """The entry in force for `service` at `at_ms` (None: none yet, or removed)."""
        versions = self.versions.get(service)
        if not versions:
            return None
        i = bisect.bisect_right([v.effective_ms for v in versions], at_ms)
        return versions[i - 1].entry if i else None

    def now(self) -> dict[str, CatalogEntry]:
        """The newest version of every service still in the catalog."""
        return {
            s: vs[-1].entry for s, vs in sorted(self.versions.items()) if vs[-1].entry is not None
        }

    def prune(self, horizon_ms: int) -> int:
        """Drop versions no time at or after `horizon_ms` can be joined to; return how many.

        The version in force at the horizon stays (events from it on may still need it), with
        everything after it; a service removed before the horizon goes altogether.
        """
        dropped = 0
        for service in list(self.versions):
            versions = self.versions[service]
            i = bisect.bisect_right([v.effective_ms for v in versions], horizon_ms)
            keep = versions[max(i - 1, 0) :]
            if keep and keep[0].entry is None and keep[0].effective_ms <= horizon_ms:
                keep = keep[1:]
            dropped += len(versions) - len(keep)
            if keep:
                self.versions[service] = keep
            else:
                del self.versions[service]
        return dropped

    def changes(self, service: str) -> Iterator[tuple[Version, str]]:
        """Each version of `service` in effective order, and what it changed."""
        before: CatalogEntry | None = None
        for version in self.versions.get(service, []):
            yield version, describe_change(service, before, version.entry)
            before = version.entry


def describe_change(service: str, before: CatalogEntry | None, after: CatalogEntry | None) -> str:
    """One line for an annotation: "checkout moved to team payments", "checkout removed"."""
    if after is None:
        return f"{service} removed from the catalog"
    if before is None:
        who = f"team {after.team}" if after.team else "no team"
        return f"{service} catalogued ({who}" + (f", tier {after.tier})" if after.tier else ")")
    parts = []
    if after.team != before.team:
        parts.append(f"moved to team {after.team}" if after.team else "has no team now")
    if after.tier != before.tier:
        parts.append(
            f"tier {before.tier} -> {after.tier}"
            if before.tier and after.tier
            else f"tier {after.tier}"
            if after.tier
            else "no tier"
        )
    if after.slo != before.slo:
        parts.append("SLO changed")
    if after.tags != before.tags:
        parts.append("tags changed")
    return f"{service} " + (", ".join(parts) if parts else "re-stated, unchanged")
