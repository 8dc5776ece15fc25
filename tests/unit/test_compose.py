"""Static checks of docker-compose.yml, Dockerfile and .dockerignore.

There is no Docker engine in CI, so these tests read the files and assert what a user of
`docker compose up` relies on: the services exist and start in the right order, Kafka's KRaft
settings agree with each other, every address in a command names a real service and port, the
job's checkpoint survives restarts, and every `tidegauge <sub>` is a real subcommand.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from cli.main import _COMMANDS
from tidegauge.core.config import JobConfig, KafkaSettings, RedisSettings
from tidegauge.core.durations import parse_duration
from tidegauge.core.windows import WindowSpec

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

#: The services built from our image, and the whole stack.
OURS = {"topic-init", "generator", "job", "dashboard", "spark-master", "spark-worker"}
REQUIRED = OURS | {"kafka", "redis"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
REDIS_DEFAULT_PORT = 6379


# --- helpers: normalise the several spellings compose accepts -----------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _argv(value: str | list[Any] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def _health_argv(service: dict[str, Any]) -> list[str]:
    """The healthcheck's command line, without the CMD / CMD-SHELL marker."""
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return shlex.split(test)
    kind, *rest = test
    assert kind in ("CMD", "CMD-SHELL"), f"healthcheck must start with CMD or CMD-SHELL: {test}"
    return shlex.split(rest[0]) if kind == "CMD-SHELL" else [str(r) for r in rest]


def _flag(argv: list[str], name: str) -> str | None:
    """Value of `--name VALUE` or `--name=VALUE`; None when absent."""
    for i, arg in enumerate(argv):
        if arg == name:
            assert i + 1 < len(argv), f"{name} has no value in {argv}"
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _depends(service: dict[str, Any]) -> dict[str, str]:
    """depends_on as {service: condition}; the list form means service_started."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def _ours(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Services that run the Tidegauge image (built from our Dockerfile)."""
    return {name: svc for name, svc in services.items() if "build" in svc}


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """'NAME://host:port,...' -> {NAME: (host, port)}; an empty host means all interfaces."""
    out = {}
    for item in value.split(","):
        m = re.fullmatch(r"([A-Z_]+)://([^:]*):(\d+)", item.strip())
        assert m, f"cannot parse listener {item!r}"
        out[m.group(1)] = (m.group(2), int(m.group(3)))
    return out


