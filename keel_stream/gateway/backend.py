"""One declared AgentBackend and the external sessions it serves (seed §4 and §5).

The backend's connection is supervised (keel_stream.gateway.connection).  When it is lost, every
session it serves is marked ``backend-unavailable`` at once (a queryable state, never a hang);
when it is up again, each known session is offered ``session.resume``: resumed=true makes it
active and re-subscribes its events after the last one recorded, resumed=false keeps it
unavailable (Keel does not fake a resume).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Mapping

import orjson

from keel_stream.errors import ExternalQuotaExceeded, GatewayError, SessionExists, UnmeteredRefused
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.connection import Connection, ConnectionHooks, Supervision
from keel_stream.gateway.event_rate import EventFlow, EventLimits, EventRate
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.protocol import Event as BackendEvent
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.recorder import ExternalTarget, Recorder
from keel_stream.logs import get_logger
from keel_stream.store.external_sessions import ExternalSessions
from keel_stream.store.protocol import ExternalMarkers, ExternalStatus, Ledger, Metering
from keel_stream.tenancy.document import BackendSpec, Quota
from keel_stream.tenancy.limits import LimitsSpec

__all__ = ["Backend", "BackendContext", "backend_key"]

_SORTED = orjson.OPT_SORT_KEYS


def backend_key(scope: str, name: str, spec: BackendSpec) -> tuple[str, str, str]:
    """A backend connection's identity: a changed declaration is another connection."""
    digest = hashlib.sha256(orjson.dumps(spec.model_dump(mode="json"), option=_SORTED))
    return scope, name, digest.hexdigest()[:16]


class BackendContext:
    """What every backend shares: the ledger, the session markers, the recorder."""

    def __init__(
        self,
        ledger: Ledger,
        store: ExternalSessions,
        recorder: Recorder,
        supervision: Supervision,
        environ: Mapping[str, str],
        audit: AuditLog | None = None,
        registry: PidRegistry | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        event_limits: EventLimits | None = None,
    ) -> None:
        self.max_line_bytes = max_line_bytes
        self.event_limits = event_limits or EventLimits()
        self.events = EventRate()
        """Each tenant's window of backend events, shared by all of its backends."""
        self.ledger = ledger
        self.store = store
        self.recorder = recorder
        self.supervision = supervision
        self.environ = environ
        self.audit = audit
        self.registry = registry


