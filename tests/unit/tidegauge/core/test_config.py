"""Configuration objects (tidegauge/core/config.py): validation, precedence, secrets, flags.

The environment is always injected as a mapping, except in the one test that checks the
default falls back to os.environ (with monkeypatch).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from jobs.cli import add_arguments
from tidegauge.core.config import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_REDIS_URL,
    DEFAULT_TOPIC,
    ENV_BOOTSTRAP,
    ENV_REDIS_URL,
    ENV_TOPIC,
    JobConfig,
    KafkaSettings,
    RedisSettings,
    default_shuffle_partitions,
    job_config_from_args,
    parse_conf,
    redact_url,
)
from tidegauge.core.windows import SLIDING_NEEDS_STEP, WindowSpec

SECRET = "s3cr3t-Pa55"


def job(**overrides: Any) -> JobConfig:
    base: dict[str, Any] = {
        "kafka": KafkaSettings(),
        "redis": RedisSettings(),
        "checkpoint": "/tmp/ckpt",
    }
    base.update(overrides)
    return JobConfig(**base)


# --- Kafka ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bootstrap",
    ["127.0.0.1:9092", "kafka:9092", "a:1,b:2", "a:1, b:2", "[::1]:9092", "broker.example.com:443"],
)
def test_valid_bootstrap(bootstrap: str) -> None:
    assert KafkaSettings(bootstrap=bootstrap).bootstrap == bootstrap


@pytest.mark.parametrize(
    "bootstrap",
    [
        "",
        "   ",
        "kafka",  # no port
        "kafka:",  # empty port
        ":9092",  # no host
        "kafka:abc",
        "kafka:-1",
        "kafka:9092,",  # trailing comma: an empty server
        "kafka:9092,,other:9092",
        "http://kafka:9092x",
    ],
)
def test_bad_bootstrap(bootstrap: str) -> None:
    with pytest.raises(ValueError, match="--bootstrap wants HOST:PORT"):
        KafkaSettings(bootstrap=bootstrap)


@pytest.mark.parametrize(
    "bootstrap",
    [
        "kafka:65536",  # above the TCP port range
        "kafka:99999",
        "kafka:0",  # nothing can be reached on port 0
        "kafka:\u00b2",  # "²": str.isdigit() is True, int() raises later in kafka-python
        "kafka:9092;other:9092",  # wrong separator: host "kafka:9092;other" is accepted
    ],
)
def test_bootstrap_that_cannot_be_connected_to_is_rejected(bootstrap: str) -> None:
    # The check is `host` non-empty and `port.isdigit()`: any digit string and any host pass,
    # so these fail only later, when kafka-python connects, instead of at build time.
    with pytest.raises(ValueError, match="--bootstrap"):
        KafkaSettings(bootstrap=bootstrap)


def test_empty_topic() -> None:
    with pytest.raises(ValueError, match="--topic"):
        KafkaSettings(topic="")


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        # flag > env > default
        ({}, None, DEFAULT_BOOTSTRAP),
        ({ENV_BOOTSTRAP: "env:1"}, None, "env:1"),
        ({ENV_BOOTSTRAP: "env:1"}, "flag:2", "flag:2"),
        ({}, "flag:2", "flag:2"),
        # an empty value counts as unset, at both levels
        ({ENV_BOOTSTRAP: ""}, None, DEFAULT_BOOTSTRAP),
        ({ENV_BOOTSTRAP: "env:1"}, "", "env:1"),
        # other variables are not read
        ({"KAFKA_BOOTSTRAP": "other:1"}, None, DEFAULT_BOOTSTRAP),
    ],
)
def test_bootstrap_precedence(env: dict[str, str], flag: str | None, expected: str) -> None:
    assert KafkaSettings.from_env(env, bootstrap=flag).bootstrap == expected


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({}, None, DEFAULT_TOPIC),
        ({ENV_TOPIC: "env-topic"}, None, "env-topic"),
        ({ENV_TOPIC: "env-topic"}, "flag-topic", "flag-topic"),
        ({ENV_TOPIC: ""}, None, DEFAULT_TOPIC),
    ],
)
def test_topic_precedence(env: dict[str, str], flag: str | None, expected: str) -> None:
    assert KafkaSettings.from_env(env, topic=flag).topic == expected


def test_bad_env_value_is_validated() -> None:
    with pytest.raises(ValueError, match="--bootstrap"):
        KafkaSettings.from_env({ENV_BOOTSTRAP: "no-port"})


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BOOTSTRAP, "osenv:9")
    monkeypatch.setenv(ENV_TOPIC, "ostopic")
    monkeypatch.setenv(ENV_REDIS_URL, "redis://osenv:6379/3")
    assert KafkaSettings.from_env() == KafkaSettings("osenv:9", "ostopic")
    assert RedisSettings.from_env().url == "redis://osenv:6379/3"
    # an injected mapping replaces os.environ entirely
    assert KafkaSettings.from_env({}).bootstrap == DEFAULT_BOOTSTRAP


def test_env_names() -> None:
    # docker-compose.yml and the docs use these names.
    assert (ENV_BOOTSTRAP, ENV_REDIS_URL, ENV_TOPIC) == (
        "TIDEGAUGE_KAFKA_BOOTSTRAP",
        "TIDEGAUGE_REDIS_URL",
        "TIDEGAUGE_TOPIC",
    )


# --- Redis ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://redis:6379/0",
        "rediss://cache.example.com:6380/1",
        "unix:///var/run/redis.sock",
        "redis://:pw@h:6379/0",
        "REDIS://h:6379",  # scheme is case-insensitive
    ],
)
def test_valid_redis_url(url: str) -> None:
    assert RedisSettings(url=url).url == url


@pytest.mark.parametrize(
    "url",
    ["", "127.0.0.1:6379", "localhost", "http://h:6379", "tcp://h:6379", "memcached://h"],
)
def test_bad_redis_url(url: str) -> None:
    with pytest.raises(ValueError, match="--redis wants a redis:// URL"):
        RedisSettings(url=url)


@pytest.mark.parametrize("prefix", ["", "a:b", ":"])
def test_bad_redis_prefix(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        RedisSettings(prefix=prefix)


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({}, None, DEFAULT_REDIS_URL),
        ({ENV_REDIS_URL: "redis://env:1/0"}, None, "redis://env:1/0"),
        ({ENV_REDIS_URL: "redis://env:1/0"}, "redis://flag:2/0", "redis://flag:2/0"),
        ({ENV_REDIS_URL: ""}, None, DEFAULT_REDIS_URL),
    ],
)
def test_redis_precedence(env: dict[str, str], flag: str | None, expected: str) -> None:
    assert RedisSettings.from_env(env, url=flag).url == expected


def test_redis_prefix_from_flag() -> None:
    assert RedisSettings.from_env({}, prefix="tg2").prefix == "tg2"
    assert RedisSettings.from_env({}).prefix == "tg"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{SECRET}@h:6379/0", "redis://:***@h:6379/0"),
        (f"redis://user:{SECRET}@h:6379/0", "redis://user:***@h:6379/0"),
        (
            f"rediss://default:{SECRET}@cache.example.com:6380/1",
            "rediss://default:***@cache.example.com:6380/1",
        ),
        ("redis://user:p%40ss@h/0", "redis://user:***@h/0"),  # percent-encoded
        ("redis://user:pa:ss@h/0", "redis://user:***@h/0"),  # ':' inside the password
        ("redis://user:@h/0", "redis://user:***@h/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),  # nothing to hide
        ("redis://user@h:6379/0", "redis://user@h:6379/0"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [f"redis://:{SECRET}@h:6379/0", f"redis://admin:{SECRET}@h:6379/0", f"rediss://u:{SECRET}@h"],
)
def test_redis_settings_never_print_the_password(url: str) -> None:
    settings = RedisSettings(url=url)
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)
    assert SECRET not in f"{settings}"
    assert "***" in repr(settings)
    assert SECRET not in repr(job(redis=settings))  # nor when nested in the job config
    assert settings.url == url  # the client still gets the real URL


def test_bad_redis_url_error_hides_the_password() -> None:
    with pytest.raises(ValueError) as info:
        RedisSettings(url=f"http://user:{SECRET}@h:6379/0")
    assert SECRET not in str(info.value)


def test_password_in_query_string_is_hidden() -> None:
    # redis-py's from_url passes every query argument to the connection, so
    # redis://h:6379/0?password=... is a working way to give the password; repr shows it today.
    import redis

    url = f"redis://h:6379/0?password={SECRET}"
    assert redis.connection.parse_url(url)["password"] == SECRET
    assert SECRET not in repr(RedisSettings(url=url))


# --- job ------------------------------------------------------------------------------------


def test_job_defaults_are_valid() -> None:
    cfg = job()
    assert (cfg.windows, cfg.allowed_lateness_ms) == ((WindowSpec(10_000, 10_000),), 30_000)
    assert cfg.trigger == "processing-time" and cfg.starting_offsets == "earliest"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"windows": ()}, "at least one --window"),
        ({"windows": (WindowSpec.tumbling(10_000),) * 2}, "same size and slide"),
        ({"allowed_lateness_ms": -1}, "--allowed-lateness must be >= 0"),
        ({"trigger_interval_ms": -1}, "trigger interval"),
        ({"starting_offsets": "middle"}, "--starting-offsets"),
        ({"max_records_per_trigger": 0}, "--max-records-per-trigger"),
        ({"max_records_per_trigger": -5}, "--max-records-per-trigger"),
        ({"checkpoint": ""}, "--checkpoint is required"),
        ({"checkpoint": "s3a://bucket/tidegauge"}, "not a s3a: URI but a path"),
        ({"checkpoint": "hdfs://namenode:8020/tg"}, "not a hdfs: URI but a path"),
        ({"checkpoint": "file:///var/tidegauge"}, "for file: the path itself"),
        ({"shuffle_partitions": 0}, "shuffle partitions"),
        ({"dead_letter_max": 0}, "--dead-letter-max"),
    ],
)
def test_job_rejects(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        job(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"allowed_lateness_ms": 0},  # no lateness: the watermark is the max event time
        {"windows": (WindowSpec.tumbling(1),)},
        {"windows": (WindowSpec.tumbling(10_000), WindowSpec(60_000, 10_000))},
        {"trigger_interval_ms": 0},
        {"starting_offsets": "latest"},
        {"max_records_per_trigger": 1},
        {"trigger": "available-now"},
    ],
)
def test_job_accepts_edges(overrides: dict[str, Any]) -> None:
    job(**overrides)


@pytest.mark.parametrize(
    ("obj", "field"),
    [(KafkaSettings(), "topic"), (RedisSettings(), "url"), (job(), "windows")],
)
def test_frozen(obj: object, field: str) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, "changed")


def test_given_prefers_the_flag_then_the_variable() -> None:
    from tidegauge.core.config import given

    env = {"TIDEGAUGE_KAFKA_BOOTSTRAP": "k:1"}
    assert given("f:2", "TIDEGAUGE_KAFKA_BOOTSTRAP", "--bootstrap", env) == ("f:2", "--bootstrap")
    assert given(None, "TIDEGAUGE_KAFKA_BOOTSTRAP", "--bootstrap", env) == (
        "k:1",
        "TIDEGAUGE_KAFKA_BOOTSTRAP",
    )
    assert given(None, "TIDEGAUGE_KAFKA_BOOTSTRAP", "--bootstrap", {}) is None
    assert given("", "X", "--x", {"X": ""}) is None


def test_plugins_from_env() -> None:
    from tidegauge.core.config import plugins_from_env

    assert plugins_from_env({"TIDEGAUGE_PLUGINS": " a.b , c ,,"}) == ("a.b", "c")
    assert plugins_from_env({}) == ()


@pytest.mark.parametrize(
    ("master", "cores", "expected"),
    [
        ("local[2]", 8, 2),
        ("local[3,2]", 8, 3),  # local[N, maxFailures]
        ("local[*]", 2, 2),
        ("local", 6, 6),
        ("local[*, 4]", 2, 2),
        ("spark://10.0.0.1:7077", 2, 4),
        ("yarn", 2, 4),
    ],
)
def test_shuffle_partitions_default_to_the_local_cores(
    master: str, cores: int, expected: int
) -> None:
    assert default_shuffle_partitions(master, cores) == expected


# --- the job's flags: windows and `--conf` Spark settings ---------------------------------

JAVA = "spark.driver.extraJavaOptions"


def _config(*windows: str) -> object:
    import argparse

    from jobs.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--checkpoint", "ckpt", *(a for w in windows for a in ("--window", w))])
    return job_config_from_args(args)


def test_the_job_takes_sliding_windows_after_a_tumbling_one() -> None:
    cfg = _config("10s", "60s/sliding", "5m/sliding@1s")
    keys = [w.key for w in cfg.windows]  # type: ignore[attr-defined]
    assert keys == ["10000", "sl60000-10000-100", "sl300000-10000-1000"]
    with pytest.raises(ValueError) as e:
        _config("60s/sliding")
    assert str(e.value) == SLIDING_NEEDS_STEP


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--checkpoint", "/tmp/cp", *argv])


def test_conf_flags_reach_the_job_config() -> None:
    cfg = job_config_from_args(
        _args("--conf", "spark.ui.enabled=false", "--conf", f"{JAVA}=-Da=b=c")
    )
    assert cfg.spark_conf == (("spark.ui.enabled", "false"), (JAVA, "-Da=b=c"))
    assert job_config_from_args(_args()).spark_conf == ()


@pytest.mark.parametrize(
    ("text", "match"),
    [("spark.ui.enabled", "expected KEY=VALUE"), ("=x", "expected KEY=VALUE")],
)
def test_bad_conf_is_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_conf(text)


def test_conf_must_name_a_spark_setting() -> None:
    with pytest.raises(ValueError, match="start with 'spark.'"):
        job_config_from_args(_args("--conf", "ui.enabled=false"))


def test_a_backlog_is_read_in_bounded_batches_unless_told_otherwise() -> None:
    assert job_config_from_args(_args()).max_records_per_trigger == 500_000
    assert (
        job_config_from_args(_args("--max-records-per-trigger", "2000")).max_records_per_trigger
        == 2000
    )
    assert (
        job_config_from_args(_args("--max-records-per-trigger", "0")).max_records_per_trigger
        is None
    )
    with pytest.raises(ValueError, match="--max-records-per-trigger must be positive"):
        job_config_from_args(_args("--max-records-per-trigger", "-3"))


def test_max_services_is_any_positive_limit_or_none() -> None:
    # the limit is the job's: fewer names than state shards is fine (some start with no slot)
    assert job_config_from_args(_args("--max-services", "2")).max_services == 2
    assert job_config_from_args(_args("--max-services", "0")).max_services == 0
    with pytest.raises(ValueError, match="--max-services must be 0"):
        job_config_from_args(_args("--max-services", "-1"))


def test_access_logs_take_a_field_map_and_the_contract_none() -> None:
    cfg = job_config_from_args(
        _args("--format", "access-log", "--field", "event_time=msec:s", "--field", "service=host")
    )
    fmt = cfg.record_format
    assert fmt.name == "access-log" and fmt.field_map is not None
    assert fmt.field_map.texts() == ["event_time=msec:s", "service=host"]
    assert job_config_from_args(_args()).record_format.own  # the contract's own records
    with pytest.raises(ValueError, match="needs --format access-log"):
        job_config_from_args(_args("--field", "service=host"))
    with pytest.raises(ValueError, match="needs --field event_time=SOURCE"):
        job_config_from_args(_args("--format", "access-log", "--field", "service=host"))


def test_otlp_takes_span_kinds_and_refuses_what_does_not_fit() -> None:
    fmt = job_config_from_args(
        _args("--format", "otlp_json", "--span-kind", "server")
    ).record_format
    assert (fmt.name, fmt.span_kinds) == ("otlp_json", ("server",))
    assert job_config_from_args(_args("--format", "otlp_proto")).record_format.span_kinds == (
        "server",
        "consumer",
    )
    with pytest.raises(ValueError, match="--span-kind picks OTLP spans"):
        job_config_from_args(_args("--span-kind", "client"))
    with pytest.raises(ValueError, match="--correct-clock-skew needs the contract"):
        job_config_from_args(_args("--format", "otlp_proto", "--correct-clock-skew"))


def test_the_retention_size_reaches_the_sink() -> None:
    from jobs.pipeline import _BatchWriter

    default = job_config_from_args(_args())
    assert default.retention_size == 2 << 30
    assert _BatchWriter(default).sink.retention_size == 2 << 30
    cfg = job_config_from_args(_args("--retention-size", "512MB"))
    assert _BatchWriter(cfg).sink.retention_size == 512 << 20
    assert job_config_from_args(_args("--retention-size", "none")).retention_size is None
    with pytest.raises(ValueError, match="such as 2GB"):
        job_config_from_args(_args("--retention-size", "lots"))
