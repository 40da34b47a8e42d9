"""The one lifecycle of daemon commands (keel_stream.cli.service): start, drain, stop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest

from keel_stream.cli.service import Daemon
from keel_stream.errors import PortInUse
from keel_stream.settings import KeelSettings


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_drains_the_daemon_and_its_body_returns(signum: signal.Signals) -> None:
    async def body(stop: asyncio.Event) -> str:
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signum)
        await asyncio.wait_for(stop.wait(), 10)
        return "drained"

    assert Daemon(KeelSettings()).run(body) == "drained"


def test_a_metrics_port_in_use_stops_the_start_before_the_body_runs() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ran: list[bool] = []

        async def body(stop: asyncio.Event) -> None:
            ran.append(True)

        with pytest.raises(PortInUse):
            Daemon(KeelSettings(metrics_port=port)).serve(body)
    assert ran == []
