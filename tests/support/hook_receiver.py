"""A webhook receiver for the hooks tests: a real HTTP server on 127.0.0.1 that verifies every
request with the Standard Webhooks reference library (not keel-stream's code) and records what
it accepted. It can be stopped and started again on the same port, and told how to answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from keel_stream.hooks.egress import EgressPolicy
from keel_stream.hooks.envelope import webhook_id
from keel_stream.hooks.retry import RetryPolicy
from keel_stream.hooks.sender import SenderConfig
from keel_stream.hooks.service import HooksConfig, run_hooks
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.store import create_pool
from keel_stream.store.tenant_configs import PostgresTenantConfigs


def fast_config(dsn: str, bootstrap: str | None, prefix: str) -> HooksConfig:
    """The hooks process for tests: the receiver on 127.0.0.1 allowed, retries within seconds."""
    return HooksConfig(
        dsn,
        KafkaSettings(bootstrap) if bootstrap else None,
        prefix,
        policy=EgressPolicy.parse("127.0.0.1"),
        sender=SenderConfig(
            timeout_s=5.0,
            poll_s=0.1,
            retry=RetryPolicy(base_s=0.5, max_delay_s=2.0, max_attempts=200),
        ),
    )


async def tenant_document(dsn: str, tenant: str, document: dict[str, Any]) -> None:
    """Store a new version of the tenant's document (say, `{"hooks": {"allowedHosts": [...]}}`:
    a tenant reaches the operator's non-public hosts only when its document lists them)."""
    pool = await create_pool(dsn, max_size=1)
    try:
        await PostgresTenantConfigs(pool).put(tenant, document)
    finally:
        await pool.close()


LOOPBACK_RECEIVERS: dict[str, Any] = {"hooks": {"allowedHosts": ["127.0.0.1"]}}
"""The tenant document that lets a tenant's hooks reach this module's receivers."""


@contextlib.asynccontextmanager
async def hooks_task(config: HooksConfig) -> AsyncIterator[HooksConfig]:
    """The hooks process (dispatcher and senders) as a task of the test's loop."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_hooks(config, stop))
    try:
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


@dataclass
class Received:
    webhook_id: str
    type: str
    data: dict[str, Any]
    timestamp: str
    signatures: int


@dataclass
class HookReceiver:
    secrets: list[str] = field(default_factory=list)
    """Any of these verifies a request (set after the subscription is created)."""
    port: int = field(default_factory=lambda: free_port())
    answer: int = 204
    """The status of every verified request."""
    answer_body: str = ""
    """The body of every verified request's answer."""
    accepted: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Requests no secret verified (each with the library's reason)."""
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def counts(self) -> Counter[str]:
        return Counter(r.webhook_id for r in self.accepted)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        reasons = []
        for secret in self.secrets:
            try:
                document = Webhook(secret).verify(body, headers)
            except WebhookVerificationError as exc:
                reasons.append(str(exc))
                continue
            self.accepted.append(
                Received(
                    webhook_id=request.headers["webhook-id"],
                    type=document["type"],
                    data=document["data"],
                    timestamp=document["timestamp"],
                    signatures=len(request.headers["webhook-signature"].split(" ")),
                )
            )
            assert orjson.loads(body) == document
            return web.Response(status=self.answer, text=self.answer_body or None)
        self.refused.append("; ".join(reasons) or "no secret")
        return web.Response(status=400, text="signature refused")

    async def start(self) -> HookReceiver:
        app = web.Application()
        app.router.add_post("/hooks", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await asyncio.wait_for(self._runner.cleanup(), 10)
            self._runner = None


Expected = dict[str, tuple[str, str, int]]
"""webhook id -> (hook, session, seq)"""


def conversed(session: str, cycles: int, start: int = 0) -> Expected:
    """The hook events of `converse`: per cycle an input, a tool_use answer, its result, the
    final answer and run.finished: two model requests."""
    expected: Expected = {}
    for n in range(start, start + cycles):
        base = 5 * n
        for hook, seq in (
            ("turn.started", base + 1),
            ("turn.finished", base + 2),
            ("turn.started", base + 3),
            ("turn.finished", base + 4),
        ):
            expected[webhook_id("acme", session, seq, hook)] = (hook, session, seq)
    return expected