class Backend:
    """``name`` as one document declares it (``scope``: the tenant whose document, or '')."""

    def __init__(
        self, name: str, scope: str, spec: BackendSpec, quota: Quota | None, ctx: BackendContext
    ) -> None:
        self.name = name
        self.scope = scope
        self.spec = spec
        self.quota = quota
        self.ctx = ctx
        self.sessions: dict[str, ExternalTarget] = {}
        """By the backend's own session handle (ref)."""
        self.events_per_second = ctx.event_limits.per_second
        """The tenant's rate (its document's `limits.backendEventsPerSecond`, else the default)."""
        self._flow = EventFlow(ctx.events, ctx.event_limits.flood_grace_s)
        hooks = ConnectionHooks(
            on_event=self._on_event,
            pace=self._pace,
            held_after=self._flow.held_after,
            on_lost=self._on_lost,
            on_up=self._on_up,
            environ=ctx.environ,
            audit=ctx.audit,
            registry=ctx.registry,
            max_line_bytes=ctx.max_line_bytes,
        )
        where = f"external.backends.{name}" + (f" (tenant {scope})" if scope else "")
        self.connection = Connection(where, spec, ProviderKind.AGENT, hooks, ctx.supervision)
        self._open_lock = asyncio.Lock()
        self._log = get_logger("gateway").bind(backend=name, scope=scope or "boot")

    @property
    def unmetered_allowed(self) -> bool:
        return self.quota is not None and self.quota.unmetered == "allow"

    def active_count(self) -> int:
        return sum(1 for t in self.sessions.values() if t.status == ExternalStatus.ACTIVE)

    # -- the connection's hooks ----------------------------------------------------------
    def _on_event(self, event: BackendEvent) -> None:
        target = self.sessions.get(event.session_id)
        if target is None:
            self._log.warning("event for an unknown session", ref=event.session_id)
            return
        self.ctx.recorder.enqueue(target, event)

    def follow_limits(self, limits: LimitsSpec | None) -> None:
        """The tenant document's `limits` (None for a boot-document backend: it serves tenants
        that have no document, at the default rate)."""
        override = None if limits is None else limits.backend_events_per_second
        self.events_per_second = override or self.ctx.event_limits.per_second

    async def _pace(self, client: GatewayClient, session: str | None) -> None:
        """Let an event of ``session`` in at its tenant's rate; a flood past the grace fails
        the client."""
        target = None if session is None else self.sessions.get(session)
        tenant = target.tenant if target is not None else self.scope
        held_s = await self._flow.admit(tenant, self.events_per_second)
        if held_s is not None and client.lost is None:
            self._flooded(client, tenant, held_s)

    def _flooded(self, client: GatewayClient, tenant: str, held_s: float) -> None:
        rate = self.events_per_second
        reason = (
            f"event flood: held to the tenant's {rate} events/s for {held_s:.1f} s without a "
            "pause (KEEL_BACKEND_FLOOD_GRACE_S)"
        )
        if self.ctx.audit is not None:
            self.ctx.audit.record(
                "backend.flooded",
                backend=self.name,
                tenant=tenant,
                perSecond=rate,
                heldS=round(held_s, 1),
            )
        self._log.warning("backend flooding; failed", tenant=tenant, per_second=rate)
        client.on_closed(reason)  # lost: sessions unavailable, group reclaimed, reconnected

    async def _on_lost(self, reason: str) -> None:
        for target in list(self.sessions.values()):
            await self._mark(target, ExternalStatus.BACKEND_UNAVAILABLE, reason)

    async def _on_up(self, client: GatewayClient, reconnect: bool) -> None:
        self._flow.reset()
        for target in list(self.sessions.values()):
            await self._resume(client, target)

    async def _mark(self, target: ExternalTarget, status: ExternalStatus, reason: str) -> None:
        if target.status == status:
            return
        if not await self.ctx.store.set_status(target.tenant, target.session, status):
            self.sessions.pop(target.ref, None)  # closed meanwhile: nothing to serve
            return
        target.status = status
        kind = (
            "backend.unavailable"
            if status == ExternalStatus.BACKEND_UNAVAILABLE
            else "session.resumed"
        )
        self._log.info("session marked", session=target.session, status=status, reason=reason)
        key = f"lifecycle:{uuid.uuid4()}"  # each change is its own fact, recorded once, here
        await self.ctx.recorder.lifecycle(target, kind, key, {"reason": reason})

    async def _resume(self, client: GatewayClient, target: ExternalTarget) -> None:
        try:
            result = await client.resume_session(target.ref)
        except GatewayError as exc:
            await self._mark(target, ExternalStatus.BACKEND_UNAVAILABLE, f"resume failed: {exc}")
            return
        if not result.resumed:
            await self._mark(
                target, ExternalStatus.BACKEND_UNAVAILABLE, "resume refused (resumed=false)"
            )
            return
        await self._mark(target, ExternalStatus.ACTIVE, "resumed")
        await self._subscribe(client, target)

    async def _subscribe(self, client: GatewayClient, target: ExternalTarget) -> None:
        target.last_backend_seq = await self.ctx.store.last_backend_seq(
            target.tenant, target.session
        )
        try:
            await client.subscribe(target.ref, after_seq=target.last_backend_seq)
        except GatewayError as exc:
            await self._mark(target, ExternalStatus.BACKEND_UNAVAILABLE, f"subscribe failed: {exc}")

    # -- sessions ------------------------------------------------------------------------
    async def adopt(self, target: ExternalTarget) -> None:
        """Serve a session opened by an earlier run of the runtime: resumed when the
        connection is (or comes) up."""
        self.sessions[target.ref] = target
        if self.connection.up and self.connection.client is not None:
            await self._resume(self.connection.client, target)

    async def open(
        self, tenant: str, session_id: str | None, metadata: Mapping[str, str]
    ) -> ExternalTarget:
        """session.open, within the quota; the session row with its markers; the opening
        recorded; events subscribed."""
        async with self._open_lock:
            client = await self.connection.ensure()
            await self._check_quota(client, tenant)
            opened = await client.open_session(dict(metadata))
            if opened.metering == "none" and not self.unmetered_allowed:
                await self._discard(client, opened.session_id)
                raise UnmeteredRefused(self._unmetered_message())
            markers = ExternalMarkers(
                self.name, opened.session_id, metering=Metering(opened.metering)
            )
            try:
                session = await self.ctx.ledger.create_session(tenant, session_id, markers)
            except SessionExists:
                await self._discard(client, opened.session_id)
                raise
            target = ExternalTarget(tenant, session, self.name, opened.session_id, markers.metering)
            self.sessions[target.ref] = target
        data = {"metering": opened.metering, "lastSeq": opened.last_seq}
        await self.ctx.recorder.lifecycle(target, "session.opened", "lifecycle:opened", data)
        await self._subscribe(client, target)
        return target

    async def _check_quota(self, client: GatewayClient, tenant: str) -> None:
        assert client.server is not None
        if not client.server.capabilities.usage and not self.unmetered_allowed:
            raise UnmeteredRefused(self._unmetered_message())
        limit = self.spec.max_sessions
        if limit is not None and self.active_count() >= limit:
            raise ExternalQuotaExceeded(f"backend {self.name!r} serves its maxSessions ({limit})")
        per_tenant = self.quota.max_sessions_per_backend if self.quota else None
        if (
            per_tenant is not None
            and await self.ctx.store.count_active(tenant, self.name) >= per_tenant
        ):
            raise ExternalQuotaExceeded(
                f"the tenant has {per_tenant} active sessions on {self.name!r} "
                "(external.quota.maxSessionsPerBackend)"
            )

    def _unmetered_message(self) -> str:
        return (
            f"backend {self.name!r} reports no usage; the tenant's external.quota.unmetered "
            "is not 'allow'"
        )

    async def _discard(self, client: GatewayClient, ref: str) -> None:
        try:
            await client.close_session(ref)
        except GatewayError as exc:
            self._log.warning("could not close a refused session", ref=ref, error=str(exc))

    async def close(self) -> None:
        await self.connection.close()

    def take_over(self, targets: list[ExternalTarget]) -> None:
        """Serve a retired predecessor's sessions: resumed when the connection comes up."""
        for target in targets:
            self.sessions[target.ref] = target
        self.connection.activate()

    async def retire(self, reason: str) -> list[ExternalTarget]:
        """Leave for good: the connection is closed (a stdio provider asked to shut down, its
        group reclaimed; nothing restarts it) and every session it served is marked
        unavailable with ``reason``; those sessions, for a successor to resume."""
        await self.connection.close()
        targets, self.sessions = list(self.sessions.values()), {}
        for target in targets:
            try:
                await self._mark(target, ExternalStatus.BACKEND_UNAVAILABLE, reason)
            except Exception as exc:  # noqa: BLE001 - the others are still marked
                self._log.warning("session not marked", session=target.session, error=str(exc))
        return [t for t in targets if t.status != ExternalStatus.CLOSED]
