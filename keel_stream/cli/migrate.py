"""`keel-stream migrate`."""

from __future__ import annotations

import asyncio

import typer

from keel_stream.cli.options import DatabaseUrl, load_settings, require_database
from keel_stream.store.admin import migrate_database, migration_summary

__all__ = ["migrate"]


def migrate(database_url: DatabaseUrl = None) -> None:
    """Apply the schema migrations (safe to re-run; stops on the first error)."""
    settings = load_settings(database_url=database_url)
    report = asyncio.run(migrate_database(require_database(settings)))
    typer.echo(migration_summary(report))
