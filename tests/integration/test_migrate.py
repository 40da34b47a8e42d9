"""Migrations: versioned, re-runnable, stopping at the first error, detecting drift."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from keel_stream.errors import MigrationDrift, MigrationFailed
from keel_stream.kernel import Kind
from keel_stream.store import connect, migrate
from keel_stream.store.sqlfiles import migration_files


async def test_migrate_applies_every_file_once_and_reruns_as_a_no_op(
    empty_database_dsn: str,
) -> None:
    conn = await connect(empty_database_dsn)
    try:
        first = await migrate(conn)
        names = [f.name for f in migration_files()]
        assert list(first.applied) == names
        assert first.version == int(names[-1][:4])
        second = await migrate(conn)
        assert second.applied == ()
        assert second.version == first.version
        recorded = await conn.fetch("SELECT name FROM keel_schema_migrations ORDER BY version")
        assert [r["name"] for r in recorded] == names
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
        }
        assert {"tenants", "sessions", "events", "runs", "outbox"} <= tables
    finally:
        await conn.close()


async def test_migrate_stops_on_the_first_error(empty_database_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "0001_good.sql").write_text("CREATE TABLE one (id int);")
    (tmp_path / "0002_bad.sql").write_text("CREATE TABLE two (id int); SELECT * FROM missing;")
    (tmp_path / "0003_later.sql").write_text("CREATE TABLE three (id int);")
    conn = await connect(empty_database_dsn)
    try:
        with pytest.raises(MigrationFailed) as info:
            await migrate(conn, sorted(tmp_path.iterdir()))
        assert "0002_bad.sql" in info.value.message
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
        }
        assert "one" in tables
        assert "two" not in tables, "the failed file must leave no trace"
        assert "three" not in tables, "files after the failure must not run"
        versions = await conn.fetch("SELECT version FROM keel_schema_migrations")
        assert [r["version"] for r in versions] == [1]
        # Fixed, it resumes where it stopped.
        (tmp_path / "0002_bad.sql").write_text("CREATE TABLE two (id int);")
        report = await migrate(conn, sorted(tmp_path.iterdir()))
        assert report.applied == ("0002_bad.sql", "0003_later.sql")
    finally:
        await conn.close()


async def test_changed_applied_file_is_drift(empty_database_dsn: str, tmp_path: Path) -> None:
    source = tmp_path / "0001_one.sql"
    source.write_text("CREATE TABLE one (id int);")
    conn = await connect(empty_database_dsn)
    try:
        await migrate(conn, [source])
        source.write_text("CREATE TABLE one (id bigint);")
        with pytest.raises(MigrationDrift):
            await migrate(conn, [source])
    finally:
        await conn.close()


async def test_badly_named_file_is_refused(empty_database_dsn: str, tmp_path: Path) -> None:
    source = tmp_path / "one.sql"
    source.write_text("SELECT 1;")
    conn = await connect(empty_database_dsn)
    try:
        with pytest.raises(MigrationFailed):
            await migrate(conn, [source])
    finally:
        await conn.close()


async def test_kind_values_are_pinned_in_the_store(database_dsn: str) -> None:
    conn = await connect(database_dsn)
    try:
        definition = await conn.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = 'events_kind_check'"
        )
    finally:
        await conn.close()
    assert set(re.findall(r"'([a-z.]+)'::text", definition)) == {k.value for k in Kind}


async def test_a_no_transaction_file_runs_its_statements_one_by_one(
    empty_database_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "0001_table.sql").write_text("CREATE TABLE one (id int);")
    # CREATE INDEX CONCURRENTLY fails inside a transaction, and so in a multi-statement string.
    (tmp_path / "0002_index.sql").write_text(
        "-- keel:no-transaction\n"
        "-- a comment; with a semicolon\n"
        "DROP INDEX CONCURRENTLY IF EXISTS one_id;\n"
        "CREATE UNIQUE INDEX CONCURRENTLY one_id\n"
        "    ON one (id);\n"
    )
    conn = await connect(empty_database_dsn)
    try:
        report = await migrate(conn, sorted(tmp_path.iterdir()))
        assert report.applied == ("0001_table.sql", "0002_index.sql")
        assert await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'one_id'::regclass"
        )
        assert (await migrate(conn, sorted(tmp_path.iterdir()))).applied == ()
    finally:
        await conn.close()


async def test_an_interrupted_concurrent_index_is_rebuilt(
    empty_database_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "0001_table.sql").write_text(
        "CREATE TABLE one (id int); INSERT INTO one VALUES (1), (1);"
    )
    (tmp_path / "0002_index.sql").write_text(
        "-- keel:no-transaction\n"
        "DROP INDEX CONCURRENTLY IF EXISTS one_id;\n"
        "CREATE UNIQUE INDEX CONCURRENTLY one_id ON one (id);\n"
    )
    conn = await connect(empty_database_dsn)
    try:
        with pytest.raises(MigrationFailed) as info:
            await migrate(conn, sorted(tmp_path.iterdir()))
        assert "0002_index.sql" in info.value.message
        # The failed build left an INVALID index behind and no version row.
        assert not await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'one_id'::regclass"
        )
        versions = await conn.fetch("SELECT version FROM keel_schema_migrations")
        assert [r["version"] for r in versions] == [1]
        await conn.execute("DELETE FROM one WHERE ctid <> (SELECT min(ctid) FROM one)")
        report = await migrate(conn, sorted(tmp_path.iterdir()))
        assert report.applied == ("0002_index.sql",)
        assert await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'one_id'::regclass"
        )
    finally:
        await conn.close()


async def test_a_no_transaction_file_must_end_its_statements_with_a_semicolon(
    empty_database_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "0001_one.sql").write_text("CREATE TABLE one (id int);")
    (tmp_path / "0002_two.sql").write_text("-- keel:no-transaction\nCREATE TABLE two (id int)\n")
    conn = await connect(empty_database_dsn)
    try:
        with pytest.raises(MigrationFailed) as info:
            await migrate(conn, sorted(tmp_path.iterdir()))
        assert "0002_two.sql" in info.value.message
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
        }
        assert "one" not in tables, "a file breaking the rules is refused before anything runs"
    finally:
        await conn.close()


async def test_concurrent_migrators_take_turns_over_concurrent_index_builds(
    empty_database_dsn: str,
) -> None:
    first, second = await connect(empty_database_dsn), await connect(empty_database_dsn)
    try:
        reports = await asyncio.gather(migrate(first), migrate(second))
        applied = sorted(name for report in reports for name in report.applied)
        assert applied == [f.name for f in migration_files()]
        invalid = await first.fetchval("SELECT count(*) FROM pg_index WHERE NOT indisvalid")
        assert invalid == 0
    finally:
        await first.close()
        await second.close()
