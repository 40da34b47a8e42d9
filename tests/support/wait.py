"""Waiting on a condition with a deadline, never on a bare sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def wait_until(
    condition: Callable[[], Awaitable[bool]], timeout_s: float, what: str, interval_s: float = 0.05
) -> None:
    """Poll condition until it holds; TimeoutError naming `what` at the deadline."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)
