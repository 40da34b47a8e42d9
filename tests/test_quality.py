"""The tree is ruff-clean, ruff-formatted and mypy --strict clean."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.quality import product_files

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_lint() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


DRIVERS = ("asyncpg",)
FUNCTION_LINES = 60


def test_functions_stay_short() -> None:
    import ast

    too_long: list[str] = []
    for path in product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert not too_long, "\n".join(too_long)


def test_processes_are_known_by_one_identity_module() -> None:
    stat_read = re.compile(r"/proc/\{[^}]*\}/stat\b")
    readers = [
        str(path.relative_to(ROOT))
        for path in product_files()
        if stat_read.search(path.read_text()) and path != ROOT / "keel_stream" / "procs.py"
    ]
    assert not readers, "a pid and its start time are read in keel_stream/procs.py: " + str(readers)


def test_only_the_store_imports_the_database_driver() -> None:
    import ast

    outside: list[str] = []
    for path in product_files():
        relative = path.relative_to(ROOT)
        if relative.parts[:2] == ("keel_stream", "store"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                names = [node.module or ""]
                if node.module == "keel_stream.store":
                    names += [f"keel_stream.store.{alias.name}" for alias in node.names]
            private = ("keel_stream.store.sqlfiles", "keel_stream.store.driver_errors")
            if any(n.split(".")[0] in DRIVERS or n.startswith(private) for n in names):
                outside.append(f"{relative}:{node.lineno}")
    assert not outside, "SQL has one door, keel_stream/store/: " + ", ".join(outside)


def _store_names_imported(tree: object) -> list[tuple[int, str]]:
    """(line, name) of every name imported from keel_stream.store or one of its modules."""
    import ast

    assert isinstance(tree, ast.AST)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keel_stream.store"):
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_pool_and_no_postgres_class_outside_the_store() -> None:
    """The pool and the PostgreSQL adapters stay behind the store's door: callers get a Store
    (keel_stream.store.open_store) and type against the ports (issue 27, point 1)."""
    import ast

    pool_names = re.compile(r"\.(Pool|create_pool|pooled|connect|connect\.\w+|Postgres\w+)$")
    outside: list[str] = []
    for path in product_files():
        relative = path.relative_to(ROOT)
        if relative.parts[:2] == ("keel_stream", "store"):
            continue
        source = path.read_text()
        for line, name in _store_names_imported(ast.parse(source)):
            if pool_names.search(name) or ".connect." in name:
                outside.append(f"{relative}:{line} {name}")
        outside += [
            f"{relative}:{number} {text.strip()}"
            for number, text in enumerate(source.splitlines(), 1)
            if re.search(r"\bPool\b|\bcreate_pool\b|\bPostgres[A-Z]|\._pool\b", text)
        ]
    assert not outside, "the pool stays in keel_stream/store/: " + ", ".join(outside)


# Where the process environment is read besides settings.py, and why (entry points aside).
_ENVIRONMENT_READERS = {
    # The command of the external smoke (python -m keel_stream.dev.gateway_smoke): its own edge.
    "keel_stream/dev/gateway_smoke.py",
    # The text of a script run in a tool server's child process, which empties its environment.
    "keel_stream/worker/mcp_connection.py",
    # XDG_CACHE_HOME and JAVA_HOME: the platform's variables, for the Apache Kafka build of dev.
    "keel_stream/kafka/apache_resolve.py",
}


def test_only_settings_reads_the_environment() -> None:
    reads = re.compile(r"os\.environ|getenv|KeelSettings\(\)")
    readers = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in product_files()
        if str(path.relative_to(ROOT)) not in {"keel_stream/settings.py", *_ENVIRONMENT_READERS}
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reads.search(line)
    ]
    assert not readers, "settings are built once at the edge and passed in: " + str(readers)


def test_no_dead_code_in_the_product() -> None:
    # pyproject.toml's [tool.vulture]: the tree, tests and benchmarks count as users; what only
    # a framework reads is in vulture_whitelist.py.
    result = _run("vulture")
    dead = [line for line in result.stdout.splitlines() if line.startswith("keel_stream/")]
    assert not dead, "\n".join(dead) + result.stderr


KAFKA_CLIENTS = ("aiokafka",)
_FAUST_TRANSPORT = "faust.transport"


def test_only_the_kafka_door_imports_the_kafka_client() -> None:
    """Kafka has one door, keel_stream/kafka/: the client library (and Faust's transport built
    on it) is imported nowhere else, so its settings (TLS, SASL, timeouts) are made once."""
    import ast

    outside: list[str] = []
    for path in product_files():
        relative = path.relative_to(ROOT)
        if relative.parts[:2] == ("keel_stream", "kafka"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(
                n.split(".")[0] in KAFKA_CLIENTS or n.startswith(_FAUST_TRANSPORT) for n in names
            ):
                outside.append(f"{relative}:{node.lineno}")
    assert not outside, "Kafka has one door, keel_stream/kafka/: " + ", ".join(outside)
