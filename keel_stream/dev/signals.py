"""Stopping on SIGINT/SIGTERM: long-running commands and the dev supervisor share these."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

__all__ = ["STOP_SIGNALS", "remember_stop_signals", "signals_remembered", "until_signalled"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

T = TypeVar("T")


async def until_signalled(
    body: Callable[[asyncio.Event], Awaitable[T]], *, already: bool = False
) -> T:
    """Run body(stop) with SIGINT/SIGTERM setting stop (handlers installed first)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    if already:
        stop.set()
    return await body(stop)


def remember_stop_signals(asked: threading.Event) -> None:
    """From now on SIGINT/SIGTERM only set asked."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: asked.set())


@contextlib.contextmanager
def signals_remembered() -> Iterator[threading.Event]:
    """While embedded servers start and stop, SIGINT/SIGTERM only set a flag: start-up runs to
    its end and is then shut down, and teardown always completes, so no server is orphaned."""
    asked = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    remember_stop_signals(asked)
    try:
        yield asked
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
