"""The one retry policy: whether a failed operation is tried again, and after what pause.

A retry is of one operation, and it is bounded: by attempts (tries in all, the first one
included), by a deadline from the first failure of the run, or both. Only a retriable failure is
retried: a keel error whose `retriable` is true (the database or the broker unreachable), or
whatever the caller's classifier says (the relay's knows the Kafka client's errors). A
deterministic failure (a refused query or record, a bad request, a bug) is raised at once:
retried, it would fail the same way forever. The pause is exponential backoff with jitter, from
`initial_s` doubling up to `maximum_s`; a server's Retry-After is a floor on it, and a server
asking for more than `max_retry_after_s` ends the retries.

A loop that runs for the life of its process (a daemon reconnecting to its broker, a supervisor
restarting a child) is not a retry of one operation: it paces itself with `Backoff`, the same
jittered schedule without a bound, and classifies what it catches itself.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from keel_stream.errors import KeelError

__all__ = ["Backoff", "RetryPolicy", "Retrying", "jittered_s", "keel_retriable", "retrying"]

T = TypeVar("T")

Classifier = Callable[[BaseException], bool]


def keel_retriable(exc: BaseException) -> bool:
    """True for a keel error that may pass if the same thing is tried again later."""
    return isinstance(exc, KeelError) and exc.retriable


def jittered_s(
    initial_s: float, maximum_s: float, attempt: int, rng: Callable[[], float] = random.random
) -> float:
    """The pause after the `attempt`-th failure (>= 1): initial_s doubled per failure, capped at
    maximum_s, less a jitter of at most a fifth (spread, yet never a hot loop)."""
    step = min(maximum_s, initial_s * 2.0 ** min(max(attempt, 1) - 1, 32))
    return step * (0.8 + 0.2 * rng())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries of one operation: attempts, a deadline, or both (one at least)."""

    attempts: int | None = None
    """Tries in all, the first one included; None: only the deadline bounds them."""
    deadline_s: float | None = None
    """How long after the first failure of a run the last one is raised; None: attempts only."""
    initial_s: float = 0.2
    maximum_s: float = 5.0
    max_retry_after_s: float = 30.0
    """A server asking for a longer wait than this ends the retries."""
    retriable: Classifier = field(default=keel_retriable, compare=False)
    """Which failures are worth trying again."""

    def __post_init__(self) -> None:
        if self.attempts is None and self.deadline_s is None:
            raise ValueError("a retry policy is bounded: give attempts or deadline_s")
        if (self.attempts is not None and self.attempts < 1) or min(
            self.initial_s, self.maximum_s, self.deadline_s or 0.0
        ) < 0:
            raise ValueError(f"invalid retry policy: {self}")

    def backoff_s(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        return jittered_s(self.initial_s, self.maximum_s, attempt, rng)

    def pause_s(
        self,
        attempt: int,
        failing_s: float = 0.0,
        retry_after_s: float | None = None,
        rng: Callable[[], float] = random.random,
    ) -> float | None:
        """The pause before the next try after `attempt` tries failed over `failing_s`
        seconds; None when the policy gives up (the failure is not judged here)."""
        if self.attempts is not None and attempt >= self.attempts:
            return None
        if self.deadline_s is not None and failing_s >= self.deadline_s:
            return None
        asked = retry_after_s or 0.0
        if asked > self.max_retry_after_s:
            return None
        return max(asked, self.backoff_s(attempt, rng))

    def gave_up(self, attempt: int, retry_after_s: float | None = None) -> str:
        """Why the retries ended after `attempt` tries, in words."""
        asked = retry_after_s or 0.0
        if asked > self.max_retry_after_s:
            return (
                f"the server asked to retry after {asked:.0f}s, "
                f"more than the {self.max_retry_after_s:g}s limit"
            )
        return f"gave up after {attempt} attempts"


class Retrying:
    """One run of consecutive failures of one operation: the pause before each next try."""

    def __init__(
        self,
        policy: RetryPolicy,
        log: structlog.stdlib.BoundLogger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._log = log
        self._clock = clock
        self._failing_since: float | None = None
        self.failures = 0

    def succeeded(self) -> None:
        self._failing_since = None
        self.failures = 0

    def delay_after(
        self, exc: BaseException, action: str, retry_after_s: float | None = None
    ) -> float:
        """The pause before trying `action` again; raises exc when it is not to be retried."""
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        self.failures += 1
        failing_s = now - self._failing_since
        if not self._policy.retriable(exc):
            self._log.error(f"{action} failed; not retriable", error=repr(exc))
            raise exc
        delay = self._policy.pause_s(self.failures, failing_s, retry_after_s)
        if delay is None:
            self._log.error(
                f"{action} failed; giving up",
                error=repr(exc),
                failures=self.failures,
                failing_s=round(failing_s, 1),
            )
            raise exc
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
    """Run action until it succeeds; retriable failures are retried within the policy's bound."""
    attempts = Retrying(policy, log, clock)
    while True:
        try:
            return await action()
        except Exception as exc:  # noqa: BLE001 - classified in delay_after, which re-raises
            delay = attempts.delay_after(exc, name)
        await sleep(delay)


class Backoff:
    """The pause schedule of a loop that runs for the life of its process: the policy's jittered
    exponential backoff without a bound (such a loop is not a retry of one operation)."""

    def __init__(
        self,
        initial_s: float = 0.2,
        maximum_s: float = 5.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._initial_s = initial_s
        self._maximum_s = maximum_s
        self._rng = rng
        self._failures = 0

    def next_delay(self) -> float:
        self._failures += 1
        return jittered_s(self._initial_s, self._maximum_s, self._failures, self._rng)

    def reset(self) -> None:
        self._failures = 0
