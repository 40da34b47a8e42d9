"""Serving the API with uvicorn, draining SSE streams on SIGTERM before the process exits.

The protocol is uvicorn's h11 one with a header deadline and a connection limit
(keel_stream.api.connections); the app bounds each body (keel_stream.api.limits).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

from keel_stream.api.app import ApiConfig, create_app
from keel_stream.api.connections import bounded_protocol

__all__ = ["DrainingServer", "api_server"]


class DrainingServer(uvicorn.Server):
    """On SIGINT/SIGTERM: tell every open stream to drain, then shut down as uvicorn does
    (stop accepting, wait for open connections to finish, up to the graceful timeout)."""

    def __init__(self, config: uvicorn.Config, api: ApiConfig, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._api = api
        self._on_exit = on_exit
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._api.draining.set()
        self._on_exit()
        super().handle_exit(sig, frame)
        # uvicorn re-raises captured signals once it has shut down; after a full drain the exit
        # is clean (status 0). Private attribute: uvicorn is pinned, and a test covers it.
        self._captured_signals.clear()


def api_server(
    api: ApiConfig, host: str, port: int, on_exit: Callable[[], None] = lambda: None
) -> DrainingServer:
    config = uvicorn.Config(
        create_app(api),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=10,
        lifespan="on",
        http=bounded_protocol(api.limits),
        backlog=api.limits.backlog,
    )
    return DrainingServer(config, api, on_exit)
