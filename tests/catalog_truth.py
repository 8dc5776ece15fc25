"""The catalog's as-of rule written from its definition (docs/catalog.md), for ground truth."""

from __future__ import annotations

from collections.abc import Iterable

from tidegauge.catalog.entry import CatalogEntry
from tidegauge.catalog.history import CatalogRecord


def entry_at(records: Iterable[CatalogRecord], service: str, at: int) -> CatalogEntry | None:
    """Of the service's records in force by `at` (from their `effective_from`, else their
    broker time), the one latest in (effective time, offset): its entry (None: a tombstone, or
    none in force)."""
    best: tuple[int, int] | None = None
    found = None
    for r in records:
        if r.service != service:
            continue
        entry = CatalogEntry.from_bytes(r.value) if r.value is not None else None
        eff = r.broker_ms
        if entry is not None and entry.effective_from_ms is not None:
            eff = entry.effective_from_ms
        if eff <= at and (best is None or (eff, r.offset) > best):
            best, found = (eff, r.offset), entry
    return found
