"""`keel-stream api`: serve AgentAPI."""

from __future__ import annotations

import asyncio

from keel_stream.cli.options import (
    ApiHost,
    ApiPort,
    Bootstrap,
    DatabaseUrl,
    load_settings,
    optional_kafka,
    require_database,
)
from keel_stream.cli.preflight import ensure_port_free
from keel_stream.cli.service import Daemon
from keel_stream.logs import route_stdlib_logging
from keel_stream.metrics import Component
from keel_stream.settings import process_environ
from keel_stream.store.admin import ping

__all__ = ["PORT_HINT", "api"]

PORT_HINT = "choose another with KEEL_API_PORT or --port (0 picks a free one)"


def api(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    host: ApiHost = None,
    port: ApiPort = None,
) -> None:
    """Serve AgentAPI (REST + SSE) until SIGTERM, which drains open streams first."""
    # Imported here, not at the top: the web stack takes a second to import, and every other
    # command (a relay or worker restarting after a failover) should not pay for it.
    from keel_stream.api.server import api_server
    from keel_stream.dev.components import api_config

    settings = load_settings(
        database_url=database_url, kafka_bootstrap=bootstrap, api_host=host, api_port=port
    )
    dsn = require_database(settings)
    ensure_port_free(settings.api_host, settings.api_port, hint=PORT_HINT)
    # A bad boot document stops the start here.
    config = api_config(settings, dsn, optional_kafka(settings), process_environ())
    # The API serves its metrics on /metrics; uvicorn drains open streams on SIGTERM itself.
    Daemon(settings, (Component.API, Component.GATEWAY)).start(metrics=False)
    server = api_server(config, settings.api_host, settings.api_port)
    route_stdlib_logging()  # uvicorn has just installed its own handlers

    async def serve() -> None:
        # The app connects in its lifespan, where a failure is only logged: check first.
        await ping(dsn)
        await server.serve()

    asyncio.run(serve())
