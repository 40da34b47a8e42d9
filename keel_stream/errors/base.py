"""The roots of the tree: every error and the four families of a refused request."""

from __future__ import annotations

from typing import ClassVar

__all__ = ["Conflict", "InvalidRequest", "KeelError", "NotFound", "QuotaRefused"]


class KeelError(Exception):
    """Root of every error keel-stream raises on purpose."""

    code: ClassVar[str] = "keel_error"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def error_code(self) -> str:
        """The stable code of this error instance (a rule code for InvalidPayload)."""
        return self.code


class InvalidRequest(KeelError):
    """The request is malformed; resending it unchanged fails the same way."""

    code = "invalid_request"


class NotFound(KeelError):
    """The addressed object does not exist for this tenant."""

    code = "not_found"


class Conflict(KeelError):
    """The request is well-formed but conflicts with what the ledger holds."""

    code = "conflict"


class QuotaRefused(KeelError):
    """The tenant's configuration refuses the request."""

    code = "quota_refused"
