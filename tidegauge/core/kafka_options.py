"""Kafka client settings from `--kafka-option KEY=VALUE` and `TIDEGAUGE_KAFKA_OPTIONS`.

A production Kafka wants TLS and SASL: `security_protocol=SASL_SSL`, `sasl_mechanism=PLAIN`,
`sasl_plain_username=...`, `ssl_cafile=/etc/kafka/ca.pem`. The names are kafka-python's (the
project's client), checked when given so a typo fails at start-up, not as a timeout later.
Every Kafka client of the project (the job's source on the driver and the executors, the
producer, topic admin) gets the options it understands; a setting no client knows is refused.
Secrets (passwords, tokens, keys' passphrases) are never printed: `redacted` shows them as ***.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Literal

__all__ = [
    "ENV_KAFKA_OPTIONS",
    "ClientKind",
    "client_config",
    "is_secret",
    "parse_kafka_options",
    "redacted",
]

#: `KEY=VALUE[,KEY=VALUE...]`, read before the `--kafka-option` flags (which win).
ENV_KAFKA_OPTIONS = "TIDEGAUGE_KAFKA_OPTIONS"

ClientKind = Literal["consumer", "producer", "admin"]

#: Settings the project sets itself on a client; an option for them would be ignored or break
#: the client's contract (offsets are the checkpoint's, values are bytes).
_RESERVED = frozenset(
    {
        "bootstrap_servers",
        "client_id",
        "group_id",
        "enable_auto_commit",
        "isolation_level",
        "key_serializer",
        "value_serializer",
        "key_deserializer",
        "value_deserializer",
    }
)

#: Settings that take Python objects, not text.
_OBJECTS = frozenset(
    {
        "ssl_context",
        "sasl_oauth_token_provider",
        "selector",
        "metric_reporters",
        "socket_options",
        "kafka_client",
        "partitioner",
        "default_offset_commit_callback",
    }
)

_SECRET = re.compile(r"password|secret|token|jaas", re.IGNORECASE)


def is_secret(key: str) -> bool:
    """Whether an option's value must never be shown (passwords, tokens, key passphrases)."""
    return _SECRET.search(key) is not None


@cache
def _known() -> dict[str, frozenset[str]]:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    return {
        "consumer": frozenset(KafkaConsumer.DEFAULT_CONFIG),
        "producer": frozenset(KafkaProducer.DEFAULT_CONFIG),
        "admin": frozenset(KafkaAdminClient.DEFAULT_CONFIG),
    }


def _value(text: str) -> Any:
    """`true`/`false` as booleans, whole numbers as ints, everything else as given."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if re.fullmatch(r"-?[0-9]+", text.strip()):
        return int(text)
    return text


def parse_kafka_options(
    flags: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    """The options in force: `TIDEGAUGE_KAFKA_OPTIONS`, then the flags (a later key wins).

    Raises ValueError naming the option (never its value) when one is malformed, reserved or
    known to no Kafka client.
    """
    items: list[str] = []
    if env is not None and env.get(ENV_KAFKA_OPTIONS, "").strip():
        items += [p for p in env[ENV_KAFKA_OPTIONS].split(",") if p.strip()]
    items += list(flags)
    out: dict[str, str] = {}
    known = set().union(*_known().values())
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace(".", "_").replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--kafka-option wants KEY=VALUE, got {item.split('=')[0]!r}")
        if key in _RESERVED:
            raise ValueError(f"--kafka-option {key}: set by Tidegauge itself, not an option")
        if key in _OBJECTS:
            raise ValueError(f"--kafka-option {key}: takes a Python object, not text")
        if key not in known:
            close = sorted(k for k in known if key.split("_")[0] in k)[:6]
            hint = f" (kafka-python settings such as {', '.join(close)})" if close else ""
            raise ValueError(f"--kafka-option {key}: no Kafka client knows this setting{hint}")
        out[key] = value
    return tuple(out.items())


def client_config(options: Iterable[tuple[str, str]], kind: ClientKind) -> dict[str, Any]:
    """The keyword arguments one kind of kafka-python client takes from the options."""
    accepted = _known()[kind]
    return {k: _value(v) for k, v in options if k in accepted}


def redacted(options: Iterable[tuple[str, str]]) -> str:
    """`security_protocol=SSL sasl_plain_password=***` for logs and start lines."""
    return " ".join(f"{k}={'***' if is_secret(k) else v}" for k, v in options)
