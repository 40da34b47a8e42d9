"""The HTTP edge's own refusals (the status table is keel_stream.api.errors)."""

from __future__ import annotations

from keel_stream.errors.base import Conflict, KeelError

__all__ = ["NoRunningAttempt", "RequestTimeout", "ServerBusy", "Unauthorized"]


class Unauthorized(KeelError):
    """No API key, or one that is unknown or revoked."""

    code = "unauthorized"


class NoRunningAttempt(Conflict):
    """There is no running attempt to cancel."""

    code = "no_running_attempt"


class RequestTimeout(KeelError):
    """The request's headers or body did not arrive in time; the connection is closed."""

    code = "request_timeout"


class ServerBusy(KeelError):
    """The process serves as many connections as it may; this one is refused and closed."""

    code = "server_busy"
    retriable = True
