"""The one exception tree of keel-stream.

Every error carries a stable machine-readable ``code`` and a ``retriable`` flag; clients branch on
``code``, never on message text. The API maps codes to HTTP statuses in one table.

    KeelError
    ├── InvalidRequest                  the request itself is malformed (400)
    │   ├── InvalidIdentifier           a tenant, session or key that is not a valid identifier
    │   ├── UnknownKind                 a kind that is not in the vocabulary
    │   ├── KindNotAllowedAtEdge        an edge write of a kind other than user.message
    │   ├── FenceRequired               an owner-scoped commit without a lease token
    │   ├── FenceNotAllowed             an edge- or external-scoped commit with a lease token
    │   ├── KeyNotAllowed               an idempotency key on a kind that declares none
    │   ├── KeyMismatch                 the request's key differs from the payload's key field
    │   ├── KeyRequired                 a kind whose key is mandatory was sent without one
    │   ├── InvalidPayload              a payload that breaks a validation rule (code = the rule)
    │   ├── InvalidPage                 a read with an out-of-range cursor or limit
    │   ├── UnknownProjection           a read model that does not exist
    │   ├── PayloadTooLarge             a body or event over the size limit (413)
    │   ├── UnknownBackend              a backend the tenant's configuration does not declare
    │   ├── HistoryTooLong              a fork or point-in-time read of more events than allowed
    │   └── SubagentReserved            a native write of a field or request id subagents own
    ├── NotFound                        (404)
    │   ├── TenantNotFound
    │   └── SessionNotFound             missing, or belongs to another tenant
    ├── Conflict                        the request is well-formed but the ledger refuses it (409)
    │   ├── IdempotencyConflict         the key was used before with a different payload
    │   ├── TenantExists / SessionExists
    │   ├── ExternalSession             a native write to a session whose state is owned externally
    │   ├── NotExternalSession          an external.event for a native session
    │   ├── ExternalSessionClosed       an external.event for a closed external session
    │   ├── ExternalSessionUnavailable  input or cancel for a session whose backend is unavailable
    │   └── LeaseFenced                 an owner-scoped commit with a stale epoch or another owner
    ├── QuotaRefused                    the tenant's configuration refuses it (403/429)
    │   ├── UnmeteredRefused            a backend that reports no usage, and quota.unmetered is deny
    │   ├── ExternalQuotaExceeded       maxSessions or maxSessionsPerBackend reached (429)
    │   └── RateLimited                 over a tenant's request, session or input rate (429)
    │       └── TenantBusy              a tenant or key holds as many streams/requests as it may
    ├── StoreError                      the store failed; nothing was committed (5xx)
    │   ├── StoreUnavailable            the database could not be reached (retriable)
    │   ├── ProjectionBehind            a read model did not reach min_seq in time (retriable)
    │   ├── MigrationFailed             a migration file failed; later files were not applied
    │   └── MigrationDrift              an applied migration file was changed afterwards
    ├── BrokerError                     Kafka refused or failed a request (translated at the seam)
    │   ├── BrokerUnavailable           the broker could not be reached or timed out (retriable)
    │   ├── BrokerAccessDenied          the broker refused the credentials (SASL, TLS) or an ACL
    │   └── TopicMissing                a topic the platform needs does not exist (apply topics)
    └── ConfigurationError              a process cannot start as configured (CLI exit status 2)
        ├── InvalidSetting              a KEEL_* variable or flag that does not parse
        ├── MissingDatabaseUrl          no database configured where one is needed
        ├── MissingKafkaBootstrap       no broker configured where one is needed
        ├── PortInUse                   a port a server must listen on is taken (exit status 1)
        └── DevAlreadyRunning           another `keel-stream dev` holds the data directory (exit 1)
"""

from __future__ import annotations

from typing import ClassVar

from keel_stream.payload_rules import PayloadRule

__all__ = [
    "BrokerAccessDenied",
    "BrokerError",
    "BrokerUnavailable",
    "ConfigurationError",
    "Conflict",
    "DevAlreadyRunning",
    "ExternalQuotaExceeded",
    "ExternalSession",
    "ExternalSessionClosed",
    "ExternalSessionUnavailable",
    "FenceNotAllowed",
    "FenceRequired",
    "HistoryTooLong",
    "IdempotencyConflict",
    "InvalidIdentifier",
    "InvalidPage",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidSetting",
    "KeelError",
    "KeyMismatch",
    "KeyNotAllowed",
    "KeyRequired",
    "KindNotAllowedAtEdge",
    "LeaseFenced",
    "MigrationDrift",
    "MigrationFailed",
    "MissingDatabaseUrl",
    "MissingKafkaBootstrap",
    "NotExternalSession",
    "NotFound",
    "PayloadRule",
    "PayloadTooLarge",
    "PortInUse",
    "ProjectionBehind",
    "QuotaRefused",
    "RateLimited",
    "SessionExists",
    "SessionNotFound",
    "StoreError",
    "StoreUnavailable",
    "SubagentReserved",
    "TenantBusy",
    "TenantExists",
    "TenantNotFound",
    "TopicMissing",
    "UnknownBackend",
    "UnknownKind",
    "UnknownProjection",
    "UnmeteredRefused",
]


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


