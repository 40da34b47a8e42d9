"""The tree is ruff-clean, ruff-formatted and mypy --strict clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


PRODUCT = ("keel_stream", "topics", "projections")
DRIVERS = ("asyncpg",)


def _product_files() -> list[Path]:
    return sorted(f for root in PRODUCT for f in (ROOT / root).rglob("*.py"))


# One concept per module: the one error tree stays whole, whatever its length (splitting it to
# pass the line count scattered it over seven files once).
_WHOLE_CONCEPTS = frozenset({"keel_stream/errors.py"})


def test_modules_and_functions_stay_small() -> None:
    import ast

    too_big: list[str] = []
    for path in _product_files():
        source = path.read_text()
        whole = str(path.relative_to(ROOT)) in _WHOLE_CONCEPTS
        if len(source.splitlines()) > 400 and not whole:
            too_big.append(f"{path.relative_to(ROOT)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    too_big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert not too_big, "\n".join(too_big)


def test_only_the_store_imports_the_database_driver() -> None:
    import ast

    outside: list[str] = []
    for path in _product_files():
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


KAFKA_CLIENTS = ("aiokafka",)
_FAUST_TRANSPORT = "faust.transport"


def test_only_the_kafka_door_imports_the_kafka_client() -> None:
    """Kafka has one door, keel_stream/kafka/: the client library (and Faust's transport built
    on it) is imported nowhere else, so its settings (TLS, SASL, timeouts) are made once."""
    import ast

    outside: list[str] = []
    for path in _product_files():
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
