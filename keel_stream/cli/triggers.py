"""`keel-stream triggers run`: the trigger scheduler (docs/triggers.md)."""

from __future__ import annotations

import typer

from keel_stream.cli.options import (
    DatabaseUrl,
    MetricsHost,
    MetricsPort,
    load_settings,
    require_database,
)
from keel_stream.cli.service import Daemon
from keel_stream.metrics import Component
from keel_stream.triggers.scheduler import SchedulerConfig, run_scheduler

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Schedules and inbound webhooks that fire input.")


@app.command("run")
def run(
    database_url: DatabaseUrl = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = None,
) -> None:
    """Claim due triggers and fire them until SIGTERM (any number of replicas may run)."""
    settings = load_settings(
        database_url=database_url, metrics_port=metrics_port, metrics_host=metrics_host
    )
    config = SchedulerConfig.from_settings(settings, require_database(settings))
    Daemon(settings, (Component.TRIGGERS,)).serve(lambda stop: run_scheduler(config, stop))
