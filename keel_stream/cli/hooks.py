"""`keel-stream hooks run`: the hooks dispatcher and senders (docs/hooks.md)."""

from __future__ import annotations

import typer

from keel_stream.cli.options import (
    Bootstrap,
    DatabaseUrl,
    MetricsHost,
    MetricsPort,
    load_settings,
    optional_kafka,
    require_database,
)
from keel_stream.cli.service import Daemon
from keel_stream.hooks.service import HooksConfig, run_hooks
from keel_stream.metrics import Component
from keel_stream.tenancy.document import load_boot_config

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Signed webhooks derived from the ledger.")


@app.command("run")
def run(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = None,
) -> None:
    """Dispatch hook events from keel.events.v1 and send them until SIGTERM (without a broker,
    only send what replays and redeliveries queue)."""
    settings = load_settings(
        database_url=database_url,
        kafka_bootstrap=bootstrap,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    config = HooksConfig.from_settings(
        settings,
        require_database(settings),
        optional_kafka(settings),
        # hooks.allowedHosts of tenants without a document
        load_boot_config(settings.external_config),
    )
    Daemon(settings, (Component.HOOKS,)).serve(lambda stop: run_hooks(config, stop))
