"""Schema migrations: numbered .sql files applied in order, each once, stopping at the first error.

Each file runs in its own transaction together with its row in keel_schema_migrations, so a
failed file leaves no trace and the files before it stay applied. A session-level advisory lock
makes concurrent migrators take turns. Re-running applies nothing new; an applied file whose
checksum changed is reported as drift rather than silently skipped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

import asyncpg

from keel_stream.errors import MigrationDrift, MigrationFailed
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import migration_files, sql_root

__all__ = ["MigrationReport", "migrate"]

_FILE_NAME: Final = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")
_LOCK_KEY: Final = 0x6B65656C  # "keel": the advisory lock that serialises migrators


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What a migrate run did."""

    applied: tuple[str, ...]
    version: int


@dataclass(frozen=True, slots=True)
class _Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _load(sources: Iterable[Traversable | Path]) -> list[_Migration]:
    migrations = []
    for source in sources:
        match = _FILE_NAME.fullmatch(source.name)
        if match is None:
            raise MigrationFailed(f"migration file name {source.name!r} is not NNNN_name.sql")
        migrations.append(_Migration(int(match[1]), source.name, source.read_text("utf-8")))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationFailed("two migration files share a version number")
    return sorted(migrations, key=lambda m: m.version)


async def _apply(conn: asyncpg.Connection, migrations: list[_Migration]) -> MigrationReport:
    await conn.execute(sql_root().joinpath("bootstrap.sql").read_text("utf-8"))
    rows = await conn.fetch("SELECT version, checksum FROM keel_schema_migrations")
    applied = {row["version"]: row["checksum"] for row in rows}
    done: list[str] = []
    for migration in migrations:
        recorded = applied.get(migration.version)
        if recorded is not None:
            if recorded != migration.checksum:
                raise MigrationDrift(f"{migration.name} changed after it was applied")
            continue
        try:
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO keel_schema_migrations (version, name, checksum)"
                    " VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
        except asyncpg.PostgresError as exc:
            raise MigrationFailed(f"{migration.name} failed: {exc}") from exc
        done.append(migration.name)
    version = max([m.version for m in migrations] + list(applied), default=0)
    return MigrationReport(applied=tuple(done), version=version)


async def migrate(
    conn: asyncpg.Connection, sources: Iterable[Traversable | Path] | None = None
) -> MigrationReport:
    """Apply every migration not yet applied (the packaged ones unless sources are given)."""
    migrations = _load(migration_files() if sources is None else sources)
    async with translated("migrate"):
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        try:
            return await _apply(conn, migrations)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
