"""The external-agent service: external sessions opened, driven, cancelled and closed through
their backends, every fact committed as an external.event (seed §4, §5).

Which backend serves a tenant: the backends of the tenant's newest stored configuration
document, or, when the tenant has none, those of the runtime's boot document
(KEEL_EXTERNAL_CONFIG).  The service is active only when some document declares backends.

Connections follow the documents (re-read every ``cache_s``): a backend no longer declared as
it was is retired (closed, group reclaimed, sessions unavailable; a changed one's successor
resumes them) and nothing starts it again.

Delivery of an input is recorded before it is sent: ``message.sent`` (keyed by the input's
requestId) is committed, then ``message.send`` goes to the backend, then ``message.accepted``
(with the backend's turnId) is committed.  A retry of the same requestId finds the accepted turn
and sends nothing; a retry after a failed or interrupted delivery sends again, so a message is
delivered at least once and recorded exactly once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from keel_stream.errors import (
    ExternalSessionClosed,
    ExternalSessionUnavailable,
    InvalidPayload,
    PayloadRule,
    UnknownBackend,
)
from keel_stream.errors.gateway import BackendUnavailable, GatewayError
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.backend import Backend, BackendContext, backend_key
from keel_stream.gateway.connection import Supervision
from keel_stream.gateway.event_rate import EventLimits
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.pidfiles import PidRegistry, SweepReport, sweep
from keel_stream.gateway.recorder import Direction, ExternalTarget, Recorder, base_payload
from keel_stream.kernel import Kind, Submission
from keel_stream.logs import get_logger
from keel_stream.store.external_sessions import ExternalSessions, LiveExternal
from keel_stream.store.protocol import MAX_READ_LIMIT, ExternalStatus, Ledger
from keel_stream.tenancy.document import TenantConfig

__all__ = ["CancelOutcome", "ConfigReader", "Delivered", "ExternalAgents"]

_BOOT: Final = ""
_ACCEPTED_SCAN_PAGES: Final = 5


class StoredDocument(Protocol):
    @property
    def version(self) -> int: ...

    @property
    def config(self) -> TenantConfig: ...


class ConfigReader(Protocol):
    async def latest(self, tenant: str) -> StoredDocument | None: ...


@dataclass(frozen=True, slots=True)
class Delivered:
    """An input recorded and delivered: the message.sent submission and the backend's turn."""

    submission: Submission
    turn_id: str


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    turn_id: str
    cancelled: bool
    """False: the turn had already ended (the backend said so); nothing was stopped."""