class UnknownBackend(InvalidRequest):
    """An external backend the tenant's configuration document does not declare."""

    code = "unknown_backend"


class HistoryTooLong(InvalidRequest):
    """A fork, or a read as of a seq, over more events than one request may fold or copy."""

    code = "history_too_long"


class NotFound(KeelError):
    """The addressed object does not exist for this tenant."""

    code = "not_found"


class TenantNotFound(NotFound):
    """No tenant with this id."""

    code = "tenant_not_found"


class SessionNotFound(NotFound):
    """No session with this id in this tenant (another tenant's session is not found too)."""

    code = "session_not_found"


class Conflict(KeelError):
    """The request is well-formed but conflicts with what the ledger holds."""

    code = "conflict"


class IdempotencyConflict(Conflict):
    """The idempotency key was already committed with a different payload or kind."""

    code = "idempotency_conflict"


class TenantExists(Conflict):
    """A tenant with this id already exists."""

    code = "tenant_exists"


class SessionExists(Conflict):
    """A session with this id already exists in this tenant."""

    code = "session_exists"


class SubagentReserved(InvalidRequest):
    """A client input may not carry what only the worker commits for subagents: a `subagent`
    link, a `subagentResult`, or a requestId starting subagent: or subagent-task:."""

    code = "subagent_reserved"


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


class LeaseFenced(Conflict):
    """The lease token is stale (older epoch) or names another owner."""

    code = "lease_fenced"


class QuotaRefused(KeelError):
    """The tenant's configuration refuses the request."""

    code = "quota_refused"


class UnmeteredRefused(QuotaRefused):
    """The backend reports no usage and the tenant's quota.unmetered is deny (or unset)."""

    code = "unmetered_refused"


class ExternalQuotaExceeded(QuotaRefused):
    """A backend's maxSessions or the tenant's maxSessionsPerBackend is reached."""

    code = "external_quota_exceeded"


class RateLimited(QuotaRefused):
    """Over one of the tenant's rates (requests, sessions or inputs): retry after a while."""

    code = "rate_limited"
    retriable = True

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TenantBusy(RateLimited):
    """The tenant, or its API key, holds as many streams or requests in flight as it may."""

    code = "tenant_busy"


class StoreError(KeelError):
    """The store failed; the transaction was rolled back and nothing was committed."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The database could not be reached or dropped the connection; retry with the same key."""

    code = "store_unavailable"
    retriable = True


class ProjectionBehind(StoreError):
    """The read model had not reached the requested seq by the deadline; ask again."""

    code = "projection_behind"
    retriable = True


class MigrationFailed(StoreError):
    """A migration file failed; it and every later file were not applied."""

    code = "migration_failed"


class MigrationDrift(StoreError):
    """A migration file that was applied has since been changed."""

    code = "migration_drift"


class BrokerError(KeelError):
    """Kafka refused or failed a request; what was committed in PostgreSQL is unaffected."""

    code = "broker_error"


class BrokerUnavailable(BrokerError):
    """The broker could not be reached, or a request to it timed out; retry later."""

    code = "broker_unavailable"
    retriable = True


class BrokerAccessDenied(BrokerError):
    """The broker refused this client's credentials (SASL, its TLS certificate) or permissions
    (an ACL); retrying does not help until the settings or the ACLs change."""

    code = "broker_access_denied"


class TopicMissing(BrokerError):
    """A topic the platform needs does not exist: run `keel-stream topics apply`."""

    code = "topic_missing"


class ConfigurationError(KeelError):
    """A process cannot start as configured; nothing was started."""

    code = "configuration_error"


class InvalidSetting(ConfigurationError):
    """A KEEL_* variable (or the flag standing in for it) does not parse or is out of range."""

    code = "invalid_setting"


class MissingDatabaseUrl(ConfigurationError):
    """The command needs PostgreSQL: neither --database-url nor KEEL_DATABASE_URL is set."""

    code = "missing_database_url"


class MissingKafkaBootstrap(ConfigurationError):
    """The command needs a broker: neither --bootstrap nor KEEL_KAFKA_BOOTSTRAP is set."""

    code = "missing_kafka_bootstrap"


class PortInUse(ConfigurationError):
    """The port a server was asked to listen on is taken."""

    code = "port_in_use"


class DevAlreadyRunning(ConfigurationError):
    """Another `keel-stream dev` holds the data directory's lock; the message names its pid."""

    code = "dev_already_running"
