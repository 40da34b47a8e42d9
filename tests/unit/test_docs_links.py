"""The docs point at files that exist: every relative Markdown link, and every repository path
they name (``docs/…``, ``keel_stream/…``, ``tests/…``), resolves in this repository."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
_LINK: Final = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_PATH: Final = re.compile(
    r"(?<![\w/.-])((?:docs|keel_stream|tests|benchmarks|compose|examples|shared)/[\w./-]*"
    r"\.(?:md|py|sql|sh|yml|yaml|toml|json))"
)


def _docs() -> list[Path]:
    return [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def _dead(doc: Path, text: str) -> list[str]:
    dead = []
    for match in _LINK.finditer(text):
        target = match.group(1)
        external = target.startswith(("http://", "https://", "mailto:"))
        if not external and not (doc.parent / target).exists():
            dead.append(f"{doc.relative_to(ROOT)}: link {target}")
    for match in _PATH.finditer(text):
        named = match.group(1)
        if not (ROOT / named).exists() and not (doc.parent / named).exists():
            dead.append(f"{doc.relative_to(ROOT)}: names {named}")
    return dead


def test_the_docs_link_and_name_only_files_that_exist() -> None:
    dead = [line for doc in _docs() for line in _dead(doc, doc.read_text())]
    assert dead == [], "\n".join(dead)


def test_a_dead_link_or_path_is_found() -> None:
    doc = ROOT / "docs" / "architecture.md"
    text = "See [gone](gone.md) and docs/brokers.md."
    assert _dead(doc, text) == [
        "docs/architecture.md: link gone.md",
        "docs/architecture.md: names docs/brokers.md",
    ]


def _top_level() -> set[str]:
    package = ROOT / "keel_stream"
    names = {p.stem for p in package.glob("*.py")} | {
        p.name for p in package.iterdir() if (p / "__init__.py").exists()
    }
    return names - {"__init__", "__main__"}


def _block_after(text: str, heading: str) -> list[str]:
    """The lines of the first indented block after ``heading``."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line)
    return block


def test_the_development_layout_names_every_package() -> None:
    layout = _block_after((ROOT / "docs" / "development.md").read_text(), "## Layout")
    named = {line.split()[0].rstrip("/").removesuffix(".py") for line in layout if line.strip()}
    assert sorted(_top_level() - named) == []


def _present(tier: str, present: set[str]) -> str:
    """A contract's layer as the docs show it: an optional ``(name)`` only while it exists."""
    delimiter = " | " if "|" in tier else " : "
    names = [name.strip() for name in tier.replace("|", ":").split(":")]
    shown = [n.strip("()") for n in names if not n.startswith("(") or n.strip("()") in present]
    return delimiter.join(shown)


def test_the_documented_layers_are_the_contracts_layers() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    rules = _block_after((ROOT / "docs" / "development.md").read_text(), "## Import rules")
    documented = [line.split("  (")[0].strip() for line in rules if line.strip()]
    assert documented == [_present(tier, _top_level()) for tier in layers]
