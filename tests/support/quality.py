"""What the quality checks read: the product's modules, and those long enough to be worth a look.

A module past MODULE_LINES is reported at the end of the run (tests/conftest.py), not refused:
a module is one concept, whatever its length (a wall at 400 lines once scattered the one error
tree over seven files)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["MODULE_LINES", "PRODUCT", "ROOT", "long_modules", "product_files"]

ROOT: Final = Path(__file__).resolve().parents[2]
PRODUCT: Final = ("keel_stream", "topics", "projections")
MODULE_LINES: Final = 400


def product_files() -> list[Path]:
    return sorted(f for root in PRODUCT for f in (ROOT / root).rglob("*.py"))


def long_modules() -> list[tuple[str, int]]:
    """(path, lines) of each product module past MODULE_LINES, longest first."""
    lengths = [(str(p.relative_to(ROOT)), len(p.read_text().splitlines())) for p in product_files()]
    return sorted(((p, n) for p, n in lengths if n > MODULE_LINES), key=lambda pn: -pn[1])
