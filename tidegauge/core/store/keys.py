"""The Redis key layout: every key Tidegauge uses, and every field format of its hashes.

Nothing else spells a key or parses a field: the sink writes through `Keys` and the field
helpers here, the read API reads through them (docs/redis.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import redis

from tidegauge.core.config import RedisSettings
from tidegauge.core.events import ALL_SERVICES as ALL_SERVICES  # the `*` field of every hash

T = TypeVar("T")


@dataclass(frozen=True)
class Keys:
    """Every Redis key Tidegauge uses, under one prefix (default `tg`)."""

    prefix: str = "tg"
    #: The prefix of the store a dimension's store belongs to (`by`): the job and its status
    #: are that store's.
    owner: str | None = None

    def window(self, spec: str, start_ms: int) -> str:
        """Hash: service -> JSON metrics of the window of `spec` (a WindowSpec key) at start."""
        return f"{self.prefix}:win:{spec}:{start_ms}"

    def window_aggs(self, spec: str, start_ms: int) -> str:
        """Hash: service -> serialised WindowAgg (counts, t-digest, HyperLogLog) of the window."""
        return f"{self.prefix}:agg:{spec}:{start_ms}"

    def window_index(self, spec: str) -> str:
        """Sorted set of window starts (member and score = start ms) of one window spec."""
        return f"{self.prefix}:win:{spec}:idx"

    def window_events(self, spec: str, start_ms: int) -> str:
        """Sorted set: service -> the window's events (tumbling windows and roll-ups only).

        The services' counts beside their aggregates, so ranking them over a range is one
        `ZUNION` inside Redis (tidegauge/core/store/ranking.py).
        """
        return f"{self.prefix}:evt:{spec}:{start_ms}"

    def window_errors(self, spec: str, start_ms: int) -> str:
        """Sorted set: service -> the window's errors (as `window_events`)."""
        return f"{self.prefix}:err:{spec}:{start_ms}"

    def window_late(self, spec: str, start_ms: int) -> str:
        """Hash: "service|batch_id" -> LateAgg bytes of the window's late rows in that batch."""
        return f"{self.prefix}:late:{spec}:{start_ms}"

    def window_stragglers(self, spec: str, start_ms: int) -> str:
        """Hash: "service|batch_id" -> stragglers of that window in that batch (one revision)."""
        return f"{self.prefix}:strag:{spec}:{start_ms}"

    def window_parts(self, spec: str, start_ms: int) -> str:
        """Hash: "service|shard" -> WindowAgg of the overflow service's part in one state shard.

        The service "(other)" (names beyond --max-services) is kept by every state shard; the
        window's "(other)" row is the merge of these parts.
        """
        return f"{self.prefix}:part:{spec}:{start_ms}"

    @property
    def open_parts(self) -> str:
        """Sorted set: the `window_parts` keys of windows not yet closed, score = window end.

        A part is only read to merge the next part of the same window; once the watermark has
        passed the window's end no part can come, so the sink deletes it (docs/redis.md).
        """
        return f"{self.prefix}:part:open"

    def window_duplicates(self, spec: str, start_ms: int) -> str:
        """Hash: "service|batch_id" -> duplicates of that window dropped in that batch."""
        return f"{self.prefix}:dup:{spec}:{start_ms}"

    def arrivals(self, domain: str, size_ms: int, start_ms: int) -> str:
        """Hash: "service|batch_id" -> JSON {events, late, stragglers, proc_ms}.

        The batch's events of one service in this processing-time or broker-time window.
        """
        return f"{self.prefix}:arr:{domain}:{size_ms}:{start_ms}"

    def arrivals_index(self, domain: str, size_ms: int) -> str:
        """Sorted set of window starts with arrivals in `domain`."""
        return f"{self.prefix}:arr:{domain}:{size_ms}:idx"

    @property
    def arrival_sizes(self) -> str:
        """Set of window sizes (ms) the arrival series are stored in."""
        return f"{self.prefix}:arr:sizes"

    @property
    def late_events(self) -> str:
        """Sorted set of late events (JSON members), score = broker timestamp (ms); capped."""
        return f"{self.prefix}:late:events"

    def late_index(self, spec: str) -> str:
        """Sorted set of window starts that have late rows."""
        return f"{self.prefix}:late:{spec}:idx"

    @property
    def window_specs(self) -> str:
        """Set of window spec keys ("10000" tumbling, "60000-10000" hopping) with data."""
        return f"{self.prefix}:win:specs"

    @property
    def services(self) -> str:
        """Set of every service with windows still kept."""
        return f"{self.prefix}:services"

    @property
    def dimensions(self) -> str:
        """Set of the dimensions (`--dimension`) with a store of their own (`by`)."""
        return f"{self.prefix}:dimensions"

    def by(self, dimension: str) -> Keys:
        """The store of a dimension's slices: the same layout under `{prefix}:by:{dimension}`.

        Its members ("services") are `service SEP value` and `* SEP value`
        (tidegauge/core/dimensions.py); its windows have no `*` row.
        """
        return Keys(f"{self.prefix}:by:{dimension}", owner=self.owner or self.prefix)

    @property
    def services_seen(self) -> str:
        """Sorted set: service -> start (ms) of its newest window; expires names with the data."""
        return f"{self.prefix}:services:seen"

    @property
    def retention(self) -> str:
        """Hash: the retention in force and how far each roll-up tier is built.

        `retention` (the `--retention` text), `source` (the spec key rolled up),
        `watermark` (the one the latest expiry ran with), `rolled:{size}` (roll-ups of that
        size exist for every period ending at or before it), tidegauge/core/retention.py.
        """
        return f"{self.prefix}:retention"

    @property
    def retention_sizes(self) -> str:
        """Hash: what one window of each spec and tier takes, measured for `--retention-size`.

        `bytes:{spec key}`, `bytes:arr:{domain}:{size}` (mean bytes, `MEMORY USAGE`) and
        `sized_at` (the batch timestamp they were measured at): measurements, not results,
        kept apart from them (jobs/sink/footprint.py).
        """
        return f"{self.prefix}:retention:sizes"

    @property
    def epoch(self) -> str:
        """String: a random token the sink sets when it first writes to an empty store.

        A flushed Redis gets a new one with the next batch, so readers that remember closed
        windows (`tidegauge.core.closed_windows`) know their memory is stale.
        """
        return f"{self.prefix}:epoch"

    @property
    def status(self) -> str:
        """Hash: the job's status after its latest batch."""
        return f"{self.prefix}:status"

    @property
    def job_status(self) -> str:
        """`status` of the store this one belongs to (the job's watermark and query id).

        A dimension's store has none of its own; its closed windows are judged by its job's.
        """
        return f"{self.owner or self.prefix}:status"

    @property
    def batches(self) -> str:
        """Sorted set: one JSON summary per batch, score = batch id (recent ones kept)."""
        return f"{self.prefix}:batches"

    @property
    def dead_letters(self) -> str:
        """Sorted set of dead letters (JSON members), score = Kafka timestamp (ms); capped."""
        return f"{self.prefix}:dead:letters"

    @property
    def control(self) -> str:
        """Hash of demo/scenario commands (`tidegauge.core.control` writes and parses it).

        `pause_until` (epoch ms): while the wall clock is before it, the job's Kafka source
        reports no new data, so the topic builds a backlog the job then catches up on
        (`--scenario backlog`, the dashboard's backlog button). `incident_until`,
        `incident_factor`, `incident_service` and `late_burst` are read by a generator
        running with `--live-commands`.
        """
        return f"{self.prefix}:control"

    @property
    def catalog(self) -> str:
        """Hash: service -> JSON {"entry": its newest catalog entry, "from": ms it holds from}.

        As the job last joined the catalog (tidegauge/catalog/, jobs/sink/catalog.py).
        """
        return f"{self.owner or self.prefix}:catalog"

    @property
    def annotations(self) -> str:
        """Sorted set: JSON annotations (demo commands, job starts), score = start (ms)."""
        return f"{self.prefix}:annotations"

    @property
    def alerts(self) -> str:
        """Hash: firing id -> JSON firing (`tidegauge.alerts.rules.Firing`), newest capped."""
        return f"{self.prefix}:alerts"

    @property
    def alert_rules(self) -> str:
        """Hash: rule key -> JSON {name, text} of the rules the evaluator runs."""
        return f"{self.prefix}:alerts:rules"

    @property
    def alert_outbox(self) -> str:
        """List: notices (JSON) written with the firings' state, awaiting webhook delivery."""
        return f"{self.prefix}:alerts:outbox"

    @property
    def alert_log(self) -> str:
        """List: every notice (JSON: firing, state, time), newest first, capped."""
        return f"{self.prefix}:alerts:log"

    @property
    def alert_heartbeat(self) -> str:
        """String: JSON {time, rules} the evaluator writes after every evaluation."""
        return f"{self.prefix}:alerts:heartbeat"

    @property
    def dead_counts(self) -> str:
        """Hash: reason -> number of dead letters ever seen (exact, not capped)."""
        return f"{self.prefix}:dead:count"


