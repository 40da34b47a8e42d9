"""What the worker tells a running attempt, and waiting on anything only until it does.

A cancel (a client asked; delivered by NOTIFY) or a fence (the heartbeat found the lease gone)
must reach an attempt wherever it waits: in a provider's token stream, a tool, a summary.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Final, TypeVar

__all__ = ["Signals", "Stopped", "stream_unless_stopped", "unless_stopped"]

T = TypeVar("T")
_END: Final = object()


@dataclass
class Signals:
    """Cancel: a client asked to stop. Fenced: another worker owns the run now."""

    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    fenced: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def stopped(self) -> bool:
        return self.cancel.is_set() or self.fenced.is_set()


class Stopped(Exception):
    """A cancel or fence arrived while the attempt waited; what it waited on was cancelled."""


async def unless_stopped(awaitable: Awaitable[T], signals: Signals) -> T:
    """The awaitable's result, or Stopped as soon as a signal is set."""
    if signals.stopped:
        raise Stopped
    work = asyncio.ensure_future(awaitable)
    watchers = {asyncio.create_task(e.wait()) for e in (signals.cancel, signals.fenced)}
    try:
        await asyncio.wait({work, *watchers}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for watcher in watchers:
            watcher.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
    if work.cancelled():
        raise Stopped
    return work.result()


async def stream_unless_stopped(stream: AsyncIterator[T], signals: Signals) -> AsyncIterator[T]:
    """The stream's items until it ends or a signal is set (then Stopped); always closed."""
    try:
        while True:
            item = await unless_stopped(anext(stream, _END), signals)
            if item is _END:
                return
            yield item  # type: ignore[misc]
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            with contextlib.suppress(RuntimeError):
                await close()
