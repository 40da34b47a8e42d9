"""Schema migrations: numbered .sql files applied in order, each once, stopping at the first error.

Each file runs in its own transaction together with its row in keel_schema_migrations, so a
failed file leaves no trace and the files before it stay applied. A session-level advisory lock
makes concurrent migrators take turns. Re-running applies nothing new; an applied file whose
checksum changed is reported as drift rather than silently skipped.

A file whose first line is `-- keel:no-transaction` runs outside a transaction, for statements
PostgreSQL refuses inside one (`CREATE INDEX CONCURRENTLY`, `DROP INDEX CONCURRENTLY`). The rules
for such a file:

- each statement ends with a `;` at the end of a line (nowhere else: no `;` at a line's end
  inside a literal or a comment); the statements run one by one, each in autocommit, and the
  file's version row is written only after the last one succeeded;
- every statement is re-runnable, because a failure or a crash can leave any prefix of the file
  applied and the whole file runs again next time. An interrupted concurrent index build leaves
  an INVALID index behind, which `CREATE INDEX CONCURRENTLY IF NOT EXISTS` would keep: build an
  index as `DROP INDEX CONCURRENTLY IF EXISTS x;` followed by `CREATE INDEX CONCURRENTLY x …;`;
- keep one object per file, as everywhere else.

The advisory lock is taken by polling `pg_try_advisory_lock` rather than by waiting in
`pg_advisory_lock`: a migrator waiting inside a statement holds a snapshot, which a concurrent
index build of the migrator holding the lock would wait for (a deadlock).
"""

from __future__ import annotations

import asyncio
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
_LOCK_POLL_S: Final = 0.05
_NO_TRANSACTION: Final = "-- keel:no-transaction"


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

    @property
    def transactional(self) -> bool:
        first_line = self.sql.lstrip("\ufeff").partition("\n")[0]
        return first_line.strip() != _NO_TRANSACTION

    def statements(self) -> list[str]:
        """The statements of a no-transaction file: each ends with `;` at the end of a line."""
        statements: list[str] = []
        lines: list[str] = []
        for line in self.sql.splitlines():
            lines.append(line)
            if line.rstrip().endswith(";") and not line.lstrip().startswith("--"):
                statements.append("\n".join(lines))
                lines = []
        rest = [line for line in lines if line.strip() and not line.lstrip().startswith("--")]
        if rest:
            raise MigrationFailed(f"{self.name}: the last statement does not end with ';'")
        return statements


def _load(sources: Iterable[Traversable | Path]) -> list[_Migration]:
    migrations = []
    for source in sources:
        match = _FILE_NAME.fullmatch(source.name)
        if match is None:
            raise MigrationFailed(f"migration file name {source.name!r} is not NNNN_name.sql")
        migration = _Migration(int(match[1]), source.name, source.read_text("utf-8"))
        if not migration.transactional:
            migration.statements()  # refuses a file that breaks the rules before anything runs
        migrations.append(migration)
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationFailed("two migration files share a version number")
    return sorted(migrations, key=lambda m: m.version)


async def _record(conn: asyncpg.Connection, migration: _Migration) -> None:
    await conn.execute(
        "INSERT INTO keel_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        migration.version,
        migration.name,
        migration.checksum,
    )


async def _lock(conn: asyncpg.Connection) -> None:
    """Take the migrators' advisory lock, polling (no snapshot is held between the tries)."""
    while True:
        if await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK_KEY):
            return
        await asyncio.sleep(_LOCK_POLL_S)


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
            if migration.transactional:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await _record(conn, migration)
            else:
                for statement in migration.statements():
                    await conn.execute(statement)
                await _record(conn, migration)
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
        await _lock(conn)
        try:
            return await _apply(conn, migrations)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