def connect(settings: RedisSettings) -> redis.Redis:
    """A client for `settings.url`; connection errors surface on first use."""
    return redis.Redis.from_url(settings.url, socket_connect_timeout=3, socket_timeout=10)


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


# --- field formats ----------------------------------------------------------------------------
# Late rows, stragglers, duplicates and arrivals are per-batch facts stored under "service|batch"
# fields, so a replayed batch overwrites its own field instead of adding to another.


def batch_field(service: str, batch_id: int) -> str:
    """The hash field of one service's per-batch fact: "service|batch"."""
    return f"{service}|{batch_id}"


def split_batch_field(field_name: bytes | str) -> tuple[str, int]:
    """(service, batch id) of a "service|batch" field (a service may itself contain "|")."""
    service, _, batch = _s(field_name).rpartition("|")
    return service, int(batch)


#: The batch id of a roll-up's folded facts: "service|-1" holds what every batch before the
#: roll-up was built brought to its windows, merged (batch ids are never negative).
FOLDED = -1


def straggler_value(value: bytes | str) -> tuple[int, int]:
    """(stragglers, revisions) of a straggler field's value.

    A batch's own field holds its count (one revision); a folded field "count/revisions",
    the sums over the windows it folds (a roll-up's revision is its windows' revisions added).
    """
    count, _, revisions = _s(value).partition("/")
    return int(count), int(revisions) if revisions else 1


