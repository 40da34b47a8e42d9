"""`keel-stream worker`: claims runs, runs attempts, heartbeats leases, drains on SIGTERM.

A worker runs up to `slots` attempts at once, shared fairly between tenants: a tenant holding
its share (`tenant_slots`, by default all slots but one) is passed over when claiming, and claims
prefer the tenants with the fewest running attempts (keel_stream.store.protocol.ClaimFairness).
Each attempt has a heartbeat that extends its lease; if the heartbeat finds the lease gone
(another worker took over after it expired), the attempt stops without another commit, and the
kernel would fence it anyway. A cancel reaches the attempt at once through `NOTIFY
keel_cancels` (the heartbeat also sees it, as a backstop). On stop (SIGTERM) the worker claims
nothing more, lets running attempts finish for `drain_grace_s`, then releases the rest: they go
back to pending, unanswered input intact, and another worker continues them (a released attempt
is not settled and has no summary). Each attempt runs on its tenant's model settings and tools
(keel_stream.worker.agent_settings, keel_stream.worker.tool_providers); the worker closes every
tool provider when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from keel_stream.errors import KeelError, StoreUnavailable
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.logs import get_logger
from keel_stream.store.memory import MemoryStore
from keel_stream.store.protocol import Claim, ClaimFairness, Runs
from keel_stream.store.worker_store import (
    WorkerStore,
    memory_worker_store,
    postgres_worker_store,
)
from keel_stream.tenancy.document import TenantConfig
from keel_stream.topics.catalog import PARTIALS
from keel_stream.worker.agent_settings import ModelProviders, ProviderFactory, TenantConfigCache
from keel_stream.worker.expiry import DecisionSweeper
from keel_stream.worker.limits import ToolLimits
from keel_stream.worker.loop import AgentLoop, Signals
from keel_stream.worker.metrics import ACTIVE, CLAIMED, TAKEOVERS
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers.base import Provider
from keel_stream.worker.providers.fake import FakeProvider
from keel_stream.worker.subagents import Delegations
from keel_stream.worker.tool_providers import ToolProviders
from keel_stream.worker.tools import BuiltinContext

__all__ = ["Worker", "WorkerConfig"]


@dataclass(frozen=True)
class WorkerConfig:
    database_url: str
    kafka: KafkaSettings | None = None
    topic_prefix: str = ""
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    slots: int = 4
    tenant_slots: int = 0
    """At most this many slots per tenant; 0: all but one (one stays open to other tenants)."""
    tenant_max_running: int = 0
    """At most this many running attempts per tenant across all workers; 0: no cap."""
    lease_ttl_s: float = 15.0
    poll_s: float = 0.5
    drain_grace_s: float = 10.0
    max_turns: int = 8
    context_budget_chars: int = 0
    """Compact a session's model context above this many characters; 0: never."""
    provider: Provider = field(default_factory=FakeProvider)
    """The provider of tenants whose document declares no models."""
    boot_config: TenantConfig | None = None
    """The runtime's boot document (KEEL_EXTERNAL_CONFIG): for tenants with none stored."""
    model_providers: ProviderFactory = field(default_factory=ModelProviders)
    """The provider a tenant's model settings run on."""
    config_ttl_s: float = 2.0
    """How long a tenant's document is reused before it is read again."""
    rpc_max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    """KEEL_RPC_MAX_LINE_BYTES: the largest message a ToolProvider may send."""
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    """KEEL_TOOL_TIMEOUT_S, from the command's settings."""
    builtins: BuiltinContext = field(default_factory=BuiltinContext)
    """What the built-in tools use (KEEL_TOOL_NOTES_FILE)."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """What `${NAME}`/`env:NAME` references of declared tool servers read: the process
    environment, passed in at the edge (keel_stream.settings.process_environ)."""

    @property
    def heartbeat_s(self) -> float:
        return self.lease_ttl_s / 3


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self._config = config
        self._log = get_logger("worker").bind(owner=config.owner)
        self._attempts: dict[asyncio.Task[None], Claim] = {}
        self._signals: dict[tuple[str, str], Signals] = {}

    async def run(self, stop: asyncio.Event, memory: MemoryStore | None = None) -> None:
        """Claim and run attempts until `stop`; on PostgreSQL, or on `memory` when given."""
        config = self._config
        wake = asyncio.Event()
        if memory is not None:
            opened = memory_worker_store(
                memory, config.owner, config.lease_ttl_s, wake.set, self._cancelled
            )
        else:
            opened = postgres_worker_store(
                config.database_url, config.owner, config.lease_ttl_s, config.slots + 2,
                wake.set, self._cancelled,
            )  # fmt: skip
        async with opened as store:
            await self._serve(store, wake, stop)

    def _cancelled(self, tenant: str, session: str) -> None:
        signals = self._signals.get((tenant, session))
        if signals is not None:
            signals.cancel.set()

    async def _serve(self, store: WorkerStore, wake: asyncio.Event, stop: asyncio.Event) -> None:
        config = self._config
        partials = PartialsPublisher(config.kafka, PARTIALS.full_name(config.topic_prefix))
        await partials.start()
        tool_providers = ToolProviders(config.environ, max_line_bytes=config.rpc_max_line_bytes)
        loop = AgentLoop(
            store.ledger, store.runs, config.provider, partials,
            config.max_turns, config.context_budget_chars,
            configs=TenantConfigCache(store.configs, config.boot_config, config.config_ttl_s),
            model_providers=config.model_providers,
            tool_providers=tool_providers,
            tool_limits=config.tool_limits,
            builtins=config.builtins,
            deadlines=store.deadlines,
            delegations=Delegations(store.ledger, store.subagents),
        )  # fmt: skip
        sweeper = DecisionSweeper(store.ledger, store.deadlines, config.owner)
        sweeping = asyncio.create_task(sweeper.run(stop))
        self._log.info("ready", slots=config.slots)
        try:
            while not stop.is_set():
                claim = None
                if len(self._attempts) < config.slots:
                    try:
                        claim = await store.runs.claim(self._fairness())
                    except StoreUnavailable as exc:
                        self._log.warning("claim failed", error=str(exc))
                if claim is not None:
                    self._start(loop, store.runs, claim)
                    continue
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(wake, stop), config.poll_s)
            await self._drain(store.runs)
        finally:
            sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeping
            await tool_providers.aclose()
            await partials.stop()
            self._log.info("stopped")

    def _fairness(self) -> ClaimFairness:
        """Tenants holding their share of this worker's slots are passed over (fair slots)."""
        config = self._config
        share = config.tenant_slots or max(1, config.slots - 1)
        held = Counter(claim.tenant for claim in self._attempts.values())
        return ClaimFairness(
            skip_tenants=frozenset(t for t, n in held.items() if n >= share),
            tenant_cap=config.tenant_max_running,
        )

    def _start(self, loop: AgentLoop, runs: Runs, claim: Claim) -> None:
        self._log.info(
            "claimed", session=claim.session, epoch=claim.lease.epoch, attempt=claim.attempts
        )
        # Registered before the attempt's first step, so no cancel NOTIFY can slip past it.
        signals = Signals()
        if claim.cancel_requested:
            signals.cancel.set()
        self._signals[(claim.tenant, claim.session)] = signals
        CLAIMED.inc()
        if claim.taken_over:
            TAKEOVERS.inc()
        task = asyncio.create_task(self._attempt(loop, runs, claim, signals))
        self._attempts[task] = claim
        ACTIVE.inc()
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._attempts.pop(task, None)
        ACTIVE.dec()

    async def _attempt(self, loop: AgentLoop, runs: Runs, claim: Claim, signals: Signals) -> None:
        beating = asyncio.create_task(self._heartbeat(runs, claim, signals))
        try:
            result = await loop.run_attempt(claim, signals)
            self._log.info(
                "settled", session=claim.session, status=result.status, turns=result.turns
            )
        except KeelError as exc:
            # Settling itself failed (say, the database went away): the lease expires and the
            # worker that takes the run over settles this attempt.
            self._log.error("attempt not settled", session=claim.session, error=str(exc))
        finally:
            beating.cancel()
            key = (claim.tenant, claim.session)
            if self._signals.get(key) is signals:
                del self._signals[key]

    async def _heartbeat(self, runs: Runs, claim: Claim, signals: Signals) -> None:
        while True:
            await asyncio.sleep(self._config.heartbeat_s)
            try:
                beat = await runs.heartbeat(claim)
            except StoreUnavailable:
                continue
            if not beat.held:
                signals.fenced.set()
                return
            if beat.cancel_requested:
                signals.cancel.set()

    async def _drain(self, runs: Runs) -> None:
        if not self._attempts:
            return
        self._log.info("draining", attempts=len(self._attempts))
        _, unfinished = await asyncio.wait(set(self._attempts), timeout=self._config.drain_grace_s)
        for task in unfinished:
            claim = self._attempts.get(task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if claim is not None:
                await runs.release(claim)
                self._log.info("released", session=claim.session, epoch=claim.lease.epoch)


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
