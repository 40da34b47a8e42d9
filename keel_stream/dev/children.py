"""Child processes of `keel-stream dev`: started with the parent's settings, stopped with it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping

__all__ = ["child_process"]


@contextlib.asynccontextmanager
async def child_process(
    *args: str, env: Mapping[str, str], grace_s: float = 20.0
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run `keel-stream ARGS` as a child; SIGTERM it (then SIGKILL after grace_s) on exit."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel_stream", *args, env={**os.environ, **env}
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), grace_s)
            except TimeoutError:
                process.kill()
                await process.wait()
