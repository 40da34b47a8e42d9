"""`keel-stream tenants …` and `keel-stream keys …`: who may use the API."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated

import typer

from keel_stream.cli.options import DatabaseUrl, load_settings, require_database
from keel_stream.cli.output import print_table
from keel_stream.store import PostgresLedger, pooled
from keel_stream.store.admin import KeyRow, list_keys
from keel_stream.store.keys import KeyStore

__all__ = ["keys_app", "tenants_app"]

tenants_app = typer.Typer(no_args_is_help=True, help="Tenants.")
keys_app = typer.Typer(no_args_is_help=True, help="API keys (each acts for one tenant).")


@tenants_app.command("create")
def create_tenant(
    tenant: Annotated[str, typer.Argument(help="The tenant id.")],
    name: Annotated[str, typer.Option(help="A display name.")] = "",
    database_url: DatabaseUrl = None,
) -> None:
    """Create a tenant."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> None:
        async with pooled(dsn, max_size=1) as pool:
            await PostgresLedger(pool).create_tenant(tenant, name)

    asyncio.run(work())
    typer.echo(f"created tenant {tenant}")


@keys_app.command("create")
def create_key(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key; it is printed once and stored only as a hash."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> tuple[str, str]:
        async with pooled(dsn, max_size=1) as pool:
            return await KeyStore(pool).create(tenant)

    key_id, key = asyncio.run(work())
    typer.echo(f"key id: {key_id}")
    typer.echo(f"key:    {key}")


@keys_app.command("revoke")
def revoke_key(
    key_id: Annotated[str, typer.Argument(help="The key id printed at creation.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke an API key (requests with it answer 401 from now on)."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> None:
        async with pooled(dsn, max_size=1) as pool:
            await KeyStore(pool).revoke(key_id)

    asyncio.run(work())
    typer.echo(f"revoked {key_id}")


@keys_app.command("list")
def list_keys_command(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked keys.")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """The key ids, their tenants and when they were created (and revoked); never the keys."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> list[KeyRow]:
        async with pooled(dsn, max_size=1) as pool:
            return await list_keys(pool, tenant, revoked=revoked)

    print_table(
        ["key id", "tenant", "created", "revoked"],
        (
            [k.key_id, k.tenant, _timestamp(k.created_at), _timestamp(k.revoked_at)]
            for k in asyncio.run(work())
        ),
    )


def _timestamp(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat(timespec="seconds")
