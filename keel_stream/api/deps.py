"""What the routes share: the process's services, the request's tenant, the session row."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from keel_stream.api.access_log import note_tenant
from keel_stream.api.errors import ErrorBody
from keel_stream.api.hub import LiveHub
from keel_stream.api.limits import ApiLimits
from keel_stream.api.models import (
    ExternalView,
    ForkView,
    RunView,
    SessionView,
    SubagentOfView,
)
from keel_stream.api.presence import Presence
from keel_stream.api.tenant_limits import TenantGuard, TenantLimits, release_after_response
from keel_stream.clock import utc_now
from keel_stream.errors import SessionNotFound, Unauthorized
from keel_stream.gateway.agents import ExternalAgents
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.hooks.service import HookService
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import StateOwner, check_identifier
from keel_stream.readmodels import ReadModels
from keel_stream.settings import KeelSettings
from keel_stream.store import Ledger, ProjectionStore, Runs
from keel_stream.store.deadlines import Deadlines
from keel_stream.store.keys import KeyStore
from keel_stream.store.ops import OpsReader
from keel_stream.store.sessions import SessionRecord, Sessions
from keel_stream.store.subagents import SubagentTree
from keel_stream.store.tenant_configs import TenantConfigs
from keel_stream.tenancy.document import TenantConfig
from keel_stream.triggers.service import TriggerService

__all__ = [
    "CONSOLE_COOKIE",
    "CONSOLE_HEADER",
    "CONSOLE_HOST_COOKIE",
    "ERRORS",
    "ApiConfig",
    "Config",
    "Services",
    "Svc",
    "Tenant",
    "config_of",
    "console_cookie_name",
    "console_token",
    "key_id_of",
    "services_of",
    "session_row",
    "session_view",
    "tenant_of",
]

ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    400: {"model": ErrorBody},
    401: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    429: {"model": ErrorBody, "description": "Over the tenant's bounds"},
    503: {"model": ErrorBody},
}


@dataclass
class ApiConfig:
    database_url: str
    kafka: KafkaSettings | None = None
    topic_prefix: str = ""
    heartbeat_s: float = 15.0
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the process drains (SIGTERM): streams send what is unread, then `drain`."""
    boot_config: TenantConfig | None = None
    """The runtime's own configuration document (KEEL_EXTERNAL_CONFIG, read at the edge)."""
    data_dir: Path = Path(".keel")
    """KEEL_DATA_DIR: the gateway's audit file and pidfiles live under it."""
    rpc_max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    """KEEL_RPC_MAX_LINE_BYTES: the largest message an external backend may send."""
    limits: ApiLimits = field(default_factory=ApiLimits)
    """Body size, header and body deadlines, connections (KEEL_API_*: api_config)."""
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    clock: Callable[[], datetime] = field(default=utc_now)
    """Now, for decisions' expiry (tests move it forward a day)."""
    settings: KeelSettings = field(kw_only=True)
    """The process's settings, built once at its edge (hooks' egress, triggers, plugins)."""
    environ: Mapping[str, str] = field(kw_only=True)
    """What `${NAME}`/`env:NAME` references of tenant documents read: the process environment,
    passed in at the edge (keel_stream.settings.process_environ)."""


@dataclass
class Services:
    """Everything a request may use, created once per process by the app's lifespan."""

    ledger: Ledger
    sessions: Sessions
    keys: KeyStore
    models: ReadModels
    runs: Runs
    hub: LiveHub
    tenant_configs: TenantConfigs
    external: ExternalAgents
    ops: OpsReader
    projections: ProjectionStore
    hooks: HookService
    deadlines: Deadlines
    subagents: SubagentTree
    triggers: TriggerService
    presence: Presence
    guard: TenantGuard
    """Which background services run now (hooks senders, trigger schedulers)."""


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


Svc = Annotated[Services, Depends(services_of)]


def config_of(request: Request) -> ApiConfig:
    config: ApiConfig = request.app.state.config
    return config


Config = Annotated[ApiConfig, Depends(config_of)]


_BEARER: Final = HTTPBearer(
    auto_error=False, description="An API key of the tenant (`keel-stream keys create`)."
)


