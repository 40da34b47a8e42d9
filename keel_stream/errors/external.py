"""Sessions whose state an external backend owns."""

from __future__ import annotations

from keel_stream.errors.base import Conflict, InvalidRequest

__all__ = [
    "ExternalSession",
    "ExternalSessionClosed",
    "ExternalSessionUnavailable",
    "NotExternalSession",
    "UnknownBackend",
]


class UnknownBackend(InvalidRequest):
    """An external backend the tenant's configuration document does not declare."""

    code = "unknown_backend"


class ExternalSession(Conflict):
    """The session's state is owned by an external backend; native writes are refused."""

    code = "external_session"


class NotExternalSession(Conflict):
    """external.event is only valid in a session with state_owner=external."""

    code = "not_external_session"


class ExternalSessionClosed(Conflict):
    """The external session is closed; it accepts no further external.event."""

    code = "external_session_closed"


class ExternalSessionUnavailable(Conflict):
    """The session's backend is unavailable (the session's external status says so)."""

    code = "external_session_unavailable"
