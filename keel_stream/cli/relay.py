"""`keel-stream relay` and `keel-stream republish`: the outbox to Kafka, and the ledger back
into the outbox."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from keel_stream.cli.options import (
    Bootstrap,
    DatabaseUrl,
    MetricsHost,
    MetricsPort,
    RelayShards,
    load_settings,
    require_database,
    require_kafka,
)
from keel_stream.cli.service import Daemon
from keel_stream.metrics import Component
from keel_stream.relay import Relay, RelayConfig, Shard
from keel_stream.settings import KeelSettings
from keel_stream.store import opened_store

__all__ = ["relay", "republish_command"]


def relay(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    shard: Annotated[int, typer.Option(min=0, help="Outbox shard this relay serves.")] = 0,
    shards: RelayShards = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = None,
) -> None:
    """Publish the outbox to Kafka until SIGTERM (one active relay per shard, others stand by)."""
    settings = load_settings(
        database_url=database_url,
        kafka_bootstrap=bootstrap,
        relay_shards=shards,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    config = _config(settings, shard)
    Daemon(settings, (Component.RELAY,)).serve(Relay.from_config(config).run)


def _config(settings: KeelSettings, shard: int) -> RelayConfig:
    # The composition root imports every service: only the command that runs one pays for it.
    from keel_stream.dev.components import relay_config

    if shard >= settings.relay_shards:
        raise typer.BadParameter(
            f"{shard} is not below the shard count ({settings.relay_shards})",
            param_hint="--shard",
        )
    return relay_config(
        settings,
        require_database(settings),
        require_kafka(settings),
        Shard(index=shard, count=settings.relay_shards),
    )


def republish_command(
    database_url: DatabaseUrl = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    after_seq: Annotated[int, typer.Option(min=0, help="Only events with a greater seq.")] = 0,
) -> None:
    """Re-seed keel.events.v1 from the ledger (the relay publishes what this enqueues)."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> str:
        async with opened_store(dsn, max_size=2) as store:
            outbox = store.outbox()
            report = await outbox.republish(tenant=tenant, session=session, after_seq=after_seq)
        return f"enqueued {report.events} events of {report.sessions} sessions"

    typer.echo(asyncio.run(work()))
