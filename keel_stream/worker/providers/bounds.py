"""A model request bounded in time: a stream that sends nothing for ``stall_s`` is cut, and no
request (its retries included) takes longer than ``total_s``.

Each wait is bounded on its own (never a timeout held across a ``yield``: the consumer of a
provider's stream runs in the same task, and a timeout firing there would cancel the consumer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TypeVar

from keel_stream.worker.limits import StreamLimits
from keel_stream.worker.providers.base import Finish, ProviderEvent

__all__ = ["Deadline", "Stalled", "StreamTimeout", "TooLong", "bounded"]

T = TypeVar("T")


class StreamTimeout(Exception):
    """A model request took too long; the message says which bound it hit."""


class Stalled(StreamTimeout):
    """Nothing arrived for ``stall_s``: trying again may help."""


class TooLong(StreamTimeout):
    """The request's whole time is spent: no retry fits in it."""


class Deadline:
    """The bounds of one model request, from when it is made."""

    def __init__(self, limits: StreamLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._ends = clock() + limits.total_s

    def remaining(self) -> float:
        return self._ends - self._clock()

    def _too_long(self) -> TooLong:
        return TooLong(f"no complete answer within {self.limits.total_s:g} s")

    async def wait(self, awaitable: Awaitable[T], *, stall: bool = True) -> T:
        """The awaitable's result; Stalled after ``stall_s`` (unless ``stall`` is False),
        TooLong past the deadline (what it waited on is cancelled)."""
        remaining = self.remaining()
        if remaining <= 0:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # never awaited: closed, so that nothing warns about it
            raise self._too_long()
        stall_s = self.limits.stall_s if stall else remaining
        bound = asyncio.timeout(min(stall_s, remaining))
        try:
            async with bound:
                return await awaitable
        except TimeoutError:
            if not bound.expired():
                raise
            if stall_s < remaining:
                raise Stalled(f"the stream stalled: nothing for {stall_s:g} s") from None
            raise self._too_long() from None


async def bounded(
    events: AsyncGenerator[ProviderEvent, None], limits: StreamLimits, provider: str
) -> AsyncIterator[ProviderEvent]:
    """A provider's events within its limits; a stall or an overrun ends the stream with an
    error Finish (retriable: the run's attempt budget decides whether it is tried again)."""
    deadline = Deadline(limits)
    async with aclosing(events):
        while True:
            try:
                item = await deadline.wait(anext(events))
            except StopAsyncIteration:
                return
            except StreamTimeout as exc:
                yield Finish("error", error=f"{provider}: {exc}")
                return
            yield item
