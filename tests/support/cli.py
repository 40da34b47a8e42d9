"""Running `keel-stream` as a child process from async tests."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


async def run_keel(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> Finished:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel_stream",
        *args,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())