def folded_stragglers(count: int, revisions: int) -> str:
    """The value of a folded straggler field (inverse of `straggler_value`)."""
    return f"{count}/{revisions}"


def per_service(fields: dict[Any, Any], value: Any) -> dict[str, int]:
    """Sum "service|batch" fields per service, and over all services as `*`.

    A roll-up's folded `*` field (its revisions, `straggler_revisions`) is not a service's:
    left out.
    """
    out: dict[str, int] = {}
    for k, v in fields.items():
        svc = split_batch_field(k)[0]
        if svc != ALL_SERVICES:
            out[svc] = out.get(svc, 0) + value(v)
    if out:
        out[ALL_SERVICES] = sum(out.values())
    return out


def straggler_counts(fields: dict[Any, Any]) -> dict[str, int]:
    """Stragglers per service and `*` (`per_service` of straggler fields)."""
    return per_service(fields, lambda v: straggler_value(v)[0])


def stragglers_of(fields: dict[Any, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """(`straggler_counts`, `straggler_revisions`) of one hash, in one pass over its fields."""
    counts: dict[str, int] = {}
    revisions: dict[str, int] = {}
    batches: set[int] = set()
    folded_all = 0
    for k, v in fields.items():
        svc, batch = split_batch_field(k)
        count, folded = straggler_value(v)
        n = folded if batch == FOLDED else 1
        if svc == ALL_SERVICES:
            folded_all += n
            continue
        counts[svc] = counts.get(svc, 0) + count
        revisions[svc] = revisions.get(svc, 0) + n
        if batch != FOLDED:
            batches.add(batch)
    if counts:
        counts[ALL_SERVICES] = sum(counts.values())
        revisions[ALL_SERVICES] = len(batches) + folded_all
    return counts, revisions


def straggler_revisions(fields: dict[Any, Any]) -> dict[str, int]:
    """Batches that corrected each service's window; `*` counts distinct batches.

    A roll-up's folded fields carry the sums of its windows' revisions, `*`'s included.
    """
    out: dict[str, int] = {}
    batches: set[int] = set()
    folded_all = 0
    for k, v in fields.items():
        svc, batch = split_batch_field(k)
        revisions = straggler_value(v)[1] if batch == FOLDED else 1
        if svc == ALL_SERVICES:
            folded_all += revisions
            continue
        out[svc] = out.get(svc, 0) + revisions
        if batch != FOLDED:
            batches.add(batch)
    if out:
        out[ALL_SERVICES] = len(batches) + folded_all
    return out


class ControlFields:
    """Field names of the control hash `Keys.control` (docs/events.md, "Live commands")."""

    PAUSE_UNTIL = "pause_until"
    INCIDENT_UNTIL = "incident_until"
    INCIDENT_FACTOR = "incident_factor"
    INCIDENT_SERVICE = "incident_service"
    INCIDENT_WHERE = "incident_where"
    LATE_BURST = "late_burst"
