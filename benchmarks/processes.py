"""The processes a benchmark starts: run one with its output in a log, read its CPU and peak RSS
from /proc, read a counter off its Prometheus endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator

__all__ = ["cpu_s", "peak_rss_mb", "process", "scrape"]


def cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user + system), from /proc."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:  # noqa: PTH123
        fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def peak_rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:  # noqa: PTH123
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextlib.asynccontextmanager
async def process(*args: str, env: dict[str, str], log: str) -> AsyncIterator[int]:
    """A command running with its output appended to `log`, for the block (SIGTERM at its end,
    SIGKILL 60 s later); yields its pid."""
    with open(log, "ab") as out:  # noqa: PTH123, ASYNC230
        child = await asyncio.create_subprocess_exec(
            *args, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    try:
        yield child.pid
    finally:
        with contextlib.suppress(ProcessLookupError):  # it ended already (its log says why)
            child.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(child.wait(), 60)
        except TimeoutError:
            child.kill()
            await child.wait()


async def scrape(port: int, wanted: dict[str, str]) -> dict[str, float]:
    """The samples named in `wanted` (renamed as it says) off a /metrics endpoint."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
    body = (await reader.read()).decode(errors="replace")
    writer.close()
    found: dict[str, float] = {}
    for line in body.splitlines():
        name, _, value = line.rpartition(" ")
        if name in wanted:
            found[wanted[name]] = float(value)
    return found
