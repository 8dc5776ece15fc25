"""Alert firings in Redis: written with their notices in one transaction, read by everyone.

The evaluator (`tidegauge alerts`) writes each evaluation's firings, the notices of the ones
whose state changed (to the outbox the webhook sender drains, and to the log `query alerts`
prints) and its heartbeat in one MULTI/EXEC: a restarted evaluator finds the states it left
and re-sends nothing it already queued, and a notice is never lost between the state change
and its delivery (the outbox keeps it until a webhook took it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from tidegauge.alerts.rules import Firing, Rule
from tidegauge.core.durations import to_iso
from tidegauge.core.store.keys import Keys, _s

__all__ = [
    "FIRINGS_KEPT",
    "LOG_KEPT",
    "AlertHeartbeat",
    "notice",
    "read_alert_heartbeat",
    "read_alert_log",
    "read_firings",
    "write_evaluation",
]

#: Firings kept (the newest by start); older ones are forgotten.
FIRINGS_KEPT = 1_000
#: Notices kept in the log.
LOG_KEPT = 1_000


def notice(f: Firing, now_ms: int) -> dict[str, Any]:
    """What a state change is told as (webhook body, log entry).

    A firing with labels (the SLO burn-rate rules') is also told the way Alertmanager's
    webhook tells an alert (`status`, `alerts` with `labels`, `annotations`, `startsAt`,
    `endsAt`), so receivers built for Alertmanager take it as it is; a retraction is resolved.
    """
    out: dict[str, Any] = {
        "kind": "tidegauge.alert",
        "state": f.state,
        "time": now_ms,
        "firing": f.to_dict(),
    }
    if f.labels:
        status = "resolved" if f.state == "retracted" else "firing"
        labels = {**f.labels, "state": f.state}
        out |= {
            "version": "4",
            "status": status,
            "commonLabels": labels,
            "alerts": [
                {
                    "status": status,
                    "labels": labels,
                    "annotations": {"summary": f.text, "rule": f.rule_name},
                    "startsAt": to_iso(f.start),
                    "endsAt": to_iso(f.end) if status == "resolved" else "0001-01-01T00:00:00Z",
                    "fingerprint": f.id,
                }
            ],
        }
    return out


def write_evaluation(
    r: redis.Redis,
    keys: Keys,
    rules: Sequence[Rule],
    firings: Iterable[Firing],
    changed: Sequence[Firing],
    now_ms: int,
    deliver: bool = True,
    stored: Iterable[Firing] = (),
) -> None:
    """Store every firing, queue and log the notices of `changed`, in one transaction.

    `stored`: the firings as read before this evaluation; those unchanged are not rewritten
    (an evaluator running every second would otherwise rewrite up to `FIRINGS_KEPT` each time).
    """
    all_firings = sorted(firings, key=lambda f: f.start, reverse=True)
    kept, dropped = all_firings[:FIRINGS_KEPT], all_firings[FIRINGS_KEPT:]
    before = {f.id: f for f in stored}
    rewrite = [f for f in kept if before.get(f.id) != f]
    notices = [json.dumps(notice(f, now_ms), sort_keys=True) for f in changed]
    pipe = r.pipeline(transaction=True)
    if rewrite:
        pipe.hset(
            keys.alerts, mapping={f.id: json.dumps(f.to_dict(), sort_keys=True) for f in rewrite}
        )
    if dropped:
        pipe.hdel(keys.alerts, *[f.id for f in dropped])
    pipe.delete(keys.alert_rules)
    if rules:
        pipe.hset(
            keys.alert_rules,
            mapping={
                rule.key: json.dumps({"name": rule.name, "text": rule.describe()}) for rule in rules
            },
        )
    if notices:
        if deliver:
            pipe.rpush(keys.alert_outbox, *notices)
        pipe.lpush(keys.alert_log, *notices)
        pipe.ltrim(keys.alert_log, 0, LOG_KEPT - 1)
    pipe.set(keys.alert_heartbeat, json.dumps({"time": now_ms, "rules": len(rules)}))
    pipe.execute()


def read_firings(r: redis.Redis, keys: Keys, rule_key: str | None = None) -> list[Firing]:
    """Stored firings (of one rule if given), newest start first."""
    out = [Firing.from_dict(json.loads(v)) for v in r.hvals(keys.alerts)]
    if rule_key is not None:
        out = [f for f in out if f.rule == rule_key]
    return sorted(out, key=lambda f: (f.start, f.id), reverse=True)


def read_alert_log(r: redis.Redis, keys: Keys, limit: int = 50) -> list[dict[str, Any]]:
    """The newest notices, newest first."""
    return [json.loads(v) for v in r.lrange(keys.alert_log, 0, limit - 1)]


@dataclass(frozen=True)
class AlertHeartbeat:
    """When the evaluator last evaluated, and how many rules it runs."""

    time: int
    rules: int


def read_alert_heartbeat(r: redis.Redis, keys: Keys) -> AlertHeartbeat | None:
    """The evaluator's last heartbeat; None if none ever ran on this prefix."""
    raw = r.get(keys.alert_heartbeat)
    if raw is None:
        return None
    d = json.loads(_s(raw))
    return AlertHeartbeat(int(d["time"]), int(d["rules"]))