CONSOLE_COOKIE: Final = "keel_console"
"""The console's sign-in over plain HTTP (a development address): a sign-in token, HttpOnly,
SameSite=Strict, never a URL, never the API key."""
CONSOLE_HOST_COOKIE: Final = "__Host-keel_console"
"""The same over HTTPS: the __Host- prefix makes the browser keep it Secure, for this host and
path / only, so no sibling host can plant or read it."""
CONSOLE_HEADER: Final = "X-Keel-Console"
"""Sent by the console's own scripts: a write authenticated by the cookie needs it (a form or
a cross-site page cannot set it), so the cookie alone never authorises a write."""
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
STREAM_SUFFIX: Final = "/events/stream"
"""Requests to a path ending so count as streams against the tenant's bounds."""


def console_cookie_name(request: Request) -> str:
    """The one sign-in cookie this request's scheme reads and writes."""
    return CONSOLE_HOST_COOKIE if request.url.scheme == "https" else CONSOLE_COOKIE


def console_token(request: Request) -> str:
    return request.cookies.get(console_cookie_name(request), "").strip()


def _credential(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> tuple[str, bool]:
    """(the secret, whether it is a console sign-in token rather than an API key)."""
    if credentials is not None:
        return credentials.credentials.strip(), False
    token = console_token(request)
    if token and request.method not in _SAFE_METHODS and CONSOLE_HEADER not in request.headers:
        raise Unauthorized(f"a write signed in by the console's cookie needs {CONSOLE_HEADER}")
    return token, True


async def tenant_of(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)] = None,
) -> str:
    """The tenant of the request's API key (`Authorization: Bearer <key>`) or of the console's
    sign-in cookie; our own 401 body when it is missing or unknown (auto_error off: FastAPI's
    would be a 403 of another shape)."""
    secret, console = _credential(request, credentials)
    if not secret:
        raise Unauthorized("send Authorization: Bearer <api key>")
    keys = services_of(request).keys
    principal = await (keys.console_principal(secret) if console else keys.principal_for(secret))
    if principal is None:
        raise Unauthorized("unknown or revoked API key" if not console else "signed out")
    tenant, request.state.key_id = principal
    note_tenant(tenant)
    stream = request.url.path.endswith(STREAM_SUFFIX)
    release = await services_of(request).guard.admit(tenant, principal[1], stream=stream)
    release_after_response(request.scope, release)
    return tenant


def key_id_of(request: Request) -> str:
    """The id of the API key that authenticated the request (after `Tenant`)."""
    return str(request.state.key_id)


Tenant = Annotated[str, Depends(tenant_of)]


async def session_row(services: Services, tenant: str, session_id: str) -> SessionRecord:
    """The session with its run row's status (SessionNotFound for another tenant's too)."""
    check_identifier(session_id, "session")
    record = await services.sessions.get(tenant, session_id)
    if record is None:
        raise SessionNotFound(f"session {session_id!r} not found")
    return record


def session_view(record: SessionRecord) -> SessionView:
    external = None
    if record.state_owner == StateOwner.EXTERNAL:
        external = ExternalView(
            backend=record.external_backend,
            ref=record.external_ref,
            status=record.external_status,
            metering=record.metering,
        )
    return SessionView(
        id=record.session_id,
        last_seq=record.last_seq,
        state_owner=record.state_owner,
        created_at=record.created_at,
        run=RunView(
            status=record.run_status,
            attempts=record.attempts,
            epoch=record.lease_epoch,
            open_decisions=list(record.open_decisions),
        ),
        external=external,
        fork_of=(
            ForkView(session=record.forked_from, at_seq=record.forked_at_seq or 0)
            if record.forked_from is not None
            else None
        ),
        subagent_of=_subagent_of(record),
    )


def _subagent_of(record: SessionRecord) -> SubagentOfView | None:
    if record.parent_session is None:
        return None
    return SubagentOfView(
        session=record.parent_session,
        tool_call_id=record.parent_call or "",
        depth=record.subagent_depth or 1,
        root=record.root_session or record.parent_session,
    )
