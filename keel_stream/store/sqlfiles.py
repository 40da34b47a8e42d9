"""SQL lives in .sql files: one query or schema object per file, loaded once by name."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

__all__ = ["migration_files", "query", "sql_root"]


def sql_root() -> Traversable:
    """The packaged sql/ directory."""
    return files("keel_stream.store").joinpath("sql")


@cache
def query(name: str) -> str:
    """The text of queries/<name>.sql."""
    return sql_root().joinpath("queries", f"{name}.sql").read_text(encoding="utf-8")


def migration_files() -> list[Traversable]:
    """The packaged migrations, in version order."""
    directory = sql_root().joinpath("migrations")
    return sorted((f for f in directory.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
