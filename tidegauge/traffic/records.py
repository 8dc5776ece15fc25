"""What the generator makes: `Record` (one Kafka record and the truth about it), keys, ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tidegauge.core.events import Reason

__all__ = [
    "CONTROL_KEY",
    "HEARTBEAT_KEY",
    "HEARTBEAT_SOURCE",
    "Intent",
    "Kind",
    "Record",
    "burst_event_id",
    "event_id",
    "live_burst_event_id",
]

Kind = Literal["event", "duplicate", "malformed", "heartbeat", "control"]
Intent = Literal["in_order", "out_of_order", "late", "buffered"]

HEARTBEAT_KEY = b"__heartbeat__"
HEARTBEAT_SOURCE = "tidegauge-produce"
#: Key of control records. They never reach Kafka (the producer executes them), but the key keeps
#: their truth lines shaped like every other record's.
CONTROL_KEY = b"__control__"


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record the generator sends, with the ground truth about it.

    `send_ms` is the generator clock (true time) when it is sent; records come out of `generate`
    ordered by it. `receive_ms` is when the broker receives it: `send_ms` plus a network delay
    (heartbeats and control records: `send_ms`). The producer makes it the Kafka record
    timestamp, standing in for the ingest gateway's clock, the one clock the docs trust. It is
    not ordered: two records sent in order may be received the other way round.
    `event_time` and `sent_time` are what the record carries (device skew included);
    `true_time` is the instant the event really happened. Fields that do not apply to a kind
    are None: malformed records carry only `key`, `value`, `send_ms`, `receive_ms`,
    `sent_time`, `true_time` and `reason`; heartbeats carry `partition` and their times;
    control records (never sent to Kafka, executed by the producer) carry only `key`, `value`
    and the two clock fields.
    """

    seq: int
    kind: Kind
    key: bytes
    value: bytes
    partition: int | None
    send_ms: int
    receive_ms: int
    event_id: str | None = None
    event_time: int | None = None
    true_time: int | None = None
    sent_time: int | None = None
    service: str | None = None
    user_id: str | None = None
    latency_ms: float | None = None
    status: int | None = None
    delay_ms: int | None = None
    intent: Intent | None = None
    skew_ms: int | None = None
    reason: Reason | None = None

    def truth(self, partition: int | None, offset: int | None) -> dict[str, Any]:
        """The ground-truth line of this record once it landed at (partition, offset).

        A control record never lands anywhere: its partition and offset are None.
        """
        return {
            "seq": self.seq,
            "kind": self.kind,
            "partition": partition,
            "offset": offset,
            "key": self.key.decode("utf-8"),
            "receive_ms": self.receive_ms,
            "event_id": self.event_id,
            "event_time": self.event_time,
            "true_time": self.true_time,
            "sent_time": self.sent_time,
            "service": self.service,
            "user_id": self.user_id,
            "latency_ms": self.latency_ms,
            "status": self.status,
            "delay_ms": self.delay_ms,
            "intent": self.intent,
            "skew_ms": self.skew_ms,
            "reason": None if self.reason is None else self.reason.value,
        }


def event_id(seed: int, seq: int) -> str:
    """The id of arrival number `seq` of the stream seeded with `seed`: unique, reproducible."""
    return f"{seed:x}-{seq:09d}"


def burst_event_id(seed: int, k: int) -> str:
    """The id of buffered event number `k` of the late burst, unique and reproducible.

    The "b" keeps it apart from `event_id`'s, so adding a burst leaves every ordinary id (and
    --count) as it was.
    """
    return f"{seed:x}-b{k:08d}"


def live_burst_event_id(seed: int, request_id: int, k: int) -> str:
    """The id of buffered event number `k` of the live late burst requested as `request_id`.

    The request id (epoch ms of the request) keeps every live burst's ids apart from the other
    bursts' and from ordinary ids, whatever order the bursts come in.
    """
    return f"{seed:x}-r{request_id}-{k:07d}"