def _kafka_env(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    return _env(services["kafka"])


def _redis_port(services: dict[str, dict[str, Any]]) -> int:
    port = _flag(_argv(services["redis"].get("command")), "--port")
    return int(port) if port else REDIS_DEFAULT_PORT


def _kafka_client_port(services: dict[str, dict[str, Any]]) -> int:
    """Port of the listener clients are sent to (advertised, not the controller's)."""
    env = _kafka_env(services)
    controllers = set(env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(","))
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    ports = {port for name, (_, port) in advertised.items() if name not in controllers}
    assert len(ports) == 1, f"expected one client listener, got {advertised}"
    return ports.pop()


def _all_argvs(services: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Every command line of our image: the service commands and the healthchecks."""
    out = []
    for name, svc in _ours(services).items():
        out.append((name, ["tidegauge", *_argv(svc.get("command"))]))
        if "healthcheck" in svc:
            out.append((f"{name} healthcheck", _health_argv(svc)))
    return out


# --- services and start order ---------------------------------------------------------------


def test_required_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert REQUIRED <= set(services), f"missing: {REQUIRED - set(services)}"


def test_our_services_build_one_image(services: dict[str, dict[str, Any]]) -> None:
    ours = _ours(services)
    assert set(ours) == OURS
    images = {svc.get("image") for svc in ours.values()}
    assert len(images) == 1, f"one image for all Tidegauge services, got {images}"
    for name, svc in ours.items():
        build = svc["build"]
        if isinstance(build, str):
            build = {"context": build}
        context, dockerfile = build.get("context", "."), build.get("dockerfile", "Dockerfile")
        assert (ROOT / context / dockerfile).resolve() == DOCKERFILE, name
        assert "entrypoint" not in svc, f"{name} must keep the image's tidegauge entrypoint"


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_depends_on_names_existing_services_with_valid_conditions(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    for dep, condition in _depends(services[name]).items():
        assert dep in services, f"{name} depends on unknown service {dep!r}"
        assert dep != name
        assert condition in CONDITIONS, f"{name} -> {dep}: bad condition {condition!r}"
        target = services[dep]
        if condition == "service_healthy":
            hc = target.get("healthcheck")
            assert hc and not hc.get("disable") and hc.get("test"), (
                f"{name} waits for {dep} to be healthy, but {dep} has no healthcheck"
            )
        if condition == "service_completed_successfully":
            assert target.get("restart", "no") in ("no", "on-failure"), (
                f"{name} waits for {dep} to exit, but {dep} restarts forever"
            )


def test_depends_on_has_no_cycle(services: dict[str, dict[str, Any]]) -> None:
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dep in _depends(services[name]):
            visit(dep, (*path, name))
        done.add(name)

    for name in services:
        visit(name, ())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("topic-init", {"kafka": "service_healthy"}),
        ("generator", {"topic-init": "service_completed_successfully"}),
        (
            "job",
            {"topic-init": "service_completed_successfully", "redis": "service_healthy"},
        ),
        ("dashboard", {"redis": "service_healthy"}),
        ("spark-worker", {"spark-master": "service_healthy"}),
        ("job", {"spark-master": "service_healthy"}),
    ],
)
def test_start_order(
    services: dict[str, dict[str, Any]], name: str, expected: dict[str, str]
) -> None:
    deps = _depends(services[name])
    for dep, condition in expected.items():
        assert deps.get(dep) == condition, f"{name} must wait for {dep}: {condition}"


def test_topic_init_is_one_shot(services: dict[str, dict[str, Any]]) -> None:
    assert services["topic-init"].get("restart", "no") == "no"


@pytest.mark.parametrize("name", ["generator", "job", "dashboard", "spark-master", "spark-worker"])
def test_long_running_services_restart(services: dict[str, dict[str, Any]], name: str) -> None:
    assert services[name].get("restart") == "unless-stopped"


def test_every_healthcheck_has_a_command(services: dict[str, dict[str, Any]]) -> None:
    checked = 0
    for name, svc in services.items():
        if "healthcheck" in svc:
            assert _health_argv(svc), f"{name}: empty healthcheck"
            checked += 1
    assert checked >= 4  # kafka, redis, job, dashboard


# --- Kafka in KRaft mode --------------------------------------------------------------------


def test_kafka_image_is_pinned_apache_kafka_4(services: dict[str, dict[str, Any]]) -> None:
    image = services["kafka"]["image"]
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", image), image


def test_kafka_kraft_settings_are_consistent(services: dict[str, dict[str, Any]]) -> None:
    env = _kafka_env(services)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = int(env["KAFKA_NODE_ID"])
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    controllers = env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(",")
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))

    assert set(controllers) <= set(listeners), "controller listener must be a listener"
    assert set(listeners) <= set(protocols), "every listener needs a security protocol"
    inter = env.get("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT")
    assert inter in listeners and inter not in controllers

    # Clients are told to come back on the service name, on a port something listens on.
    assert advertised, "no advertised listener"
    for name, (host, port) in advertised.items():
        assert name in listeners and name not in controllers, name
        assert host == "kafka", f"advertised host must be the service name, got {host!r}"
        assert port == listeners[name][1]
    assert "PLAINTEXT" in advertised and advertised["PLAINTEXT"][1] == 9092

    # The only voter is this node, reached on its controller listener.
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1
    m = re.fullmatch(r"(\d+)@([^:]+):(\d+)", voters[0])
    assert m, voters
    assert int(m.group(1)) == node_id
    assert m.group(2) in ("kafka", services["kafka"].get("hostname", "kafka"))
    assert int(m.group(3)) == listeners[controllers[0]][1]


def test_kafka_single_node_replication(services: dict[str, dict[str, Any]]) -> None:
    env = _kafka_env(services)
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env.get("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1") == "1"
    assert env.get("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1") == "1"


def test_kafka_cluster_id_is_a_kafka_uuid(services: dict[str, dict[str, Any]]) -> None:
    cluster_id = _kafka_env(services)["CLUSTER_ID"]
    assert len(cluster_id) == 22
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_kafka_data_on_named_volume(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    log_dir = _env(kafka)["KAFKA_LOG_DIRS"]
    assert _named_volume_for(compose, kafka, log_dir), f"{log_dir} is not on a named volume"


def test_kafka_healthcheck_lists_topics(services: dict[str, dict[str, Any]]) -> None:
    argv = _health_argv(services["kafka"])
    assert argv[0] == "/opt/kafka/bin/kafka-topics.sh"
    assert "--list" in argv
    host, port = _flag(argv, "--bootstrap-server").rsplit(":", 1)  # type: ignore[union-attr]
    assert host == "localhost" and int(port) == _kafka_client_port(services)


def test_redis_service(services: dict[str, dict[str, Any]]) -> None:
    redis = services["redis"]
    assert redis["image"] == "redis:7-alpine"
    assert _health_argv(redis)[:2] == ["redis-cli", "ping"]


# --- addresses in commands and environment --------------------------------------------------


def test_bootstraps_point_at_kafka(services: dict[str, dict[str, Any]]) -> None:
    values = [(n, _flag(argv, "--bootstrap")) for n, argv in _all_argvs(services)]
    values += [(n, _env(s).get("TIDEGAUGE_KAFKA_BOOTSTRAP")) for n, s in _ours(services).items()]
    values = [(n, v) for n, v in values if v is not None]
    assert len(values) >= 4, "topic-init, generator and job need a --bootstrap"
    for name, value in values:
        KafkaSettings(bootstrap=value)  # the app accepts it
        for server in value.split(","):
            host, port = server.rsplit(":", 1)
            assert host in services, f"{name}: bootstrap host {host!r} is not a service"
            assert host == "kafka"
            assert int(port) == _kafka_client_port(services), f"{name}: {server}"


def test_redis_urls_point_at_redis(services: dict[str, dict[str, Any]]) -> None:
    values = [(n, _flag(argv, "--redis")) for n, argv in _all_argvs(services)]
    values += [(n, _env(s).get("TIDEGAUGE_REDIS_URL")) for n, s in _ours(services).items()]
    values = [(n, v) for n, v in values if v is not None]
    assert len(values) >= 4, "job, its healthcheck and the dashboard need --redis"
    for name, value in values:
        RedisSettings(url=value)
        url = urlsplit(value)
        assert url.scheme == "redis", f"{name}: {value}"
        assert url.hostname in services and url.hostname == "redis", f"{name}: {value}"
        assert (url.port or REDIS_DEFAULT_PORT) == _redis_port(services), f"{name}: {value}"


def test_one_topic_everywhere(services: dict[str, dict[str, Any]]) -> None:
    topics = {_flag(argv, "--topic") for _, argv in _all_argvs(services)} - {None}
    topics |= {_env(s).get("TIDEGAUGE_TOPIC") for s in _ours(services).values()} - {None}
    assert len(topics) == 1, f"services disagree on the topic: {topics}"


# --- tidegauge subcommands ------------------------------------------------------------------


def test_dockerfile_entrypoint_is_tidegauge() -> None:
    entrypoints = [args for cmd, args in _dockerfile() if cmd == "ENTRYPOINT"]
    assert entrypoints, "Dockerfile has no ENTRYPOINT"
    assert json.loads(entrypoints[-1]) == ["tidegauge"]


def test_every_tidegauge_subcommand_is_real(services: dict[str, dict[str, Any]]) -> None:
    used = set()
    for name, argv in _all_argvs(services):
        if argv[0] != "tidegauge":
            continue
        assert len(argv) > 1, f"{name}: bare tidegauge"
        assert argv[1] in _COMMANDS, f"{name}: tidegauge {argv[1]} is not a subcommand"
        used.add(argv[1])
    assert used == {"topic", "produce", "job", "query", "dashboard", "cluster"}


def test_topic_init_creates_three_partitions(services: dict[str, dict[str, Any]]) -> None:
    argv = _argv(services["topic-init"]["command"])
    assert argv[0] == "topic"
    assert int(_flag(argv, "--partitions") or 0) == 3


def test_job_settings_are_valid(services: dict[str, dict[str, Any]]) -> None:
    argv = _argv(services["job"]["command"])
    assert argv[0] == "job"
    JobConfig(
        kafka=KafkaSettings(bootstrap=_flag(argv, "--bootstrap"), topic=_flag(argv, "--topic")),  # type: ignore[arg-type]
        redis=RedisSettings(url=_flag(argv, "--redis")),  # type: ignore[arg-type]
        checkpoint=_flag(argv, "--checkpoint"),  # type: ignore[arg-type]
        windows=(WindowSpec.parse(_flag(argv, "--window")),),  # type: ignore[arg-type]
        allowed_lateness_ms=parse_duration(_flag(argv, "--allowed-lateness")),  # type: ignore[arg-type]
    )


def test_job_healthcheck_asks_for_a_fresh_status(services: dict[str, dict[str, Any]]) -> None:
    argv = _health_argv(services["job"])
    assert argv[:3] == ["tidegauge", "query", "status"]
    max_age = parse_duration(_flag(argv, "--max-age"))  # type: ignore[arg-type]
    assert 0 < max_age
    start_period = services["job"]["healthcheck"].get("start_period", "0s")
    assert parse_duration(start_period) >= 60_000, "the JVM and first batch need time to start"


# --- volumes and ports ----------------------------------------------------------------------


def _named_volume_for(compose: dict[str, Any], service: dict[str, Any], path: str) -> str | None:
    """The top-level named volume mounted at `path` or one of its parents, if any."""
    declared = set(compose.get("volumes") or {})
    for mount in service.get("volumes") or []:
        if isinstance(mount, str):
            source, _, rest = mount.partition(":")
            target = rest.split(":")[0]
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        else:
            source, target, kind = mount.get("source", ""), mount["target"], mount.get("type")
        inside = path == target or path.startswith(target.rstrip("/") + "/")
        if inside and kind == "volume" and source in declared:
            return source
    return None


def test_job_checkpoint_on_named_volume(compose: dict[str, Any]) -> None:
    job = compose["services"]["job"]
    checkpoint = _flag(_argv(job["command"]), "--checkpoint")
    assert checkpoint and checkpoint.startswith("/")
    assert _named_volume_for(compose, job, checkpoint), f"{checkpoint} is not on a named volume"


def _published(port: str | int | dict[str, Any]) -> tuple[int, int]:
    """(host port, container port) of one `ports` entry."""
    if isinstance(port, dict):
        return int(port["published"]), int(port["target"])
    parts = str(port).split("/")[0].split(":")
    assert len(parts) >= 2, f"port {port} is not published on a fixed host port"
    return int(parts[-2]), int(parts[-1])


def test_dashboard_port_published(services: dict[str, dict[str, Any]]) -> None:
    dash = services["dashboard"]
    argv = _argv(dash["command"])
    port = int(_flag(argv, "--port") or 0)
    assert _flag(argv, "--address") == "0.0.0.0", "Streamlit must listen beyond localhost"
    assert (8501, port) in [_published(p) for p in dash.get("ports", [])]
    health = " ".join(_health_argv(dash))
    assert f"localhost:{port}/_stcore/health" in health


def _bind_address(port: str | int | dict[str, Any]) -> str:
    """The host address a `ports` entry publishes on, with `${VAR:-default}` at its default."""
    if isinstance(port, dict):
        return str(port.get("host_ip", "0.0.0.0"))
    text = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", str(port).split("/")[0])
    text = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", "", text)
    parts = text.split(":")
    return parts[0] if len(parts) == 3 and parts[0] else "0.0.0.0"


def test_only_loopback_is_published_unless_the_user_opts_in(
    services: dict[str, dict[str, Any]],
) -> None:
    """The page has no login: nothing is published on every host interface by default."""
    published = [(n, p) for n, svc in services.items() for p in svc.get("ports") or []]
    assert published, "the dashboard must be published"
    for name, port in published:
        assert _bind_address(port) == "127.0.0.1", f"{name}: {port} is open to the network"
    assert "TIDEGAUGE_DASHBOARD_BIND" in str(services["dashboard"]["ports"])


@pytest.mark.parametrize(
    ("service", "path"),
    [("redis", "/data"), ("job", "/data/checkpoint"), ("kafka", "/var/lib/kafka/data")],
)
def test_state_lives_on_named_volumes(compose: dict[str, Any], service: str, path: str) -> None:
    """What `down` and `up` must keep is on a named volume (anonymous ones are dropped)."""
    assert _named_volume_for(compose, compose["services"][service], path), (service, path)


def test_redis_persists_its_writes(services: dict[str, dict[str, Any]]) -> None:
    argv = _argv(services["redis"].get("command"))
    assert argv[:1] == ["redis-server"] and _flag(argv, "--appendonly") == "yes"


def test_our_services_reap_their_children_and_the_job_may_finish_a_batch(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, svc in _ours(services).items():
        assert svc.get("init") is True, f"{name}: no init process reaps Spark's children"
    grace = parse_duration(str(services["job"].get("stop_grace_period", "10s")))
    assert grace >= 30_000, "the job needs time to finish and commit its micro-batch"


def test_the_job_runs_on_the_compose_spark_cluster(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    master = _argv(svc["spark-master"]["command"])
    assert master[:3] == ["cluster", "--role", "master"]
    url = f"spark://{_flag(master, '--host')}:{_flag(master, '--port')}"
    assert svc["spark-master"].get("hostname") == _flag(master, "--host")
    worker = _argv(svc["spark-worker"]["command"])
    assert worker[:3] == ["cluster", "--role", "worker"] and _flag(worker, "--master-url") == url
    job = _argv(svc["job"]["command"])
    assert _flag(job, "--master") == url
    confs = dict(c.split("=", 1) for c in _flags(job, "--conf"))
    assert confs.get("spark.driver.host") == svc["job"].get("hostname") == "job"
    # scalable: no fixed name or host port on the workers
    assert "container_name" not in svc["spark-worker"] and not svc["spark-worker"].get("ports")
    # the executors read a carried-over state store from the checkpoint: the job's volume, same path
    checkpoint = _flag(job, "--checkpoint") or ""
    assert _named_volume_for(compose, svc["spark-worker"], checkpoint) == _named_volume_for(
        compose, svc["job"], checkpoint
    )


def _flags(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]


# --- Dockerfile and .dockerignore -----------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in text.splitlines():
        if line.strip():
            cmd, _, args = line.strip().partition(" ")
            out.append((cmd.upper(), args.strip()))
    return out


def test_the_image_writes_the_class_archive_where_its_user_can_read_it() -> None:
    steps = _dockerfile()
    runs = [
        i
        for i, (cmd, args) in enumerate(steps)
        if cmd == "RUN" and "jobs.runtime.jvm_archive_writer" in args
    ]
    installs = [
        i for i, (cmd, args) in enumerate(steps) if cmd == "RUN" and "pip install --no-deps" in args
    ]
    users = [i for i, (cmd, _) in enumerate(steps) if cmd == "USER"]
    assert runs and installs and users, "the image must write Spark's class archive"
    assert (
        installs[-1] < runs[0] < users[0]
    )  # with the project installed, before the user drops root
    env = " ".join(args for cmd, args in steps[: runs[0]] if cmd == "ENV")
    cache = re.search(r"TIDEGAUGE_CACHE_DIR=(\S+)", env)
    assert cache and not cache.group(1).startswith(("/root", "~")), "a cache every user can read"


def test_dockerfile_base_image() -> None:
    froms = [args for cmd, args in _dockerfile() if cmd == "FROM"]
    assert froms[-1].split()[0] == "python:3.11-slim-bookworm"


def test_dockerfile_installs_java_17_or_21() -> None:
    runs = " ".join(args for cmd, args in _dockerfile() if cmd == "RUN")
    assert re.search(r"apt-get install\b[^;&]*\bopenjdk-(17|21)-jre(-headless)?\b", runs), runs
    env = " ".join(args for cmd, args in _dockerfile() if cmd == "ENV")
    assert re.search(r"\bJAVA_HOME=\S*(17|21)", env), "JAVA_HOME must point at the Java 17/21 JRE"
    assert re.search(r"\bPYSPARK_PYTHON=\S+", env)


def test_dockerfile_installs_the_dependencies_in_their_own_layer_then_the_project() -> None:
    """A docs or code edit must not reinstall pyspark: the dependencies come from
    pyproject.toml alone, in an earlier layer; the sources are mounted for the install step
    only, so no layer keeps them."""
    steps = _dockerfile()
    copies = [(i, args.split()) for i, (cmd, args) in enumerate(steps) if cmd == "COPY"]
    assert all(parts[0] != "." for _, parts in copies), "COPY . puts the sources in a layer"
    deps_copy = next(i for i, parts in copies if parts[:-1] == ["pyproject.toml"])
    runs = [(i, args) for i, (cmd, args) in enumerate(steps) if cmd == "RUN"]
    deps = next(i for i, args in runs if "pip install -r" in args)
    project = [(i, args) for i, args in runs if "--mount=type=bind" in args]
    assert len(project) == 1, "one RUN installs the project from a bind mount of the context"
    i, args = project[0]
    target = re.search(r"--mount=type=bind,\S*target=([^,\s]+)", args)
    assert target and re.search(rf"pip install --no-deps {re.escape(target.group(1))}\b", args)
    assert deps_copy < deps < i
    assert "pip install -e" not in " ".join(a for _, a in runs)


def test_dockerfile_declares_no_volume() -> None:
    assert all(cmd != "VOLUME" for cmd, _ in _dockerfile()), "every service would get one"


def test_dockerfile_runs_as_non_root() -> None:
    steps = _dockerfile()
    users = [(i, args) for i, (cmd, args) in enumerate(steps) if cmd == "USER"]
    assert users, "no USER: the image would run as root"
    last_index, user = users[-1]
    assert user.split(":")[0] not in ("root", "0")
    entry_index = next(i for i, (cmd, _) in enumerate(steps) if cmd == "ENTRYPOINT")
    assert last_index < entry_index


def _ignored(patterns: list[str], path: str) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").strip("/")
        if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.removeprefix("**/")):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_local_state_out_and_the_project_in() -> None:
    patterns = [
        ln.strip()
        for ln in DOCKERIGNORE.read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    for path in (".venv", ".git", "var", ".pytest_cache", "__pycache__"):
        assert _ignored(patterns, path), f"{path} should be in .dockerignore"
    for path in ("pyproject.toml", "README.md", "tidegauge", "jobs", "dashboard", "sketches"):
        assert not _ignored(patterns, path), f"{path} is needed by pip install ."
