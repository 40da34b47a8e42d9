"""The import rules hold: `lint-imports` keeps every contract in pyproject.toml (the layers, no
cycle, the kernel pure, one door each for asyncpg, aiokafka and Faust's transport)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]


def _lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_the_import_contracts_are_kept() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_cycle_through_a_function_level_import_breaks_the_contract(
    tmp_path: Path,
) -> None:
    # The same contract type as ours, on a package whose cycle closes inside a function: the
    # contracts see such imports (a lazy import does not hide a cycle).
    package = tmp_path / "knot"
    for name, body in {
        "__init__.py": "",
        "a/__init__.py": "import knot.b\n",
        "b/__init__.py": "def later() -> None:\n    import knot.a\n",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(body)
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = knot\n\n"
        "[importlinter:contract:acyclic]\nname = No cycle\ntype = acyclic_siblings\n"
        "ancestors = knot\n"
    )
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No cycle BROKEN" in result.stdout
