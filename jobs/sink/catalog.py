"""The catalog as the job joined it, published to Redis for the page, the alerts and `query`.

After each batch is written, the driver reads the catalog records that batch joined (the
offsets its planning logged in the checkpoint, jobs/summary/catalog.py) and, when they moved on,
writes the newest entry of every catalogued service to the hash `Keys.catalog` (service ->
entry JSON and the time it holds from) and each change as an event-time annotation on the
charts ("checkout moved to team core"). Both are idempotent: a replayed batch writes the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import redis

from jobs.summary.catalog import LOG_DIR
from tidegauge.catalog.history import CatalogHistory
from tidegauge.catalog.topic import CatalogFollower
from tidegauge.core.config import KafkaSettings
from tidegauge.core.store import Keys
from tidegauge.core.store.annotations import Annotation, write_annotations

__all__ = ["CatalogPublisher"]


class CatalogPublisher:
    """Follows the catalog topic on the driver; `publish(batch_id)` after each batch."""

    def __init__(self, kafka: KafkaSettings, checkpoint: str, keys: Keys) -> None:
        self.checkpoint = checkpoint
        self.keys = keys
        self._follower: CatalogFollower | None = None
        self._kafka = kafka
        self._published: dict[int, int] | None = None

    def publish(self, r: redis.Redis, batch_id: int) -> None:
        """Publish what batch `batch_id` joined, if it is more than the last batch's."""
        path = Path(self.checkpoint) / LOG_DIR / str(batch_id)
        if not path.exists():
            return  # a batch without records plans no catalog
        offsets = {int(p): int(o) for p, o in json.loads(path.read_text()).items()}
        if offsets == self._published:
            return
        if self._follower is None:
            self._follower = CatalogFollower(self._kafka)
        self._follower.catch_up(offsets)
        records = self._follower.below(offsets)
        history = CatalogHistory.of(records)
        pipe = r.pipeline(transaction=True)
        pipe.delete(self.keys.catalog)
        now = {s: vs[-1] for s, vs in sorted(history.versions.items()) if vs[-1].entry is not None}
        if now:
            pipe.hset(
                self.keys.catalog,
                mapping={
                    s: json.dumps(
                        {"entry": json.loads(v.entry.to_bytes()), "from": v.effective_ms},  # type: ignore[union-attr]
                        sort_keys=True,
                    )
                    for s, v in now.items()
                },
            )
        pipe.execute()
        # Each change once, when its record is new (after a restart: all of them again, which
        # changes nothing), in one round trip however large the catalog.
        before = self._published or {}
        fresh = {x.offset for x in records if x.offset >= before.get(x.partition, 0)}
        write_annotations(
            r,
            self.keys,
            [
                Annotation("catalog", change, "event", v.effective_ms, v.effective_ms, service)
                for service in history.versions
                for v, change in history.changes(service)
                if v.offset in fresh
            ],
        )
        self._published = offsets

    def close(self) -> None:
        """Close the catalog consumer."""
        if self._follower is not None:
            self._follower.close()
