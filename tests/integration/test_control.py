"""Live demo commands against a real redis-server: what is written, in how many commands, and
what is read back (tidegauge.core.control)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tidegauge.core.config import RedisSettings
from tidegauge.core.control import (
    DemoCommands,
    Incident,
    LateBurstRequest,
    read_commands,
    request_late_burst,
    request_pause,
    start_incident,
)
from tidegauge.core.store import Keys

T0 = 1_800_000_000_000
KEYS = Keys("tgc")


def hset_calls(r: redis.Redis) -> int:
    stats: Any = r.info("commandstats")
    return int(stats.get("cmdstat_hset", {}).get("calls", 0))


def write_calls(r: redis.Redis) -> int:
    """Every command that could have written the hash, however it was spelled."""
    stats: Any = r.info("commandstats")
    names = ("hset", "hmset", "hsetnx", "hdel", "del", "set", "multi", "exec", "eval")
    return sum(int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in names)


@pytest.fixture(params=[False, True], ids=["bytes", "str"])
def client(redis_settings: RedisSettings, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """Both kinds of client the callers use: raw bytes (the producer) and decoded (Streamlit)."""
    r = redis.Redis.from_url(redis_settings.url, decode_responses=request.param)
    yield r
    r.close()


def test_nothing_requested_reads_as_no_commands(client: redis.Redis) -> None:
    assert read_commands(client, KEYS) == DemoCommands()


def test_pause_round_trip_is_the_backlog_field(
    client: redis.Redis, redis_client: redis.Redis
) -> None:
    before = hset_calls(redis_client)
    until = request_pause(client, KEYS, T0, pause_ms=45_000)
    assert until == T0 + 45_000
    assert hset_calls(redis_client) == before + 1
    # The very field and format the job's Kafka source reads (jobs/source/kafka_source.py).
    assert redis_client.hget("tgc:control", "pause_until") == b"1800000045000"
    assert read_commands(client, KEYS) == DemoCommands(pause_until_ms=T0 + 45_000)


def test_incident_is_one_hset_of_its_fields(client: redis.Redis, redis_client: redis.Redis) -> None:
    before = write_calls(redis_client)
    incident = start_incident(client, KEYS, T0, duration_ms=90_000, factor=3.5, service="api")
    assert write_calls(redis_client) == before + 1
    assert incident == Incident(until_ms=T0 + 90_000, factor=3.5, service="api")
    assert redis_client.hgetall("tgc:control") == {
        b"incident_until": b"1800000090000",
        b"incident_factor": b"3.5",
        b"incident_service": b"api",
        b"incident_where": b"",
    }
    assert read_commands(client, KEYS) == DemoCommands(incident=incident)
    # one route of every service; the next incident without one clears it in the same HSET
    on_route = start_incident(client, KEYS, T0, service="*", where=("route", "/api/cart"))
    assert write_calls(redis_client) == before + 2
    assert redis_client.hget("tgc:control", "incident_where") == b"route=/api/cart"
    assert read_commands(client, KEYS).incident == on_route
    assert on_route.matches({"route": "/api/cart"}) and not on_route.matches({"route": "/"})
    assert on_route.describe() == "route /api/cart"
    start_incident(client, KEYS, T0, service="api")
    assert read_commands(client, KEYS).incident == Incident(T0 + 60_000, 5.0, "api")


def test_defaults_and_replacement(client: redis.Redis) -> None:
    first = start_incident(client, KEYS, T0)
    assert first == Incident(until_ms=T0 + 60_000, factor=5.0, service="*")
    second = start_incident(client, KEYS, T0 + 1_000, duration_ms=5_000, factor=2, service="web")
    assert read_commands(client, KEYS).incident == second == Incident(T0 + 6_000, 2.0, "web")


def test_late_burst_request_round_trip(client: redis.Redis, redis_client: redis.Redis) -> None:
    before = write_calls(redis_client)
    req = request_late_burst(client, KEYS, T0 + 7, span_ms=600_000)
    assert write_calls(redis_client) == before + 1
    assert req == LateBurstRequest(id=T0 + 7, span_ms=600_000)
    raw = redis_client.hget("tgc:control", "late_burst")
    assert raw is not None and json.loads(raw) == {"id": T0 + 7, "span_ms": 600_000}
    assert request_late_burst(client, KEYS, T0 + 8).span_ms == 3_600_000  # default: an hour
    assert read_commands(client, KEYS).late_burst == LateBurstRequest(T0 + 8, 3_600_000)


def test_all_commands_live_side_by_side(client: redis.Redis) -> None:
    request_pause(client, KEYS, T0)
    start_incident(client, KEYS, T0, duration_ms=10_000, factor=4.0, service="search")
    request_late_burst(client, KEYS, T0 + 1, span_ms=60_000)
    assert read_commands(client, KEYS) == DemoCommands(
        pause_until_ms=T0 + 30_000,
        incident=Incident(T0 + 10_000, 4.0, "search"),
        late_burst=LateBurstRequest(T0 + 1, 60_000),
    )
    assert read_commands(client, Keys("other")) == DemoCommands()  # the prefix is honoured


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: request_pause(r, KEYS, T0, pause_ms=-1), "pause_ms must be a positive"),
        (lambda r: request_pause(r, KEYS, T0, pause_ms=0), "pause_ms must be a positive"),
        (lambda r: start_incident(r, KEYS, T0, duration_ms=-5), "duration_ms must be a positive"),
        (lambda r: start_incident(r, KEYS, T0, factor=0), "factor must be a positive number"),
        (lambda r: start_incident(r, KEYS, T0, factor=-2.0), "factor must be a positive number"),
        (lambda r: start_incident(r, KEYS, T0, service=""), "service must be a service name"),
        (lambda r: request_late_burst(r, KEYS, T0, span_ms=-1), "span_ms must be a positive"),
        (lambda r: request_late_burst(r, KEYS, -3), "now_ms must be epoch ms"),
        (lambda r: request_pause(r, KEYS, T0, pause_ms=1.5), "pause_ms must be a positive"),  # type: ignore[arg-type]
    ],
)
def test_invalid_requests_write_nothing(
    client: redis.Redis,
    redis_client: redis.Redis,
    call: Callable[[redis.Redis], object],
    message: str,
) -> None:
    before = write_calls(redis_client)
    with pytest.raises(ValueError, match=message):
        call(client)
    assert write_calls(redis_client) == before
    assert redis_client.exists("tgc:control") == 0


def test_garbage_in_the_hash_is_a_clear_error(
    client: redis.Redis, redis_client: redis.Redis
) -> None:
    redis_client.hset("tgc:control", mapping={"pause_until": "1", "late_burst": "not json"})
    with pytest.raises(ValueError, match="control field late_burst is not JSON: 'not json'"):
        read_commands(client, KEYS)
