"""`keel-stream tenants …` and `keel-stream keys …`: who may use the API."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Annotated

import orjson
import typer

from keel_stream.cli.options import DatabaseUrl, load_settings, require_database
from keel_stream.cli.output import print_table
from keel_stream.errors import ConfigNotFound
from keel_stream.store import opened_store
from keel_stream.store.admin import KeyRow
from keel_stream.store.tenant_configs import StoredConfig
from keel_stream.tenancy.document import load_config_file, redacted

__all__ = ["config_app", "keys_app", "tenants_app"]

tenants_app = typer.Typer(no_args_is_help=True, help="Tenants.")
keys_app = typer.Typer(no_args_is_help=True, help="API keys (each acts for one tenant).")
config_app = typer.Typer(
    no_args_is_help=True,
    help="The tenant's configuration document (external providers, models), versioned.",
)
tenants_app.add_typer(config_app, name="config")


@tenants_app.command("create")
def create_tenant(
    tenant: Annotated[str, typer.Argument(help="The tenant id.")],
    name: Annotated[str, typer.Option(help="A display name.")] = "",
    database_url: DatabaseUrl = None,
) -> None:
    """Create a tenant."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> None:
        async with opened_store(dsn, max_size=1) as store:
            await store.ledger().create_tenant(tenant, name)

    asyncio.run(work())
    typer.echo(f"created tenant {tenant}")


@config_app.command("set")
def set_config(
    tenant: Annotated[str, typer.Argument(help="The tenant id.")],
    file: Annotated[Path, typer.Argument(help="The document, a JSON file.", dir_okay=False)],
    database_url: DatabaseUrl = None,
) -> None:
    """Store a new version of the tenant's document (validated first).

    Values of env and headers must be secret references (${NAME}, env:NAME, secret:NAME); a
    literal secret is refused and never stored, as is a secret-shaped literal in args or url
    (literal_secret: use a reference there too)."""
    config = load_config_file(file)
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> int:
        async with opened_store(dsn, max_size=1) as store:
            return await store.tenant_configs().put(tenant, config)

    typer.echo(f"stored config version {asyncio.run(work())} of tenant {tenant}")


@config_app.command("show")
def show_config(
    tenant: Annotated[str, typer.Argument(help="The tenant id.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Print the tenant's newest document (redacted: references only, never a value)."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> StoredConfig | None:
        async with opened_store(dsn, max_size=1) as store:
            return await store.tenant_configs().latest(tenant)

    stored = asyncio.run(work())
    if stored is None:
        raise ConfigNotFound(f"tenant {tenant!r} has no configuration document")
    shown = {"tenant": tenant, "version": stored.version, "document": redacted(stored.config)}
    typer.echo(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())


@keys_app.command("create")
def create_key(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key; it is printed once and stored only as a hash."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> tuple[str, str]:
        async with opened_store(dsn, max_size=1) as store:
            return await store.keys().create(tenant)

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
        async with opened_store(dsn, max_size=1) as store:
            await store.keys().revoke(key_id)

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
        async with opened_store(dsn, max_size=1) as store:
            return await store.admin().list_keys(tenant, revoked=revoked)

    print_table(
        ["key id", "tenant", "created", "revoked"],
        (
            [k.key_id, k.tenant, _timestamp(k.created_at), _timestamp(k.revoked_at)]
            for k in asyncio.run(work())
        ),
    )


def _timestamp(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat(timespec="seconds")
