"""A stand-in runtime for the sweep test: spawns the reference sidecar (with grandchildren)
through the stdio transport with a pid registry, prints its process group, then waits to be
killed.

    python -m tests.support.gateway_runtime PIDS_DIR
"""

from __future__ import annotations

import asyncio
import sys

from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport

SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]


async def main(pids_dir: str) -> None:
    command = [*SIDECAR, "--grandchildren", "2", "--ignore-stdin-eof"]
    transport = StdioTransport(command, {"PATH": "/usr/bin:/bin"}, registry=PidRegistry(pids_dir))
    client = GatewayClient(transport, ProviderKind.AGENT)
    await client.start()
    await client.initialize()
    print(transport.pgid, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
