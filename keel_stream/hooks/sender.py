"""Senders: claim due deliveries under a lease and POST each, signed per attempt.

Each attempt resolves the URL's host again and connects to the address it checked
(keel_stream.hooks.egress), has its own deadline (`timeout_s`, the whole attempt: resolution,
connection, request and reading at most `_MAX_RESPONSE_BYTES` of the response), signs with the
subscription's secret(s) at this attempt's timestamp, and ends in one of: delivered (2xx), a
retry at the policy's next delay, dead (a deterministic refusal, or attempts exhausted), or gone
(410: the subscription is disabled). Redirects are not followed (3xx is a failure).

The URL is checked against the operator's allowlist narrowed by the subscription's tenant's
(`hooks.allowedHosts`, read again within seconds of a change). What a receiver at a non-public
address answers (its body, a connection error's text) is never recorded: the tenant reads
`lastError` and the attempts log, and the operator's internal hosts are not its to read; the
status and a fixed text are.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Final

import httpx

from keel_stream.errors import HookUrlRefused, KeelError
from keel_stream.hooks.egress import (
    EgressPolicy,
    Resolver,
    Target,
    TenantHosts,
    no_tenant_hosts,
    system_resolver,
)
from keel_stream.hooks.envelope import signature_header
from keel_stream.hooks.metrics import ATTEMPTS, BACKLOG
from keel_stream.hooks.retry import RetryPolicy, Verdict, parse_retry_after, verdict_of
from keel_stream.logs import get_logger
from keel_stream.retry import Backoff
from keel_stream.store.hooks_queue import Claimed, Completion, HookQueue

__all__ = ["Response", "Sender", "SenderConfig"]

_MAX_RESPONSE_BYTES: Final = 4096
_LEASE_MARGIN_S: Final = 30.0
_BACKLOG_EVERY_S: Final = 5.0
_USER_AGENT: Final = "keel-stream-hooks/1"
NOT_RECORDED: Final = "(a non-public receiver: what it answered is not recorded)"


@dataclass(frozen=True, slots=True)
class SenderConfig:
    timeout_s: float = 15.0
    concurrency: int = 16
    poll_s: float = 0.5
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(frozen=True, slots=True)
class Response:
    status: int | None
    retry_after: str | None
    error: str | None


class Sender:
    def __init__(
        self,
        queue: HookQueue,
        policy: EgressPolicy,
        config: SenderConfig = SenderConfig(),
        *,
        resolver: Resolver = system_resolver,
        wake: asyncio.Event | None = None,
        tenant_hosts: TenantHosts = no_tenant_hosts,
    ) -> None:
        self._queue = queue
        self._policy = policy
        self._tenant_hosts = tenant_hosts
        self._config = config
        self._resolver = resolver
        self._wake = wake or asyncio.Event()
        # No kept-alive connections: a pooled TLS connection is keyed by the address, and would
        # carry a request for another host name whose certificate was never checked.
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            timeout=config.timeout_s,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self._log = get_logger("hooks")
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and send until stop is set; attempts in flight are finished (each has its
        deadline), and an attempt cut short is simply due again when its lease ends."""
        backoff = Backoff(0.5, 10.0)
        next_backlog = 0.0
        try:
            while not stop.is_set():
                try:
                    claimed = await self._claim()
                    if time.monotonic() >= next_backlog:
                        BACKLOG.set(await self._queue.backlog())
                        next_backlog = time.monotonic() + _BACKLOG_EVERY_S
                    backoff.reset()
                except KeelError as exc:
                    if not exc.retriable:
                        raise
                    self._log.warning("hooks sender: store unavailable", error=repr(exc))
                    await self._idle(stop, backoff.next_delay())
                    continue
                if not claimed:
                    await self._idle(stop, self._config.poll_s)
        finally:
            if self._tasks:
                _, late = await asyncio.wait(self._tasks, timeout=self._config.timeout_s + 1)
                for task in late:  # its row is due again when its lease ends
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
            await self._client.aclose()

    async def _claim(self) -> int:
        free = self._config.concurrency - len(self._tasks)
        if free <= 0:
            return 0
        lease = self._config.timeout_s + _LEASE_MARGIN_S
        claimed = await self._queue.claim(free, lease)
        for item in claimed:
            task = asyncio.create_task(self.deliver(item))
            self._tasks.add(task)
            task.add_done_callback(self._done)
        return len(claimed)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()  # a slot is free
        if not task.cancelled() and task.exception() is not None:
            self._log.warning("hooks sender: attempt not recorded", error=repr(task.exception()))

    async def _idle(self, stop: asyncio.Event, seconds: float) -> None:
        self._wake.clear()
        waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def deliver(self, claimed: Claimed) -> None:
        """One attempt of one claimed delivery, recorded."""
        started = time.monotonic()
        try:
            response = await self.post(claimed)
        except HookUrlRefused as exc:
            ATTEMPTS.labels("refused").inc()
            done = Completion("dead", 0.0, None, f"{exc.code}: {exc.message}", _ms(started))
            await self._queue.complete(claimed, done)
            return
        await self._queue.complete(claimed, self._completion(claimed, response, _ms(started)))

    def _completion(self, claimed: Claimed, response: Response, ms: int) -> Completion:
        verdict = verdict_of(response.status)
        retry = self._config.retry
        if verdict is Verdict.RETRY and retry.exhausted(claimed.attempts):
            verdict = Verdict.DEAD
        ATTEMPTS.labels("failed" if verdict is Verdict.RETRY else verdict.value).inc()
        status, error = response.status, response.error
        if verdict is Verdict.DELIVERED:
            return Completion("delivered", 0.0, status, None, ms)
        if verdict is Verdict.GONE:
            return Completion("dead", 0.0, status, error, ms, disable_reason="410 Gone")
        if verdict is Verdict.DEAD:
            return Completion("dead", 0.0, status, error, ms)
        wait = parse_retry_after(response.retry_after)
        return Completion("pending", retry.delay_after(claimed.attempts, wait), status, error, ms)

    async def post(self, claimed: Claimed) -> Response:
        """POST the delivery once; HookUrlRefused when the URL resolves to a refused address."""
        target: Target | None = None
        try:
            async with asyncio.timeout(self._config.timeout_s):
                policy = self._policy.narrowed(await self._tenant_hosts(claimed.tenant))
                target = await policy.target(claimed.url, self._resolver)
                return await self._post(claimed, target)
        except HookUrlRefused:
            raise
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            if target is not None and not target.public:
                return Response(None, None, f"{type(exc).__name__} {NOT_RECORDED}")
            return Response(None, None, f"{type(exc).__name__}: {exc}".strip())

    async def _post(self, claimed: Claimed, target: Target) -> Response:
        timestamp = int(time.time())
        headers = {
            "webhook-id": claimed.webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature_header(
                claimed.secrets, claimed.webhook_id, timestamp, claimed.body
            ),
            "content-type": "application/json",
            "host": target.host_header,
            "user-agent": _USER_AGENT,
        }
        extensions = {} if target.server_name is None else {"sni_hostname": target.server_name}
        request = self._client.build_request(
            "POST",
            target.connect_url,
            content=claimed.body.encode(),
            headers=headers,
            extensions=extensions,
        )
        response = await self._client.send(request, stream=True)
        try:
            snippet = await _read_bounded(response) if target.public else NOT_RECORDED
        finally:
            with contextlib.suppress(Exception):
                await response.aclose()
        error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        if error is not None and snippet:
            error = f"{error}: {snippet}" if target.public else f"{error} {snippet}"
        return Response(response.status_code, response.headers.get("retry-after"), error)


async def _read_bounded(response: httpx.Response) -> str:
    """At most _MAX_RESPONSE_BYTES of the body (an endpoint cannot make a sender read more)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        chunks.append(chunk)
        size += len(chunk)
        if size >= _MAX_RESPONSE_BYTES:
            break
    return b"".join(chunks)[:_MAX_RESPONSE_BYTES].decode("utf-8", "replace").strip()


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
