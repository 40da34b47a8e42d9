"""compose/ is the production shape, checked without a Docker engine.

The compose file is validated against the compose-spec JSON Schema (as vendored by
check-jsonschema) and the HAProxy configuration with `haproxy -c`; the other tests encode the
decisions: every service `keel-stream dev` supervises runs here (the list is dev's own,
keel_stream.dev.services.SERVICES), each with two replicas and a healthcheck; no secret is
written in the file; Kafka is a 3-broker KRaft cluster (RF 3, min.insync.replicas 2, SASL/SCRAM
for clients, the version the test suite pins); PostgreSQL is a pg_auto_failover monitor and two
data nodes, reached through a multi-host read-write DSN. tests/unit/test_compose_image.py checks
the Dockerfile and the build context.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import parse_qs, urlsplit

import typer
from jsonschema import Draft7Validator  # type: ignore[import-untyped]
from ruamel.yaml import YAML
from typer.core import TyperGroup

from keel_stream.cli import app
from keel_stream.dev.services import SERVICES
from keel_stream.kafka.apache_resolve import pinned_version
from keel_stream.settings import KeelSettings, env_var

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
HAPROXY_CFG = ROOT / "compose" / "haproxy.cfg"
ENV_EXAMPLE = ROOT / "compose" / "keel.env.example"
KEEL_IMAGE = "${KEEL_IMAGE:-keel-stream:local}"
ONE_SHOTS = {"migrate", "topics", "kafka-users"}
ALL_INTERFACES = "0.0.0.0"  # inside a container: reachable through published ports
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|PRIVATE_KEY|CREDENTIAL", re.IGNORECASE)
REFERENCE = re.compile(r"^\$\{[A-Z0-9_]+(:?\?[^}]*)?\}$")  # no default: a default is a literal


# --- loading -------------------------------------------------------------------------------------


@cache
def _compose_text() -> str:
    return COMPOSE.read_text()


def _compose() -> dict[str, Any]:
    """The compose file as compose sees it before interpolation (anchors and merge keys
    resolved); a fresh copy each call, so a test may change it."""
    document: dict[str, Any] = YAML(typ="safe", pure=True).load(_compose_text())
    return document


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    assert services, "the compose file defines no services"
    return services


def _keel_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items() if s.get("image") == KEEL_IMAGE}


def _long_running() -> dict[str, dict[str, Any]]:
    return {
        name: s
        for name, s in _services().items()
        if s.get("restart") != "no" and not s.get("profiles")
    }


def _compose_schema() -> dict[str, Any]:
    vendored = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema: dict[str, Any] = json.loads(vendored.read_text())
    # Its $schema says https://json-schema.org/draft-07/schema, an address jsonschema does not
    # know (it knows http://...#): the dialect is checked here and the validator chosen for it.
    assert "json-schema.org/draft-07/" in schema["$schema"], schema["$schema"]
    return schema


def _schema_errors(document: dict[str, Any]) -> list[str]:
    validator = Draft7Validator(_compose_schema())
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment is written as a mapping in this file"
    return {str(key): str(value) for key, value in env.items()}


def _ports(service: dict[str, Any]) -> list[tuple[range, int]]:
    """Short-syntax port mappings as (host ports, container port)."""
    mappings = []
    for spec in service.get("ports", []):
        *_, host, container = str(spec).split(":")
        first, _, last = host.partition("-")
        mappings.append((range(int(first), int(last or first) + 1), int(container.split("/")[0])))
    return mappings


def _running(command: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The keel-stream services whose command is this command (with or without flags)."""
    return {
        name: s
        for name, s in _keel_services().items()
        if tuple(s.get("command", ()))[: len(command)] == command
    }


def _brokers() -> dict[str, dict[str, Any]]:
    return {
        name: s
        for name, s in _services().items()
        if str(s.get("image", "")).startswith("apache/kafka:") and s.get("restart") != "no"
    }


# --- the whole platform --------------------------------------------------------------------------


def test_compose_file_follows_the_compose_spec() -> None:
    assert "services" in _compose_schema()["properties"], "not the compose-spec schema"
    assert _schema_errors(_compose()) == []


def test_the_schema_check_rejects_a_misspelt_key() -> None:
    document = _compose()
    document["services"]["api"]["helthcheck"] = document["services"]["api"].pop("healthcheck")
    errors = _schema_errors(document)
    assert errors, "a misspelt service key passed the schema check"
    assert any("helthcheck" in error for error in errors), errors


