"""JSON access logs through a field map (tidegauge/core/field_map.py), table by table, then by
hypothesis: every line one event (the values the contract's own record would give) or one
dead letter whose detail names the log field at fault.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.fixtures import FUZZ, dumps, json_values
from tidegauge.core.events import Reason, Rejected, parse_values
from tidegauge.core.field_map import NGINX_FIELDS, FieldMap, FieldMapError

NGINX = list(NGINX_FIELDS)  # the README's nginx map (its `log_format tidegauge`)
T_S = 1_764_201_600.123  # 2025-11-27T00:00:00.123Z as nginx's $msec
T_MS = 1_764_201_600_123


def judge(specs: list[str], line: Any, partition: int = 0, offset: int = 0) -> Any:
    value = line if isinstance(line, bytes) else dumps(line)
    return FieldMap.parse(specs).judge()(value, partition, offset)


def contract(obj: dict[str, Any]) -> Any:
    """What the contract's own record with these values gives: the ground truth (an event)."""
    got = parse_values(dumps(obj))
    assert isinstance(got, list), got
    return got


# --- the map itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["service=host"], "needs --field event_time=SOURCE"),
        (["event_time=t"], "needs --field service=SOURCE"),
        (["event_time=t", "service=h", "route=uri"], "'route' is not a contract field"),
        (["event_time=t", "service=h", "latency_ms=x:h"], "takes the units ms, s, us, ns"),
        (["event_time=t:iso", "service=h"], "not 'iso'"),
        (["event_time=t", "service=h", "status=s:ms"], "takes the units none"),
        (["event_time=t", "service=h", "service=vhost"], "service is mapped twice"),
        (["event_time", "service=h"], "expected TARGET=SOURCE[:UNIT]"),
        (["event_time=:s", "service=h"], "no source field"),
    ],
)
def test_a_map_that_cannot_work_is_refused_with_the_entry_named(
    specs: list[str], message: str
) -> None:
    with pytest.raises(FieldMapError, match=message.replace("[", r"\[").replace("]", r"\]")):
        FieldMap.parse(specs)


def test_a_map_travels_to_the_executors_unchanged() -> None:
    m = FieldMap.parse(NGINX)
    assert FieldMap.from_json(m.to_json()) == m
    assert m.texts() == NGINX


# --- lines that map -------------------------------------------------------------------------


def test_an_nginx_line_gives_the_values_of_the_same_event_in_the_contract() -> None:
    line = {
        "msec": T_S,
        "host": "checkout",
        "request_time": 0.003,
        "status": 503,
        "remote_user": "alice",
        "request_id": "7f3a",
        "request_uri": "/cart?id=1",  # unmapped fields are ignored
    }
    want = contract(
        {
            "event_id": "7f3a",
            "event_time": 1_764_201_600_123,
            "service": "checkout",
            "user_id": "alice",
            "latency_ms": 3.0,
            "status": 503,
        }
    )
    assert judge(NGINX, line) == want


@pytest.mark.parametrize(
    ("entry", "value", "ms"),
    [
        ("event_time=t:s", T_S, 1_764_201_600_123),
        ("event_time=t:s", "1764201600.123", 1_764_201_600_123),  # quoted, as many logs do
        ("event_time=t:s", 1_764_201_600, 1_764_201_600_000),
        ("event_time=t:s", 1_764_201_600.1239, 1_764_201_600_123),  # floored, as ISO times are
        ("event_time=t:ms", 1_764_201_600_123, 1_764_201_600_123),
        ("event_time=t", 1_764_201_600_123, 1_764_201_600_123),  # the contract's own unit
        ("event_time=t:us", 1_764_201_600_123_999, 1_764_201_600_123),
        ("event_time=t:ns", 1_764_201_600_123_456_789, 1_764_201_600_123),  # exact past 2**53
        ("event_time=t:iso8601", "2025-11-27T00:00:00.123+00:00", 1_764_201_600_123),
        ("event_time=t", "2025-11-27T01:00:00.123+01:00", 1_764_201_600_123),
    ],
)
def test_times_in_every_unit_become_epoch_ms(entry: str, value: Any, ms: int) -> None:
    got = judge([entry, "service=h"], {"t": value, "h": "api"})
    assert got == contract({"event_id": "0/0", "event_time": ms, "service": "api"})


@pytest.mark.parametrize(
    ("entry", "value", "latency"),
    [
        ("latency_ms=d:s", 0.003, 3.0),
        ("latency_ms=d:s", "0.250", 250.0),
        ("latency_ms=d:s", 1.123, 1123.0),  # not 1122.9999999999998
        ("latency_ms=d", 12.5, 12.5),
        ("latency_ms=d:ms", "7", 7.0),
        ("latency_ms=d:us", 1500, 1.5),
        ("latency_ms=d:ns", 2_000_000, 2.0),
    ],
)
def test_durations_in_every_unit_become_ms(entry: str, value: Any, latency: float) -> None:
    got = judge(["event_time=t", "service=h", entry], {"t": T_MS, "h": "api", "d": value})
    assert got == contract(
        {"event_id": "0/0", "event_time": T_MS, "service": "api", "latency_ms": latency}
    )


def test_nested_fields_by_dotted_path_and_keys_that_hold_dots() -> None:
    specs = ["event_time=log.time:ms", "service=kubernetes.labels.app", "status=http.status"]
    line = {
        "log": {"time": T_MS},
        "kubernetes": {"labels": {"app": "web"}},
        "http.status": "404",  # a key with a dot in it is found first
        "http": {"status": 200},
    }
    assert judge(specs, line) == contract(
        {"event_id": "0/0", "event_time": T_MS, "service": "web", "status": 404}
    )


