"""The ledger's refusals: identifiers, kinds, fences, idempotency keys, payloads, reads."""

from __future__ import annotations

from keel_stream.errors.base import Conflict, InvalidRequest, NotFound
from keel_stream.payload_rules import PayloadRule

__all__ = [
    "FenceNotAllowed",
    "FenceRequired",
    "HistoryTooLong",
    "IdempotencyConflict",
    "InvalidIdentifier",
    "InvalidPage",
    "InvalidPayload",
    "KeyMismatch",
    "KeyNotAllowed",
    "KeyRequired",
    "KindNotAllowedAtEdge",
    "LeaseFenced",
    "PayloadTooLarge",
    "SessionExists",
    "SessionNotFound",
    "SubagentReserved",
    "TenantExists",
    "TenantNotFound",
    "UnknownKind",
    "UnknownProjection",
]


class InvalidIdentifier(InvalidRequest):
    """A tenant id, session id or idempotency key that is not a valid identifier."""

    code = "invalid_identifier"


class UnknownKind(InvalidRequest):
    """The kind is not registered in the vocabulary, so it cannot enter the log."""

    code = "unknown_kind"


class KindNotAllowedAtEdge(InvalidRequest):
    """Only edge-scoped kinds (user.message) may be written through the edge."""

    code = "kind_not_allowed"


class FenceRequired(InvalidRequest):
    """Owner-scoped kinds must carry the lease token (owner + epoch)."""

    code = "fence_required"


class FenceNotAllowed(InvalidRequest):
    """Edge- and external-scoped kinds must not carry a lease token."""

    code = "fence_not_allowed"


class KeyNotAllowed(InvalidRequest):
    """The kind declares no idempotency key; passing one is an error, not a silent ignore."""

    code = "idempotency_key_not_allowed"


class KeyMismatch(InvalidRequest):
    """The request's idempotency key differs from the key field inside the payload."""

    code = "idempotency_key_mismatch"


class KeyRequired(InvalidRequest):
    """The kind cannot be committed without its idempotency key (tool.result's toolCallId)."""

    code = "idempotency_key_required"


class InvalidPayload(InvalidRequest):
    """The payload breaks a validation rule; ``error_code`` names the rule."""

    code = "invalid_payload"

    def __init__(self, rule: PayloadRule, message: str) -> None:
        super().__init__(message)
        self.rule = rule

    @property
    def error_code(self) -> str:
        return self.rule.value


class InvalidPage(InvalidRequest):
    """A read with a negative cursor or a limit outside the allowed range."""

    code = "invalid_page"


class UnknownProjection(InvalidRequest):
    """There is no read model with this name."""

    code = "unknown_projection"


class PayloadTooLarge(InvalidRequest):
    """A request body or an event larger than the platform accepts."""

    code = "payload_too_large"


class HistoryTooLong(InvalidRequest):
    """A fork, or a read as of a seq, over more events than one request may fold or copy."""

    code = "history_too_long"


class SubagentReserved(InvalidRequest):
    """A client input may not carry what only the worker commits for subagents: a `subagent`
    link, a `subagentResult`, or a requestId starting subagent: or subagent-task:."""

    code = "subagent_reserved"


class TenantNotFound(NotFound):
    """No tenant with this id."""

    code = "tenant_not_found"


class SessionNotFound(NotFound):
    """No session with this id in this tenant (another tenant's session is not found too)."""

    code = "session_not_found"


class IdempotencyConflict(Conflict):
    """The idempotency key was already committed with a different payload or kind."""

    code = "idempotency_conflict"


class TenantExists(Conflict):
    """A tenant with this id already exists."""

    code = "tenant_exists"


class SessionExists(Conflict):
    """A session with this id already exists in this tenant."""

    code = "session_exists"


class LeaseFenced(Conflict):
    """The lease token is stale (older epoch) or names another owner."""

    code = "lease_fenced"