def test_every_service_dev_supervises_runs_in_compose() -> None:
    assert SERVICES, "dev supervises no service"
    missing = [" ".join(spec.command) for spec in SERVICES if not _running(spec.command)]
    assert missing == [], f"dev runs these, compose does not: {missing}"


def test_every_service_dev_supervises_runs_two_replicas_at_least() -> None:
    single = [
        name
        for spec in SERVICES
        for name, service in _running(spec.command).items()
        if service.get("deploy", {}).get("replicas", 1) < 2
    ]
    assert single == [], f"one replica only (a single point of failure): {single}"


def test_every_long_running_service_has_a_healthcheck() -> None:
    without = [
        name
        for name, s in _long_running().items()
        if not s.get("healthcheck", {}).get("test") or s["healthcheck"].get("disable")
    ]
    assert without == [], f"no healthcheck: {without}"


def _inline_secret(text: str) -> bool:
    """A password inside a URL (user:password@host) or a command (password=...)."""
    in_url = re.search(r"://[^/@\s:]+:[^/@\s]+@", text)
    return bool(in_url or re.search(r"(?i)password=(?!\$\$?\{)", text))


def _literal_secrets(document: Any, path: str = "") -> list[str]:
    """Values under a secret-looking key that are not a single ${VAR} reference."""
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            where = f"{path}/{key}"
            scalar = not isinstance(value, dict | list)
            if scalar and SECRET_NAME.search(str(key)) and not REFERENCE.match(str(value)):
                found.append(f"{where}={value}")
            found += _literal_secrets(value, where)
    elif isinstance(document, list):
        for i, item in enumerate(document):
            found += _literal_secrets(item, f"{path}/{i}")
    elif isinstance(document, str) and _inline_secret(document):
        found.append(f"{path}: {document}")
    return found


def test_no_secret_is_written_in_the_compose_file() -> None:
    assert _literal_secrets(_compose()) == []


def test_the_secret_check_finds_literal_secrets() -> None:
    document = {
        "services": {
            "a": {"environment": {"KEEL_OPENAI_API_KEY": "sk-live", "PGPASSWORD": "${PW}"}},
            "b": {"environment": {"KEEL_DATABASE_URL": "postgresql://keel:hunter2@db/keel"}},
            "c": {"command": ["sh", "-c", "tool --add-config 'password=hunter2'"]},
        }
    }
    found = _literal_secrets(document)
    assert len(found) == 3, found
    assert not any("PGPASSWORD" in f for f in found)


def test_secrets_come_from_the_env_file_the_repository_ignores() -> None:
    keys = {
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    }
    secret_settings = {env_var(f) for f in KeelSettings.model_fields if SECRET_NAME.search(f)}
    needed = {"KEEL_OPENAI_API_KEY", "KEEL_KAFKA_SASL_PASSWORD", "PGPASSWORD", "KEEL_PROVIDER"}
    assert needed <= secret_settings | {"PGPASSWORD", "KEEL_PROVIDER"}
    assert needed <= keys, f"compose/keel.env.example lacks {sorted(needed - keys)}"
    for line in ENV_EXAMPLE.read_text().splitlines():
        if SECRET_NAME.search(line.split("=", 1)[0]) and "=" in line and not line.startswith("#"):
            assert line.endswith("="), f"the template carries a value: {line}"
    for name, service in _keel_services().items():
        assert service.get("env_file") == "keel.env", f"{name} does not read compose/keel.env"
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "compose/keel.env"], check=False
    )
    assert ignored.returncode == 0, "compose/keel.env is not git-ignored"


def test_the_workers_use_the_provider_of_the_env_file() -> None:
    for name, service in _running(("worker",)).items():
        assert "KEEL_PROVIDER" not in _environment(service), f"{name} pins the provider"
        assert service.get("env_file") == "keel.env"
    assert "KEEL_PROVIDER=openai" in ENV_EXAMPLE.read_text().splitlines()


# --- Kafka ---------------------------------------------------------------------------------------


