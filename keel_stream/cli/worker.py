"""`keel-stream worker`: claim and run agent runs."""

from __future__ import annotations

import asyncio

from keel_stream.cli.options import (
    Bootstrap,
    DatabaseUrl,
    MetricsHost,
    MetricsPort,
    load_settings,
    optional_kafka,
    require_database,
)
from keel_stream.cli.preflight import ensure_port_free
from keel_stream.dev.components import worker_config
from keel_stream.dev.signals import until_signalled
from keel_stream.metrics import METRICS_PORT_HINT, Component, declare, serve_metrics
from keel_stream.plugins import load_at_start
from keel_stream.worker.worker import Worker

__all__ = ["worker"]


def worker(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = None,
) -> None:
    """Claim and run agent runs until SIGTERM (which drains: finish or release, then exit)."""
    settings = load_settings(
        database_url=database_url,
        kafka_bootstrap=bootstrap,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    config = worker_config(settings, require_database(settings), optional_kafka(settings))
    declare(Component.WORKER, Component.GATEWAY)
    if settings.metrics_port is not None:
        ensure_port_free(settings.metrics_host, settings.metrics_port, hint=METRICS_PORT_HINT)
        serve_metrics(settings.metrics_host, settings.metrics_port)
    load_at_start()  # plugins' tools and providers (docs/plugins.md)
    asyncio.run(until_signalled(Worker(config).run))
