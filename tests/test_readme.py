"""README.md opens with the two set-up commands, and .ci/run runs the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert match is not None, "README.md must open with a sh block"
    assert readme.index(match.group(0)) < readme.index("\n## "), "the block must come first"
    return [line for line in match.group(1).splitlines() if line.strip()]


def test_readme_has_exactly_two_setup_commands() -> None:
    run_platform, run_tests = _setup_commands()
    assert run_platform.endswith("keel-stream dev")
    assert "pytest" in run_tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, run_tests = _setup_commands()
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci_lines[-1] == run_tests
