"""The tree is ruff-clean, ruff-formatted and mypy --strict clean."""

from __future__ import annotations

import re
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


# One concept per module: the one error tree's diagram stays whole, whatever its length (splitting
# the tree to pass the line count scattered it over seven files once).
_WHOLE_CONCEPTS = frozenset({"keel_stream/errors/__init__.py"})


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
    for path in _product_files():
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