def test_kafka_is_a_three_broker_kraft_cluster() -> None:
    brokers = _brokers()
    assert len(brokers) == 3, f"brokers: {sorted(brokers)}"
    ids = {_environment(b)["KAFKA_NODE_ID"] for b in brokers.values()}
    assert len(ids) == 3
    for name, broker in brokers.items():
        env = _environment(broker)
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller", name
        assert len(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == 3, name
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2", name
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false", name
        assert len({_environment(b)["CLUSTER_ID"] for b in brokers.values()}) == 1


def test_kafka_clients_log_in_with_scram_as_the_brokers_expect() -> None:
    brokers = _brokers()
    for name, broker in brokers.items():
        env = _environment(broker)
        protocols = dict(
            p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        assert protocols["CLIENT"] == "SASL_PLAINTEXT", name
        assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512", name
        assert "CLIENT://:9092" in env["KAFKA_LISTENERS"].split(","), name
    for name, service in _keel_services().items():
        env = _environment(service)
        assert env["KEEL_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT", name
        assert env["KEEL_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512", name
        hosts = {h.split(":")[0] for h in env["KEEL_KAFKA_BOOTSTRAP"].split(",")}
        assert hosts == set(brokers), name


def test_kafka_writes_its_log_into_a_named_volume() -> None:
    compose = _compose()
    for name, kafka in _brokers().items():
        log_dirs = _environment(kafka).get("KAFKA_LOG_DIRS")
        assert log_dirs, f"{name}: without KAFKA_LOG_DIRS the image writes to /tmp"
        mounts = [str(volume).split(":") for volume in kafka.get("volumes", [])]
        for log_dir in log_dirs.split(","):
            holding = [
                source
                for source, target, *_ in mounts
                if PurePosixPath(log_dir).is_relative_to(PurePosixPath(target))
            ]
            assert holding, f"{name}: {log_dir} is not inside any mounted volume"
            assert all(source in compose["volumes"] for source in holding), holding
        assert "user" not in kafka, "a named volume takes the image user's ownership of the path"


def test_kafka_runs_the_version_the_test_suite_pins() -> None:
    images = {s["image"] for s in _services().values() if "apache/kafka" in s.get("image", "")}
    assert images == {f"apache/kafka:{pinned_version()}"}


# --- PostgreSQL ----------------------------------------------------------------------------------


def test_postgres_is_a_monitor_and_two_data_nodes() -> None:
    pgaf = {n: s for n, s in _services().items() if "pg_auto_failover" in s.get("image", "")}
    assert {n: s["command"][-1] for n, s in pgaf.items()} == {
        "pg-monitor": "/keel/pgaf/monitor.sh",
        "pg-node-1": "/keel/pgaf/node.sh",
        "pg-node-2": "/keel/pgaf/node.sh",
    }
    node = (ROOT / "compose" / "pgaf" / "node.sh").read_text()
    assert "--replication-quorum true" in node, "the standby is not synchronous"


def test_every_service_connects_to_the_primary_through_a_multi_host_dsn() -> None:
    nodes = {n for n, s in _services().items() if s.get("command", [""])[-1].endswith("node.sh")}
    for name, service in _keel_services().items():
        dsn = urlsplit(_environment(service)["KEEL_DATABASE_URL"])
        hosts = {h.rsplit(":", 1)[0] for h in dsn.netloc.split("@")[-1].split(",")}
        assert hosts == nodes, f"{name}: {hosts}"
        assert parse_qs(dsn.query).get("target_session_attrs") == ["read-write"], name
        assert ":" not in dsn.netloc.split("@")[0], f"{name}: a password in the DSN"


# --- commands, settings, dependencies ------------------------------------------------------------


def test_keel_services_run_commands_the_cli_has() -> None:
    """Each command resolves to a CLI command and its flags parse (nothing runs)."""
    root = typer.main.get_command(app)
    for name, service in sorted(_keel_services().items()):
        words, command = list(service["command"]), root
        parent, context = None, typer.Context(root, info_name="keel-stream")
        while isinstance(command, TyperGroup):
            assert words, f"{name}: {command.name} needs a subcommand"
            word = words.pop(0)
            found = command.get_command(context, word)
            assert found is not None, f"{name}: {command.name} has no command {word!r}"
            command, parent = found, context
            context = typer.Context(found, info_name=word, parent=parent)
        command.make_context(command.name or name, words, parent=parent)


def test_keel_settings_set_in_compose_exist() -> None:
    known = {env_var(field) for field in KeelSettings.model_fields}
    set_here: dict[str, set[str]] = {}
    for name, service in _keel_services().items():
        for key in _environment(service):
            set_here.setdefault(key, set()).add(name)
    assert "KEEL_DATABASE_URL" in set_here
    unknown = {key: sorted(names) for key, names in set_here.items() if key not in known}
    assert not unknown, f"KEEL_* variables no setting reads: {unknown}"


def test_relay_shards_cover_every_shard() -> None:
    relays = _running(("relay",))
    shards = {int(s["command"][s["command"].index("--shard") + 1]) for s in relays.values()}
    counts = {_environment(s)["KEEL_RELAY_SHARDS"] for s in relays.values()}
    assert counts == {str(len(shards))}, counts
    assert shards == set(range(len(shards))), shards


def test_every_keel_service_runs_the_one_image_built_once() -> None:
    builders = {name: s for name, s in _services().items() if "build" in s}
    assert list(builders) == ["migrate"], f"one service builds the image, not {sorted(builders)}"
    build = builders["migrate"]["build"]
    assert (COMPOSE.parent / build["context"]).resolve() == ROOT
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve().is_file()
    assert builders["migrate"]["image"] == KEEL_IMAGE


def _waiting_for(target: str, condition: str) -> list[str]:
    """The services whose depends_on waits for target with this condition."""
    return [
        name
        for name, service in _services().items()
        if isinstance(service.get("depends_on"), dict)
        and service["depends_on"].get(target, {}).get("condition") == condition
    ]


def test_one_shot_services_are_awaited_to_completion() -> None:
    """`up --wait` accepts a one-shot container's exit only when a service waits for it."""
    one_shots = {name for name, s in _services().items() if s.get("restart") == "no"}
    assert one_shots == ONE_SHOTS
    for name in one_shots:
        assert _waiting_for(name, "service_completed_successfully"), f"nothing waits for {name}"


# --- the balancer, healthchecks and metrics ------------------------------------------------------


def _http_probe(service: dict[str, Any]) -> str:
    """The URL a healthcheck fetches with the image's own Python (no curl in the image)."""
    test = service.get("healthcheck", {}).get("test")
    assert test, "no healthcheck"
    assert test[:3] == ["CMD", "python", "-c"], test
    compile(test[3], "<healthcheck>", "exec")
    url = re.search(r"urlopen\('([^']+)'", test[3])
    assert url, test[3]
    return url.group(1)


def test_api_healthcheck_asks_readyz_and_haproxy_waits_for_it() -> None:
    api = _services()["api"]
    port = _environment(api)["KEEL_API_PORT"]
    assert _http_probe(api) == f"http://127.0.0.1:{port}/readyz"
    assert _waiting_for("api", "service_healthy") == ["haproxy"]
    assert _environment(api)["KEEL_API_HOST"] == ALL_INTERFACES
    assert not _ports(api), "the API replicas are reached through haproxy only"


def test_haproxy_balances_the_api_replicas_on_readyz() -> None:
    haproxy, api = _services()["haproxy"], _services()["api"]
    port = int(_environment(api)["KEEL_API_PORT"])
    assert [c for _, c in _ports(haproxy)] == [port]
    config = HAPROXY_CFG.read_text()
    replicas = api["deploy"]["replicas"]
    assert re.search(rf"^\s*server-template api {replicas} api:{port} check", config, re.M)
    assert "http-check send meth GET uri /readyz" in config
    tunnel = re.search(r"timeout tunnel (\d+)h", config)
    assert tunnel, "SSE streams need a long tunnel timeout"
    server = re.search(r"timeout server (\d+)s", config)
    assert server, "no server timeout"
    assert int(server.group(1)) > 15, "shorter than the SSE heartbeat (15 s)"


def test_haproxy_accepts_its_configuration() -> None:
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert Path(binary).exists(), "haproxy is not installed (Debian: apt-get install haproxy)"
    checked = subprocess.run(
        [binary, "-c", "-f", str(HAPROXY_CFG)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_relay_metrics_are_published_for_every_replica() -> None:
    published_ports: list[int] = []
    for name, relay in _running(("relay",)).items():
        env = _environment(relay)
        assert env.get("KEEL_METRICS_HOST") == ALL_INTERFACES, name
        port = int(env["KEEL_METRICS_PORT"])
        published = [hosts for hosts, container in _ports(relay) if container == port]
        assert published, f"{name}: metrics port {port} is not published"
        assert len(published[0]) >= relay["deploy"]["replicas"], f"{name}: a port per replica"
        published_ports += list(published[0])
    assert len(published_ports) == len(set(published_ports)), "two replicas share a host port"
