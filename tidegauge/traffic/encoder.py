"""How the generator writes record values: one encoder for every record it makes.

Events are written in the contract's canonical form, byte for byte what
`tidegauge.core.events.encode_event` writes (tests/unit/tidegauge/traffic/test_generator.py holds
them to that), but without a dict and a JSON encoder per record: this is the generator's hot path.
Heartbeats and control records are rare and go through the general encoders.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tidegauge.core.durations import to_iso
from tidegauge.core.events import Heartbeat, encode_heartbeat

__all__ = ["ValueEncoder", "dumps"]


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes, as every generated value is encoded."""
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


class ValueEncoder:
    """Record values of one run; service names are JSON-encoded once, up front."""

    def __init__(
        self, services: Iterable[str], source: str, record_format: str = "tidegauge"
    ) -> None:
        self._service_json = {name: json.dumps(name) for name in services}
        self._source = source
        self._access_log = record_format == "access-log"

    def event(
        self,
        event_id: str,
        event_time: int,
        service: str,
        user_id: str | None,
        latency_ms: float,
        status: int,
        sent_time: int,
        iso: bool = False,
    ) -> bytes:
        """An event with every field present (the generator always sends them all).

        `event_id` and `user_id` are generator-made ASCII ids, written without escaping;
        `iso` writes both times as ISO-8601 strings instead of epoch ms. In the access-log
        format the same request is nginx's JSON access log line (`access_log_line`).
        """
        if self._access_log:
            return self.access_log_line(event_id, event_time, service, user_id, latency_ms, status)
        if iso:
            et: object = f'"{to_iso(event_time)}"'
            st: object = f'"{to_iso(sent_time)}"'
        else:
            et, st = event_time, sent_time
        user = "" if user_id is None else f',"user_id":"{user_id}"'
        return (
            f'{{"event_id":"{event_id}","event_time":{et},"service":{self._service_json[service]}'
            f'{user},"latency_ms":{latency_ms!r},"status":{status},"sent_time":{st}}}'
        ).encode()

    def access_log_line(
        self,
        event_id: str,
        event_time: int,
        service: str,
        user_id: str | None,
        latency_ms: float,
        status: int,
    ) -> bytes:
        """The request as nginx logs it with the README's `log_format tidegauge`.

        `$msec` is epoch seconds with milliseconds and `$request_time` seconds with
        milliseconds, both unquoted; `$remote_user` is "" without a user. The event time
        comes back exactly; the latency at nginx's resolution (a millisecond).
        """
        user = "" if user_id is None else user_id
        return (
            f'{{"msec":{event_time // 1000}.{event_time % 1000:03d},'
            f'"host":{self._service_json[service]},"request_time":{latency_ms / 1000:.3f},'
            f'"status":{status},"remote_user":"{user}","request_id":"{event_id}","uri":"/"}}'
        ).encode()

    def heartbeat(self, at: int, partition: int) -> bytes:
        """A heartbeat of this run's source for one partition."""
        return encode_heartbeat(Heartbeat(event_time=at, partition=partition, source=self._source))

    def control(self, command: dict[str, Any]) -> bytes:
        """A control record's value."""
        return dumps(command)
