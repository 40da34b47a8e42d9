"""Child processes of `keel-stream dev`: started with the parent's settings, stopped with it.

Each child is armed with a parent-death signal (keel_stream.dev.procs.die_with_parent): if dev
is SIGKILLed, and so never reaches its teardown, the kernel SIGKILLs the child too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Final

from keel_stream.dev.procs import die_with_parent

__all__ = ["child_process"]

_STDERR: Final = 2


@contextlib.asynccontextmanager
async def child_process(
    *args: str, env: Mapping[str, str], grace_s: float = 20.0
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run `keel-stream ARGS` as a child; SIGTERM it (then SIGKILL after grace_s) on exit.

    Its stdout goes to dev's stderr, beside its logs: dev's stdout is dev's own report.

    Start it from the thread that lives as long as the child should (the event loop's): the
    parent-death signal fires when the thread that started the child ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel_stream",
        *args,
        env={**os.environ, **env},
        stdout=_STDERR,
        preexec_fn=die_with_parent(),
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
