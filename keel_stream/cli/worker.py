"""`keel-stream worker`: claim and run agent runs."""

from __future__ import annotations

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
from keel_stream.metrics import Component
from keel_stream.plugins import load_at_start
from keel_stream.settings import process_environ

__all__ = ["worker"]


def worker(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = None,
) -> None:
    """Claim and run agent runs until SIGTERM (which drains: finish or release, then exit)."""
    # The composition root imports every service: only the command that runs one pays for it.
    from keel_stream.dev.components import worker_config
    from keel_stream.worker.worker import Worker

    settings = load_settings(
        database_url=database_url,
        kafka_bootstrap=bootstrap,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    config = worker_config(
        settings, require_database(settings), optional_kafka(settings), process_environ()
    )
    daemon = Daemon(settings, (Component.WORKER, Component.GATEWAY))
    daemon.start()
    load_at_start(settings.plugins_enabled)  # plugins' tools and providers (docs/plugins.md)
    daemon.run(Worker(config).run)