def test_without_an_id_field_each_line_is_its_kafka_position() -> None:
    specs = ["event_time=t", "service=h"]
    a = judge(specs, {"t": T_MS, "h": "api"}, partition=2, offset=41)
    b = judge(specs, {"t": T_MS, "h": "api"}, partition=2, offset=42)
    assert a[0] == "2/41" and b[0] == "2/42"


def test_numbers_for_names_are_their_text_and_empty_values_are_absent() -> None:
    specs = ["event_time=t", "service=h", "user_id=uid", "event_id=rid"]
    got = judge(specs, {"t": T_MS, "h": "api", "uid": 1234, "rid": ""}, offset=9)
    # nginx logs "" for a variable it does not have: no id (the position), no user
    assert got == contract(
        {"event_id": "0/9", "event_time": T_MS, "service": "api", "user_id": "1234"}
    )
    assert judge(specs, {"t": T_MS, "h": "api", "uid": ""})[3] is None


# --- lines that do not map: dead letters that name the log field ------------------------------


@pytest.mark.parametrize(
    ("line", "reason", "detail"),
    [
        (b"", Reason.EMPTY, "no value"),
        (b"GET / HTTP/1.1 200", Reason.INVALID_JSON, "not a JSON log line"),
        (b"[1,2]", Reason.NOT_AN_OBJECT, "got an array"),
        ({"h": "api"}, Reason.MISSING_FIELD, "event_time (log field 'msec') is required"),
        ({"msec": T_S}, Reason.MISSING_FIELD, "service (log field 'host') is required"),
        ({"msec": T_S, "host": ""}, Reason.MISSING_FIELD, "service (log field 'host')"),
        ({"msec": "soon", "host": "a"}, Reason.WRONG_TYPE, "event_time (log field 'msec')"),
        ({"msec": True, "host": "a"}, Reason.WRONG_TYPE, "got a boolean"),
        ({"msec": T_S, "host": ["a"]}, Reason.WRONG_TYPE, "service (log field 'host')"),
        (
            {"msec": T_S, "host": "a", "request_time": "-"},
            Reason.WRONG_TYPE,
            "latency_ms (log field 'request_time') must be a number, got '-'",
        ),
        (
            {"msec": T_S, "host": "a", "request_time": -0.5},
            Reason.INVALID_VALUE,
            "latency_ms (log field 'request_time')",
        ),
        (
            {"msec": T_S, "host": "a", "request_time": "inf"},
            Reason.INVALID_VALUE,
            "must be finite",
        ),
        (
            {"msec": T_S, "host": "a", "status": "OK"},
            Reason.WRONG_TYPE,
            "status (log field 'status') must be an integer",
        ),
        (
            {"msec": T_S, "host": "a", "status": 2**40},
            Reason.INVALID_VALUE,
            "status (log field 'status') must fit in 32 bits",
        ),
        (
            {"msec": 1e30, "host": "a"},
            Reason.INVALID_TIME,
            "event_time (log field 'msec') is 1e+30 s since the epoch: outside 2000..2100",
        ),
    ],
)
def test_a_line_that_does_not_map_is_a_dead_letter_naming_the_field(
    line: Any, reason: Reason, detail: str
) -> None:
    got = judge(NGINX, line)
    assert isinstance(got, Rejected), got
    assert got.reason == reason
    assert detail in got.detail


def test_an_iso_time_that_is_not_a_string_is_refused() -> None:
    got = judge(["event_time=t:iso8601", "service=h"], {"t": 5, "h": "a"})
    assert isinstance(got, Rejected) and "must be an ISO-8601 string" in got.detail


# --- by hypothesis: every line one event or one dead letter ---------------------------------

lines = st.dictionaries(
    st.sampled_from(["msec", "host", "request_time", "status", "remote_user", "request_id", "x"]),
    json_values | st.floats(0, 2e9) | st.text(max_size=300),
    max_size=7,
)


@FUZZ
@given(lines)
def test_every_line_is_one_event_or_one_dead_letter(line: dict[str, Any]) -> None:
    got = judge(NGINX, line)
    if isinstance(got, Rejected):
        assert got.reason in Reason and got.detail
        return
    assert len(got) == 7  # the contract's values, in check order
    event_id, event_ms, service, user_id, _, latency, status = got
    assert isinstance(event_ms, int) and isinstance(service, str) and service
    assert event_id == (line.get("request_id") or "0/0")
    assert latency is None or latency >= 0
    # the same values the contract gives its own record of them
    obj = {"event_id": event_id, "event_time": event_ms, "service": service}
    obj |= {k: v for k, v in [("user_id", user_id), ("latency_ms", latency), ("status", status)]}
    assert got == contract({k: v for k, v in obj.items() if v is not None})


@FUZZ
@given(json_values, st.binary(max_size=200))
def test_any_bytes_or_json_are_one_row(value: Any, noise: bytes) -> None:
    for raw in (json.dumps(value).encode(), noise):
        got = FieldMap.parse(NGINX).judge()(raw, 0, 0)
        assert isinstance(got, Rejected | list)


def test_a_deep_line_is_a_dead_letter_not_a_crash() -> None:
    deep = "[" * 5_000 + "]" * 5_000
    got = judge(NGINX, ('{"msec": 1, "host": "a", "x": ' + deep + "}").encode())
    assert isinstance(got, Rejected) and got.reason == Reason.INVALID_JSON
    huge = judge(NGINX, {"msec": 1, "host": "a", "x": "y" * 2_000_000})
    assert isinstance(huge, Rejected) and huge.reason == Reason.TOO_LARGE
