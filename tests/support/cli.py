"""Running `keel-stream` as a child process from tests, and reading how it failed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

KEEL = [sys.executable, "-m", "keel_stream"]


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


async def run_keel(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> Finished:
    process = await asyncio.create_subprocess_exec(
        *KEEL,
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


def run_keel_sync(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KEEL, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
        check=False,
    )


def one_line_error(
    result: Finished | subprocess.CompletedProcess[str], code: str, exit_code: int
) -> str:
    """The message of a failure reported as the CLI promises: exit status, a single
    `error [code]: message` line on stderr, and no traceback anywhere."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    prefix = f"error [{code}]: "
    assert lines[0].startswith(prefix), output
    assert result.returncode == exit_code, output
    return lines[0].removeprefix(prefix)


@contextlib.asynccontextmanager
async def keel_process(
    *args: str, env: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`keel-stream ARGS` with stdout and stderr to `log` (not a terminal); SIGTERM at the end."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    environment.update({"FORCE_COLOR": "1", **env})
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel_stream", *args, env=environment, stdout=out, stderr=out
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