class ExternalAgents:
    def __init__(
        self,
        ledger: Ledger,
        store: ExternalSessions,
        configs: ConfigReader | None,
        boot: TenantConfig | None,
        *,
        supervision: Supervision | None = None,
        environ: Mapping[str, str],
        cache_s: float = 2.0,
        data_dir: Path | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        event_limits: EventLimits | None = None,
    ) -> None:
        """With ``data_dir``: stdio spawns are audited (gateway/audit.jsonl) and get a pidfile
        (gateway/pids/), and ``start`` first sweeps what a SIGKILLed runtime left there.
        ``max_line_bytes`` (KEEL_RPC_MAX_LINE_BYTES) bounds every message a backend sends;
        ``event_limits`` the events a tenant's backends may have committed a second."""
        self._ledger = ledger
        self._store = store
        self._configs = configs
        self._boot = boot or TenantConfig()
        self.recorder = Recorder(ledger)
        self._audit = None if data_dir is None else AuditLog.in_data_dir(data_dir)
        self._registry = None if data_dir is None else PidRegistry.in_data_dir(data_dir)
        self.last_sweep: SweepReport | None = None
        self._ctx = BackendContext(
            ledger,
            store,
            self.recorder,
            supervision or Supervision(),
            environ,
            self._audit,
            self._registry,
            max_line_bytes,
            event_limits,
        )
        self._cache_s = cache_s
        self._documents: dict[str, tuple[float, str, TenantConfig]] = {}
        self._backends: dict[tuple[str, str, str], Backend] = {}
        self._routes: dict[tuple[str, str], tuple[ExternalTarget, Backend]] = {}
        self._following: asyncio.Task[None] | None = None
        self._log = get_logger("gateway")

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Sweep the leftovers of a SIGKILLed runtime; activate the boot document's
        backends; adopt every live external session (its backend resumes it, or it is marked
        unavailable): the live count is recounted from what the backends resume."""
        if self._registry is not None:
            self.last_sweep = await asyncio.to_thread(sweep, self._registry.directory, self._audit)
            if self.last_sweep.groups_killed:
                self._log.warning(
                    "swept leftover providers",
                    groups=self.last_sweep.groups_killed,
                    processes=self.last_sweep.processes_killed,
                )
        for name in self._boot.external.backends:
            self._backend(_BOOT, name, self._boot).connection.activate()
        for item in await self._store.live():
            await self._adopt(item)
        for backend in self._backends.values():
            if backend.sessions and not backend.connection.up:
                backend.connection.activate()
        self._following = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        """Re-read each tenant's document every ``cache_s`` (retiring what it drops)."""
        while True:
            await asyncio.sleep(self._cache_s)
            for tenant in {scope for scope, _, _ in self._backends if scope != _BOOT}:
                try:
                    await self._document(tenant)
                except Exception as exc:  # noqa: BLE001 - the store is down: next round
                    self._log.warning("document not re-read", tenant=tenant, error=str(exc))

    async def _adopt(self, item: LiveExternal) -> None:
        target = ExternalTarget(
            item.tenant, item.session, item.backend, item.ref or "", item.metering, item.status
        )
        try:
            backend = await self._backend_for(item.tenant, item.backend)
        except UnknownBackend as exc:
            await self._store.set_status(
                item.tenant, item.session, ExternalStatus.BACKEND_UNAVAILABLE
            )
            if item.status != ExternalStatus.BACKEND_UNAVAILABLE:
                await self.recorder.lifecycle(
                    target, "backend.unavailable", f"lifecycle:{uuid.uuid4()}", {"reason": str(exc)}
                )
            return
        self._routes[target.key] = (target, backend)
        await backend.adopt(target)

    async def stop(self) -> None:
        if self._following is not None:
            self._following.cancel()
            await asyncio.gather(self._following, return_exceptions=True)
        await self.recorder.idle()
        await asyncio.gather(*(b.close() for b in self._backends.values()))
        await self.recorder.close()

    @property
    def active(self) -> bool:
        """Whether the boot document declares backends (tenant documents may add more)."""
        return self._boot.external.agents_active

    def describe(self) -> list[dict[str, Any]]:
        """Each backend connection: its scope, whether it is up, its sessions."""
        return [
            {
                "backend": b.name,
                "scope": b.scope or "boot",
                "up": b.connection.up,
                "generation": b.connection.generation,
                "lostReason": b.connection.lost_reason,
                "activeSessions": b.active_count(),
                "knownSessions": len(b.sessions),
            }
            for b in self._backends.values()
        ]

    # -- documents and backends ----------------------------------------------------------
    async def _document(self, tenant: str) -> tuple[str, TenantConfig]:
        """(scope, document): the tenant's newest stored document, else the boot one."""
        cached = self._documents.get(tenant)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1], cached[2]
        stored = None if self._configs is None else await self._configs.latest(tenant)
        scope, document = (tenant, stored.config) if stored is not None else (_BOOT, self._boot)
        self._documents[tenant] = (now, scope, document)
        await self._retire_undeclared(tenant, scope, document)
        for key, backend in self._backends.items():
            if key[0] == tenant:  # a changed rate applies without a new connection
                backend.follow_limits(document.limits if scope != _BOOT else None)
        return scope, document

    async def _retire_undeclared(self, tenant: str, scope: str, document: TenantConfig) -> None:
        """Retire the tenant's backends its document no longer declares as they are."""
        declared = document.external.backends if scope == tenant else {}
        wanted = {backend_key(tenant, name, spec) for name, spec in declared.items()}
        for key in [k for k in self._backends if k[0] == tenant and k not in wanted]:
            backend = self._backends.pop(key, None)
            if backend is None:  # retired meanwhile by a concurrent read
                continue
            self._routes = {k: r for k, r in self._routes.items() if r[1] is not backend}
            change = "changed" if key[1] in declared else "removed"
            targets = await backend.retire(f"backend {key[1]!r} was {change} in the document")
            if key[1] in declared and targets:
                self._backend(scope, key[1], document).take_over(targets)

    def _backend(self, scope: str, name: str, document: TenantConfig) -> Backend:
        key = backend_key(scope, name, document.external.backends[name])
        spec = document.external.backends[name]
        backend = self._backends.get(key)
        if backend is None:
            backend = Backend(name, scope, spec, document.external.quota, self._ctx)
            self._backends[key] = backend
        backend.quota = document.external.quota  # the quota may change without the spec
        backend.follow_limits(document.limits if scope != _BOOT else None)
        return backend

    async def _backend_for(self, tenant: str, name: str) -> Backend:
        scope, document = await self._document(tenant)
        if name not in document.external.backends:
            declared = ", ".join(sorted(document.external.backends)) or "none"
            raise UnknownBackend(
                f"no external backend named {name!r} is declared for this tenant "
                f"(declared: {declared})"
            )
        return self._backend(scope, name, document)

    async def _route(
        self, tenant: str, session: str, backend: str, ref: str | None, status: str | None
    ) -> tuple[ExternalTarget, Backend]:
        route = self._routes.get((tenant, session))
        if route is not None:
            return route
        try:
            serving = await self._backend_for(tenant, backend)
        except UnknownBackend as exc:  # the document no longer declares the session's backend
            raise ExternalSessionUnavailable(
                f"external session {session!r} cannot be served: {exc.message}"
            ) from exc
        target = serving.sessions.get(ref or "")
        if target is None:  # opened by another replica, or before a restart
            target = ExternalTarget(tenant, session, backend, ref or "")
            target.status = ExternalStatus(status or ExternalStatus.ACTIVE)
            serving.sessions[target.ref] = target
        self._routes[target.key] = (target, serving)
        return target, serving

    # -- the API's operations ------------------------------------------------------------
    async def open(
        self,
        tenant: str,
        session_id: str | None,
        backend: str,
        metadata: Mapping[str, str] | None = None,
    ) -> str:
        """Open an external session on ``backend``; its Keel session id."""
        serving = await self._backend_for(tenant, backend)
        target = await serving.open(tenant, session_id, metadata or {})
        self._routes[target.key] = (target, serving)
        return target.session

    async def send(
        self,
        tenant: str,
        session: str,
        markers: SessionMarkers,
        payload: Mapping[str, Any],
        request_id: str,
    ) -> Delivered:
        """Record and deliver one input (``text``) to the session's backend."""
        text = payload.get("text")
        if not isinstance(text, str) or not text:
            raise InvalidPayload(
                PayloadRule.TEXT_NOT_STRING, "an input to an external session needs a text"
            )
        target, serving = await self._route(tenant, session, *markers)
        _deliverable(target)
        async with target.lock:
            sent = base_payload(target, Direction.OUTBOUND, "message.sent")
            sent.update({"text": text, "requestId": request_id, "input": dict(payload)})
            submission = await self.recorder.commit(target, sent, request_id)
            if not submission.created:
                turn = await self._accepted_turn(target, submission.seq, request_id)
                if turn is not None:
                    return Delivered(submission, turn)
            client = await serving.connection.ensure()
            result = await client.send_message(target.ref, text)
            accepted = base_payload(target, Direction.OUTBOUND, "message.accepted")
            accepted.update(
                {"turnId": result.turn_id, "sentSeq": submission.seq, "forRequestId": request_id}
            )
            await self.recorder.commit(target, accepted, f"accepted:{request_id}")
        return Delivered(submission, result.turn_id)

    async def _accepted_turn(
        self, target: ExternalTarget, after: int, request_id: str
    ) -> str | None:
        for _ in range(_ACCEPTED_SCAN_PAGES):
            page = await self._ledger.read_events(
                target.tenant, target.session, after=after, limit=MAX_READ_LIMIT
            )
            for event in page:
                p = event.payload
                if (
                    event.kind == Kind.EXTERNAL_EVENT
                    and p.get("type") == "message.accepted"
                    and p.get("forRequestId") == request_id
                ):
                    return str(p.get("turnId"))
            if len(page) < MAX_READ_LIMIT:
                return None
            after = page[-1].seq
        return None

    async def cancel(
        self, tenant: str, session: str, markers: SessionMarkers
    ) -> CancelOutcome | None:
        """Cancel the session's latest turn; None when no message was ever sent.  A backend
        that cannot cancel raises BackendCancelRefused; one that cannot be reached,
        BackendUnavailable: never a success that did not happen."""
        target, serving = await self._route(tenant, session, *markers)
        if target.status == ExternalStatus.CLOSED:
            raise ExternalSessionClosed(f"external session {session!r} is closed")
        if target.status == ExternalStatus.BACKEND_UNAVAILABLE:
            raise BackendUnavailable(f"the backend of session {session!r} is unavailable")
        turn = await self._store.latest_turn(tenant, session)
        if turn is None:
            return None
        client = await serving.connection.ensure()
        result = await client.cancel(target.ref, turn)
        record = base_payload(target, Direction.OUTBOUND, "cancel")
        record.update({"turnId": turn, "cancelled": result.cancelled})
        await self.recorder.commit(target, record, f"cancel:{uuid.uuid4()}")
        return CancelOutcome(turn, result.cancelled)

    async def close(self, tenant: str, session: str, markers: SessionMarkers) -> bool:
        """Close the session at its backend (when reachable) and mark it closed; False when
        it already was."""
        target, serving = await self._route(tenant, session, *markers)
        if target.status == ExternalStatus.CLOSED:
            return False
        async with target.lock:
            delivered = False
            if target.status == ExternalStatus.ACTIVE and serving.connection.up:
                try:
                    client = await serving.connection.ensure()
                    delivered = (await client.close_session(target.ref)).closed
                except GatewayError as exc:
                    self._log.warning("close not delivered", session=session, error=str(exc))
            await self.recorder.idle()
            await self.recorder.lifecycle(
                target, "session.closed", "lifecycle:closed", {"delivered": delivered}
            )
            await self._store.set_status(tenant, session, ExternalStatus.CLOSED)
            target.status = ExternalStatus.CLOSED
            serving.sessions.pop(target.ref, None)
        return True


SessionMarkers = tuple[str, str | None, str | None]
"""(backend, ref, status) as the session row holds them."""


def _deliverable(target: ExternalTarget) -> None:
    if target.status == ExternalStatus.CLOSED:
        raise ExternalSessionClosed(f"external session {target.session!r} is closed")
    if target.status == ExternalStatus.BACKEND_UNAVAILABLE:
        raise ExternalSessionUnavailable(
            f"the backend of external session {target.session!r} is unavailable"
        )
