"""The `keel-stream` command."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer

from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.errors import KeelError
from keel_stream.logs import configure_logging, get_logger
from keel_stream.settings import KeelSettings
from keel_stream.store import MigrationReport, connect, migrate

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

DatabaseUrl = Annotated[
    str | None, typer.Option("--database-url", help="PostgreSQL URL (default: $KEEL_DATABASE_URL).")
]


async def _migrate(dsn: str) -> MigrationReport:
    conn = await connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


def _run_migrations(dsn: str) -> MigrationReport:
    try:
        return asyncio.run(_migrate(dsn))
    except KeelError as exc:
        typer.echo(f"error [{exc.error_code}]: {exc.message}", err=True)
        raise typer.Exit(code=1) from exc


def _report(report: MigrationReport) -> None:
    applied = ", ".join(report.applied) if report.applied else "nothing new"
    typer.echo(f"schema version {report.version} (applied: {applied})")


@app.command("migrate")
def migrate_command(database_url: DatabaseUrl = None) -> None:
    """Apply the schema migrations (safe to re-run; stops on the first error)."""
    settings = KeelSettings()
    configure_logging(settings.log_level)
    dsn = database_url or settings.database_url
    if dsn is None:
        typer.echo(
            "error [missing_database_url]: set KEEL_DATABASE_URL or --database-url", err=True
        )
        raise typer.Exit(code=2)
    _report(_run_migrations(dsn))


async def _serve_until_stopped(dsn: str) -> None:
    """Migrate, report, and wait for SIGINT/SIGTERM (handlers set before "ready" is printed)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    _report(await _migrate(dsn))
    typer.echo(f"database: {dsn}")
    typer.echo("ready; Ctrl-C or SIGTERM stops")
    await stop.wait()


@app.command("dev")
def dev_command(
    database_url: DatabaseUrl = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory for embedded servers ($KEEL_DATA_DIR).")
    ] = None,
    once: Annotated[bool, typer.Option(help="Report and exit instead of serving.")] = False,
) -> None:
    """Run the platform on its embedded defaults (or on KEEL_DATABASE_URL)."""
    settings = KeelSettings()
    configure_logging(settings.log_level)
    log = get_logger("dev")
    dsn = database_url or settings.database_url
    embedded: EmbeddedPostgres | None = None
    if dsn is None:
        embedded = EmbeddedPostgres((data_dir or settings.data_dir) / "postgres")
        dsn = embedded.start()
        log.info("embedded postgres started", log_file=str(embedded.log_file))
    try:
        if once:
            _report(_run_migrations(dsn))
            typer.echo(f"database: {dsn}")
            return
        try:
            asyncio.run(_serve_until_stopped(dsn))
        except KeelError as exc:
            typer.echo(f"error [{exc.error_code}]: {exc.message}", err=True)
            raise typer.Exit(code=1) from exc
    finally:
        if embedded is not None:
            embedded.stop()
            log.info("embedded postgres stopped")


def main() -> None:
    """Console-script entry point."""
    app()
