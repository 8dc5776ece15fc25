"""Kafka client options (tidegauge/core/kafka_options.py): parsed, checked, typed, never shown.

From `--kafka-option KEY=VALUE` and TIDEGAUGE_KAFKA_OPTIONS.
"""

from __future__ import annotations

import pytest

from tidegauge.core.config import KafkaSettings
from tidegauge.core.kafka_options import client_config, parse_kafka_options, redacted

pytestmark = pytest.mark.unit

SECRET = "pa55-w0rd-never-shown"


def test_flags_add_to_the_environment_and_win_over_it() -> None:
    env = {"TIDEGAUGE_KAFKA_OPTIONS": "security_protocol=SSL, ssl_cafile=/etc/ca.pem"}
    got = parse_kafka_options(["security_protocol=SASL_SSL", "request_timeout_ms=5000"], env)
    assert dict(got) == {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": "/etc/ca.pem",
        "request_timeout_ms": "5000",
    }


def test_each_client_gets_the_settings_it_knows_with_their_types() -> None:
    opts = parse_kafka_options(
        ["security_protocol=SSL", "ssl_check_hostname=false", "acks=all", "fetch_max_wait_ms=50"]
    )
    consumer = client_config(opts, "consumer")
    producer = client_config(opts, "producer")
    admin = client_config(opts, "admin")
    assert consumer == {
        "security_protocol": "SSL",
        "ssl_check_hostname": False,
        "fetch_max_wait_ms": 50,
    }
    assert producer == {"security_protocol": "SSL", "ssl_check_hostname": False, "acks": "all"}
    assert admin == {"security_protocol": "SSL", "ssl_check_hostname": False}


def test_kafka_style_dotted_names_are_accepted() -> None:
    assert dict(parse_kafka_options(["security.protocol=SSL", "sasl-mechanism=PLAIN"])) == {
        "security_protocol": "SSL",
        "sasl_mechanism": "PLAIN",
    }


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("secuirty_protocol=SSL", "no Kafka client knows this setting"),
        ("security_protocol", "wants KEY=VALUE"),
        ("=SSL", "wants KEY=VALUE"),
        ("bootstrap_servers=x:1", "set by Tidegauge itself"),
        ("group_id=mine", "set by Tidegauge itself"),
        ("ssl_context=x", "takes a Python object"),
    ],
)
def test_a_bad_option_is_refused_by_name(item: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_kafka_options([item])


def test_a_refused_option_never_echoes_its_value() -> None:
    with pytest.raises(ValueError) as e:
        parse_kafka_options([f"sasl_plain_pasword={SECRET}"])
    assert SECRET not in str(e.value)


def test_secrets_are_never_shown() -> None:
    opts = parse_kafka_options(
        [f"sasl_plain_password={SECRET}", f"ssl_password={SECRET}", "sasl_plain_username=ops"]
    )
    text = redacted(opts)
    assert SECRET not in text
    assert "sasl_plain_password=***" in text and "sasl_plain_username=ops" in text
    settings = KafkaSettings(bootstrap="k:9092", options=opts)
    assert SECRET not in repr(settings)
    assert settings.client_config("consumer")["sasl_plain_password"] == SECRET
