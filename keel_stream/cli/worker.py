"""`keel-stream worker`: claim and run agent runs."""

from __future__ import annotations

import asyncio

from keel_stream.cli.options import Bootstrap, DatabaseUrl, load_settings, require_database
from keel_stream.dev.components import worker_config
from keel_stream.dev.signals import until_signalled
from keel_stream.worker.worker import Worker

__all__ = ["worker"]


def worker(database_url: DatabaseUrl = None, bootstrap: Bootstrap = None) -> None:
    """Claim and run agent runs until SIGTERM (which drains: finish or release, then exit)."""
    settings = load_settings(database_url=database_url, kafka_bootstrap=bootstrap)
    config = worker_config(settings, require_database(settings), settings.kafka_bootstrap)
    asyncio.run(until_signalled(Worker(config).run))
