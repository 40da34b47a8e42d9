"""One supervised connection to a declared provider: started on demand, watched, reconnected.

A connection is *up* after a successful ``initialize``.  It is *lost* when the transport reports
its end (a stdio provider's stdout closed: it crashed or exited) or when ``health`` fails
``health_failures`` times in a row (a hung process, a dead HTTP endpoint), so a loss is noticed
within ``health_interval_s * health_failures`` plus one health timeout, never a hang.  What is
left of a lost provider is reclaimed first (stdio: its whole process group, audited); then the
connection reconnects in the background with backoff; a provider that refuses activation (an
incompatible version, the wrong kind) is a deterministic failure and is not retried until the
next request asks for it again.  Every start and every loss is reported to the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from keel_stream.errors import ActivationRefused, BackendUnavailable, GatewayError, InvalidConfig
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.http import HttpTransport
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.protocol import Event, ProviderKind
from keel_stream.gateway.transport import StdioTransport, Transport
from keel_stream.logs import get_logger
from keel_stream.retry import Backoff
from keel_stream.tenancy.document import (
    ProviderSpec,
    minimal_env,
    resolve,
    resolved_args,
    resolved_url,
)

__all__ = ["Connection", "ConnectionHooks", "Supervision", "build_transport"]

_DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Supervision:
    """How a connection is watched and restarted."""

    health_interval_s: float = 2.0
    health_timeout_s: float = 2.0
    health_failures: int = 2
    reconnect_initial_s: float = 0.5
    reconnect_max_s: float = 15.0


@dataclass
class ConnectionHooks:
    """What the owner hears: each event, each loss, each (re)start."""

    on_event: Callable[[Event], None] = lambda _event: None
    pace: Callable[[GatewayClient, str | None], Awaitable[None]] | None = None
    """Awaited before each event of the client is taken (its reader reads nothing meanwhile)."""
    held_after: Callable[[float], bool] = lambda _moment: False
    """Whether the reader was held by ``pace`` after a moment (time.monotonic): a health
    answer then waited behind unread events, and its lateness is not counted as a failure."""
    on_lost: Callable[[str], Awaitable[None]] | None = None
    on_up: Callable[[GatewayClient, bool], Awaitable[None]] | None = None
    """Called after every successful initialize; the flag says whether it is a reconnect."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """What `${NAME}`/`env:NAME` references read: the process environment, passed in at the
    edge; empty by default."""
    audit: AuditLog | None = None
    """Where stdio spawns, budget refusals and reclaims are recorded."""
    registry: PidRegistry | None = None
    """The pidfiles of stdio providers, for the sweep after a SIGKILLed runtime."""
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    """The largest message the provider may send (KEEL_RPC_MAX_LINE_BYTES)."""


def build_transport(
    spec: ProviderSpec,
    environ: Mapping[str, str],
    where: str,
    kind: ProviderKind = ProviderKind.AGENT,
    hooks: ConnectionHooks | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Transport:
    """The transport a declared provider speaks; references resolve here and only here.
    ``max_line_bytes`` (the hooks' when given) bounds every message the provider sends."""
    if hooks is not None:
        max_line_bytes = hooks.max_line_bytes
    if spec.transport == "stdio":
        assert spec.command is not None
        env = minimal_env(spec.env, environ, f"{where}.env")
        return StdioTransport(
            [spec.command, *resolved_args(spec, environ, where)],
            env,
            name=where,
            kind=str(kind),
            budget=spec.budget,
            declared_env=spec.env,
            declared_command=[spec.command, *spec.args],
            audit=None if hooks is None else hooks.audit,
            registry=None if hooks is None else hooks.registry,
            max_line_bytes=max_line_bytes,
        )
    assert spec.url is not None
    url = resolved_url(spec, environ, where)
    headers = resolve(spec.headers, environ, f"{where}.headers")
    return HttpTransport(url, headers, max_line_bytes=max_line_bytes)


class Connection:
    """A provider of one kind, declared as ``spec`` under ``where`` (for messages and logs)."""

    def __init__(
        self,
        where: str,
        spec: ProviderSpec,
        kind: ProviderKind,
        hooks: ConnectionHooks,
        supervision: Supervision | None = None,
    ) -> None:
        self.where = where
        self.spec = spec
        self.kind = kind
        self.hooks = hooks
        self.supervision = supervision or Supervision()
        self.client: GatewayClient | None = None
        self.lost_reason: str | None = None
        self.generation = 0
        """How many times the provider came up (and its owner finished reacting to it)."""
        self._lock = asyncio.Lock()
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._reconnecting = False
        self._log = get_logger("gateway").bind(provider=where)

    @property
    def up(self) -> bool:
        return self.client is not None and self.client.lost is None

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_ms / 1000 if self.spec.timeout_ms else _DEFAULT_TIMEOUT_S

    async def ensure(self) -> GatewayClient:
        """The live client, started now if needed; BackendUnavailable if it cannot start."""
        if self._closing:
            raise BackendUnavailable(f"{self.where} is shutting down")
        async with self._lock:
            if self.client is not None and self.client.lost is None:
                return self.client
            if self.client is not None:  # lost: nothing of it may outlive the next start
                await _quietly_close(self.client)
            return await self._start(reconnect=self.client is not None)

    async def _start(self, *, reconnect: bool) -> GatewayClient:
        try:
            transport = build_transport(
                self.spec, self.hooks.environ, self.where, self.kind, self.hooks
            )
        except InvalidConfig as exc:  # a declared variable is not set in this runtime
            raise BackendUnavailable(exc.message) from exc
        client = GatewayClient(transport, self.kind, timeout_s=self.timeout_s)
        client.on_event(self.hooks.on_event)
        if (pace := self.hooks.pace) is not None:
            client.pace_events(lambda session: pace(client, session))
        try:
            await client.start()
            await client.initialize()  # the provider's timeoutMs, as every request
        except GatewayError as exc:
            await _quietly_close(client)
            self.lost_reason = exc.message
            raise
        except Exception:
            await _quietly_close(client)
            raise
        self.client, self.lost_reason = client, None
        client.on_lost(lambda reason: self._lost(client, reason))
        self._spawn(self._watch(client))
        self._log.info("provider up", reconnect=reconnect)
        if self.hooks.on_up is not None:
            await self.hooks.on_up(client, reconnect)
        self.generation += 1
        return client

    def activate(self) -> None:
        """Start in the background; a provider that cannot start now is reported lost (its
        sessions become unavailable) and retried with backoff."""
        self._spawn(self._activate())

    async def _activate(self) -> None:
        try:
            await self.ensure()
        except ActivationRefused as exc:
            if self.hooks.on_lost is not None:
                await self.hooks.on_lost(exc.message)
            self._log.error("provider refuses activation; not retrying", error=exc.message)
        except (GatewayError, OSError) as exc:
            await self._recover(str(exc))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _lost(self, client: GatewayClient, reason: str) -> None:
        if self._closing or client is not self.client:
            return
        self.lost_reason = reason
        self._log.warning("provider lost", reason=reason)
        self._spawn(self._recover(reason, client))

    async def _watch(self, client: GatewayClient) -> None:
        """Health checks while the client is current; repeated failures count as a loss (an
        answer late while the reader was held to the event rate is not one: the flood grace
        judges a held backend)."""
        failures = 0
        sup = self.supervision
        while not self._closing and client is self.client and client.lost is None:
            await asyncio.sleep(sup.health_interval_s)
            asked = time.monotonic()
            try:
                await asyncio.wait_for(client.health(), sup.health_timeout_s)
                failures = 0
            except (GatewayError, TimeoutError) as exc:
                if self.hooks.held_after(asked):  # it answers behind events held to the rate
                    continue
                failures += 1
                if failures >= sup.health_failures and client.lost is None:
                    client.on_closed(f"health failed {failures} times: {exc}")
                    return

    async def _recover(self, reason: str, lost: GatewayClient | None = None) -> None:
        """Mark the loss, reclaim what is left of the lost provider (stdio: its whole
        process group, audited), and only then reconnect."""
        if self.hooks.on_lost is not None:
            await self.hooks.on_lost(reason)
        if lost is not None:
            await _quietly_close(lost)
        if self._reconnecting:
            return
        self._reconnecting = True
        try:
            await self._reconnect()
        finally:
            self._reconnecting = False

    async def _reconnect(self) -> None:
        sup = self.supervision
        backoff = Backoff(sup.reconnect_initial_s, sup.reconnect_max_s)
        while not self._closing:
            await asyncio.sleep(backoff.next_delay())
            try:
                await self.ensure()
                return
            except ActivationRefused as exc:
                self._log.error("provider refuses activation; not retrying", error=exc.message)
                return
            except (GatewayError, OSError) as exc:
                self._log.warning("reconnect failed", error=str(exc))

    async def close(self, grace_s: float = 1.0) -> None:
        """Release what this runtime holds of the provider.  A provider it started (stdio) is
        asked to shut down, then reclaimed with its whole process group; one it only reaches
        (http), which other runtimes may share, is never asked to shut down: only this
        runtime's connection and subscriptions end."""
        self._closing = True
        client, self.client = self.client, None
        if client is not None:
            if client.lost is None and client.transport.owns_provider:
                with contextlib.suppress(GatewayError, TimeoutError):
                    await client.shutdown(timeout_s=grace_s)
            await _quietly_close(client)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _quietly_close(client: GatewayClient) -> None:
    with contextlib.suppress(GatewayError, OSError):
        await client.aclose()
