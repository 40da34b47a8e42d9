"""Which failed provider requests are tried again (the policy itself is keel_stream.retry), and
what the server asked for (Retry-After)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final

import httpx
from httpx_sse import SSEError

from keel_stream.logs import get_logger
from keel_stream.retry import RetryPolicy

__all__ = [
    "PROVIDER_RETRY",
    "Failure",
    "final_error",
    "http_failure",
    "retry_after_s",
    "retry_pause",
    "send_failure",
]

_RETRIABLE_4XX: Final = frozenset({408, 409, 429})
_BODY_LIMIT: Final = 2048


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed request: what went wrong, and whether trying again can help."""

    error: str
    status: int | None = None
    retriable: bool = False
    """This request may pass if sent again (a transport error, 408/409/429, 5xx)."""
    run_retriable: bool = True
    """False when deterministic (an HTTP 4xx other than 408/409/429, a bad URL): the run fails
    without retries; a failure not retried here may still pass on the run's next attempt."""
    retry_after_s: float | None = None
    """What the server asked us to wait (Retry-After, retry-after-ms)."""


PROVIDER_RETRY: Final = RetryPolicy(attempts=4, deadline_s=None, initial_s=0.5, maximum_s=8.0)
"""A model request: four tries in all; the request's own budget bounds them in time."""


def final_error(policy: RetryPolicy, failure: Failure, attempt: int) -> str:
    """The error to report when giving up after `attempt` requests."""
    if not failure.retriable:
        return failure.error
    return f"{failure.error} ({policy.gave_up(attempt, failure.retry_after_s)})"


async def retry_pause(
    policy: RetryPolicy, failure: Failure, attempt: int, budget_s: float = math.inf
) -> bool:
    """Wait out the pause before the next request (True), or give up (False): also when the
    pause would use up the ``budget_s`` left for the request. Logs once."""
    log = get_logger("provider")  # looked up per use: tests capture logs by reconfiguring
    wait = (
        policy.pause_s(attempt, retry_after_s=failure.retry_after_s) if failure.retriable else None
    )
    if wait is not None and wait >= budget_s:
        wait = None
    if wait is None:
        log.warning(
            "provider request failed",
            status=failure.status,
            error=final_error(policy, failure, attempt),
            attempt=attempt,
            retriable=failure.run_retriable,
        )
        return False
    log.warning(
        "provider request failed, will retry",
        status=failure.status,
        error=failure.error,
        attempt=attempt,
        retry_in_s=round(wait, 3),
    )
    await asyncio.sleep(wait)
    return True


def retry_after_s(headers: httpx.Headers, now: datetime | None = None) -> float | None:
    """The wait a response asks for: retry-after-ms, or Retry-After in seconds or as a date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name, "").strip()
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if math.isfinite(seconds):
            return max(0.0, seconds)
    value = headers.get("retry-after", "").strip()
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


async def http_failure(response: httpx.Response) -> Failure:
    """A failure from an unsuccessful response: its status and the start of its body."""
    head = b""
    async for part in response.aiter_bytes():
        head += part
        if len(head) >= _BODY_LIMIT:
            break
    status = response.status_code
    error = f"HTTP {status}: {head[:_BODY_LIMIT].decode('utf-8', 'replace')}"
    if status in _RETRIABLE_4XX or status >= 500:
        return Failure(error, status, retriable=True, retry_after_s=retry_after_s(response.headers))
    return Failure(error, status, run_retriable=not 400 <= status < 500)


def send_failure(exc: httpx.HTTPError | httpx.InvalidURL) -> Failure:
    """A failure to get a response at all: transport errors are retried, a bad URL is not."""
    error = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return Failure(error, run_retriable=False)
    if isinstance(exc, SSEError):
        return Failure(error)
    return Failure(error, retriable=isinstance(exc, httpx.TransportError))
