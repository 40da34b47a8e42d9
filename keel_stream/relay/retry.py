"""Which failures are worth retrying, and retrying them with a bound.

A failure is retried only when it is classified transient: a keel error whose `retriable` is
true (the database or the broker unreachable), or a Kafka client error the Kafka seam would
translate into one (keel_stream.kafka.errors), or a failure of the idempotent producer's session
(its producer id, epoch or sequence numbers), which the next producer does not inherit.
Anything else (a query that fails, a record the broker refuses, a bug) is raised at once: retried,
it would fail the same way forever and stall every session behind it. Transient failures are
retried with exponential backoff until `give_up_after_s` of consecutive failures; then the last
one is raised too, so the process exits and its supervisor sees it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from keel_stream.backoff import Backoff
from keel_stream.errors import KeelError
from keel_stream.kafka.errors import transient

__all__ = ["RetryPolicy", "Retrying", "is_retriable", "retrying"]

T = TypeVar("T")


def is_retriable(exc: BaseException) -> bool:
    """True for a failure that may pass if the same thing is tried again later."""
    if isinstance(exc, KeelError):
        return exc.retriable
    return transient(exc)  # a client error the Kafka door would translate as retriable


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_s: float = 0.2
    maximum_s: float = 5.0
    give_up_after_s: float = 300.0
    """How long consecutive transient failures are retried before the last one is raised."""


class Retrying:
    """One run of consecutive failures: the delay before each next try, up to the bound."""

    def __init__(
        self,
        policy: RetryPolicy,
        log: structlog.stdlib.BoundLogger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._log = log
        self._clock = clock
        self._backoff = Backoff(policy.initial_s, policy.maximum_s)
        self._failing_since: float | None = None
        self.failures = 0

    def succeeded(self) -> None:
        self._backoff.reset()
        self._failing_since = None
        self.failures = 0

    def delay_after(self, exc: BaseException, action: str) -> float:
        """The delay before trying `action` again; raises exc when it is not to be retried."""
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        self.failures += 1
        failing_s = now - self._failing_since
        if not is_retriable(exc):
            self._log.error(f"{action} failed; not retriable", error=repr(exc))
            raise exc
        if failing_s >= self._policy.give_up_after_s:
            self._log.error(
                f"{action} failed; giving up",
                error=repr(exc),
                failures=self.failures,
                failing_s=round(failing_s, 1),
            )
            raise exc
        delay = self._backoff.next_delay()
        self._log.warning(
            f"{action} failed; retrying",
            error=repr(exc),
            failures=self.failures,
            retry_in_s=round(delay, 2),
        )
        return delay


async def retrying(
    action: Callable[[], Awaitable[T]],
    name: str,
    policy: RetryPolicy,
    log: structlog.stdlib.BoundLogger,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run action until it succeeds; transient failures are retried within the policy's bound."""
    attempts = Retrying(policy, log, clock)
    while True:
        try:
            return await action()
        except Exception as exc:  # noqa: BLE001 - classified in delay_after, which re-raises
            delay = attempts.delay_after(exc, name)
        await sleep(delay)
