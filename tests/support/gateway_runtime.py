"""A stand-in runtime for the sweep test: spawns the reference sidecar (with two grandchildren)
through the stdio transport with a pid registry and an audit log, prints the provider's process
group on stdout, then waits to be killed.

    python -m tests.support.gateway_runtime DATA_DIR [sidecar switches...]
"""

from __future__ import annotations

import asyncio
import os
import sys

from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport
from keel_stream.logs import configure_logging

SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]


async def main(data_dir: str, switches: list[str]) -> None:
    command = [*SIDECAR, "--grandchildren", "2", *switches]
    transport = StdioTransport(
        command,
        {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        name="ref",
        kind="agent",
        audit=AuditLog.in_data_dir(data_dir),
        registry=PidRegistry.in_data_dir(data_dir),
    )
    client = GatewayClient(transport, ProviderKind.AGENT)
    await client.start()
    await client.initialize()
    print(transport.pgid, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    configure_logging("warning")  # stdout carries the process group only
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
