"""The one exception tree of keel-stream: every error any package raises on purpose.

Every error carries a stable machine-readable ``code`` and a ``retriable`` flag; clients branch on
``code``, never on message text. The API maps codes to HTTP statuses in one table
(``keel_stream.api.errors``); the CLI prints ``error [<code>]: <message>``.

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
    │   ├── HistoryTooLong              a fork or point-in-time read of more events than allowed
    │   ├── SubagentReserved            a native write of a field or request id subagents own
    │   ├── UnknownBackend              a backend the tenant's configuration does not declare
    │   ├── DecisionReserved            a plain input carrying a decision (answer it at /decisions)
    │   ├── OutcomeNotAllowed           a decision outcome the decision does not allow
    │   ├── InvalidConfig               a tenant configuration document that breaks the schema
    │   │   └── LiteralSecret           a secret-shaped literal where only a reference is accepted
    │   ├── InvalidHook                 a hook subscription that breaks a rule
    │   ├── HookUrlRefused              a hook URL that is not http(s) or is not a public address
    │   ├── ReplayTooLarge              a hook replay over more events than one request may
    │   ├── InvalidTrigger              a bad cron, zone, interval, target, template or policy
    │   └── WebhookDeliveryIdMissing    an inbound webhook without its delivery id
    ├── NotFound                        the addressed object does not exist for this tenant (404)
    │   ├── TenantNotFound
    │   ├── SessionNotFound             missing, or belongs to another tenant
    │   ├── DecisionNotFound            no gated call in the session has that toolCallId
    │   ├── ConfigNotFound              the tenant has no configuration document yet
    │   ├── HookNotFound
    │   ├── DeliveryNotFound            no such delivery of this hook subscription
    │   └── TriggerNotFound
    ├── Conflict                        the request is well-formed but the ledger refuses it (409)
    │   ├── IdempotencyConflict         the key was used before with a different payload
    │   ├── TenantExists
    │   ├── SessionExists
    │   ├── LeaseFenced                 an owner-scoped commit with a stale epoch or another owner
    │   ├── ExternalSession             a native write to a session whose state is owned externally
    │   ├── NotExternalSession          an external.event for a native session
    │   ├── ExternalSessionClosed       an external.event for a closed external session
    │   ├── ExternalSessionUnavailable  input or cancel for a session whose backend is unavailable
    │   ├── NoRunningAttempt            a cancel with no running attempt
    │   ├── DecisionNotOpen             the decision's call already has its result
    │   ├── DecisionAlreadyAnswered     answered before, differently (first answer wins)
    │   ├── DecisionExpired             the decision expired unanswered
    │   ├── DecisionStale               an answer for arguments the decision did not open with
    │   ├── HookLimitReached            the tenant has as many hook subscriptions as it may
    │   ├── HookDisabled                the subscription's endpoint answered 410 Gone
    │   ├── TriggerLimitReached         the tenant has as many triggers as it may
    │   ├── TriggerPaused               an inbound webhook for a paused or completed trigger
    │   └── NotWebhookTrigger           an inbound webhook for a schedule trigger
    ├── QuotaRefused                    the tenant's configuration refuses it (403/429)
    │   ├── UnmeteredRefused            a backend that reports no usage, and quota.unmetered is deny
    │   ├── ExternalQuotaExceeded       maxSessions or maxSessionsPerBackend reached (429)
    │   └── RateLimited                 over a tenant's request, session or input rate (429)
    │       └── TenantBusy              a tenant or key holds as many streams/requests as it may
    ├── Unauthorized                    no API key, or one that is unknown or revoked (401)
    ├── WebhookSignatureInvalid         an inbound webhook whose signature does not verify (401)
    ├── RequestTimeout                  headers or body did not arrive in time (408)
    ├── ServerBusy                      the process serves as many connections as it may (503)
    ├── StoreError                      the store failed; nothing was committed (5xx)
    │   ├── StoreUnavailable            the database could not be reached (retriable)
    │   ├── ProjectionBehind            a read model did not reach min_seq in time (retriable)
    │   ├── MigrationFailed             a migration file failed; later files were not applied
    │   └── MigrationDrift              an applied migration file was changed afterwards
    ├── BrokerError                     Kafka refused or failed a request (translated at the seam)
    │   ├── BrokerUnavailable           the broker could not be reached or timed out (retriable)
    │   ├── BrokerAccessDenied          the broker refused the credentials (SASL, TLS) or an ACL
    │   └── TopicMissing                a topic the platform needs does not exist (apply topics)
    ├── GatewayError                    an external provider failed or broke the protocol (502)
    │   ├── BackendTimeout              no answer within the per-request timeout (-32001, 504)
    │   ├── RequestCancelled            the provider cancelled the request (-32002)
    │   ├── BackendUnavailable          the provider or its session is gone (-32003, 503)
    │   ├── BackendCancelRefused        the provider cannot cancel; the turn was not stopped
    │   ├── ActivationRefused           the handshake must not activate this provider
    │   │   ├── IncompatibleVersion     a protocol revision this client cannot speak
    │   │   ├── WrongProviderKind       an AgentBackend where a ToolProvider was expected
    │   │   └── BudgetRefused           a budget above the runtime's hard limits; not spawned
    │   ├── ProtocolError               malformed JSON-RPC, unknown method, invalid params
    │   └── RemoteError                 any other error the provider answered
    └── ConfigurationError              a process cannot start as configured (CLI exit status 2)
        ├── InvalidSetting              a KEEL_* variable or flag that does not parse
        ├── MissingDatabaseUrl          no database configured where one is needed
        ├── MissingKafkaBootstrap       no broker configured where one is needed
        ├── PortInUse                   a port a server must listen on is taken (exit status 1)
        └── DevAlreadyRunning           another `keel-stream dev` holds the data directory (exit 1)

The classes live in one module per family, and every one is imported from here
(``from keel_stream.errors import X``): ``base`` (KeelError and the four families of a refused
request), ``ledger``, ``external``, ``quota``, ``decisions``, ``api``, ``tenancy``, ``hooks``,
``triggers``, ``store``, ``broker``, ``gateway``, ``config``. The package imports nothing of
keel_stream but the payload rules, so every layer may raise its errors.
"""

from __future__ import annotations

from keel_stream.errors.api import (
    NoRunningAttempt,
    RequestTimeout,
    ServerBusy,
    Unauthorized,
)
from keel_stream.errors.base import (
    Conflict,
    InvalidRequest,
    KeelError,
    NotFound,
    QuotaRefused,
)
from keel_stream.errors.broker import (
    BrokerAccessDenied,
    BrokerError,
    BrokerUnavailable,
    TopicMissing,
)
from keel_stream.errors.config import (
    ConfigurationError,
    DevAlreadyRunning,
    InvalidSetting,
    MissingDatabaseUrl,
    MissingKafkaBootstrap,
    PortInUse,
)
from keel_stream.errors.decisions import (
    DecisionAlreadyAnswered,
    DecisionExpired,
    DecisionNotFound,
    DecisionNotOpen,
    DecisionReserved,
    DecisionStale,
    OutcomeNotAllowed,
)
from keel_stream.errors.external import (
    ExternalSession,
    ExternalSessionClosed,
    ExternalSessionUnavailable,
    NotExternalSession,
    UnknownBackend,
)
from keel_stream.errors.gateway import (
    ActivationRefused,
    BackendCancelRefused,
    BackendTimeout,
    BackendUnavailable,
    BudgetRefused,
    GatewayError,
    IncompatibleVersion,
    ProtocolError,
    RemoteError,
    RequestCancelled,
    WrongProviderKind,
)
from keel_stream.errors.hooks import (
    DeliveryNotFound,
    HookDisabled,
    HookLimitReached,
    HookNotFound,
    HookUrlRefused,
    InvalidHook,
    ReplayTooLarge,
)
from keel_stream.errors.ledger import (
    FenceNotAllowed,
    FenceRequired,
    HistoryTooLong,
    IdempotencyConflict,
    InvalidIdentifier,
    InvalidPage,
    InvalidPayload,
    KeyMismatch,
    KeyNotAllowed,
    KeyRequired,
    KindNotAllowedAtEdge,
    LeaseFenced,
    PayloadTooLarge,
    SessionExists,
    SessionNotFound,
    SubagentReserved,
    TenantExists,
    TenantNotFound,
    UnknownKind,
    UnknownProjection,
)
from keel_stream.errors.quota import (
    ExternalQuotaExceeded,
    RateLimited,
    TenantBusy,
    UnmeteredRefused,
)
from keel_stream.errors.store import (
    MigrationDrift,
    MigrationFailed,
    ProjectionBehind,
    StoreError,
    StoreUnavailable,
)
from keel_stream.errors.tenancy import (
    ConfigNotFound,
    InvalidConfig,
    LiteralSecret,
)
from keel_stream.errors.triggers import (
    InvalidTrigger,
    NotWebhookTrigger,
    TriggerLimitReached,
    TriggerNotFound,
    TriggerPaused,
    WebhookDeliveryIdMissing,
    WebhookSignatureInvalid,
)
from keel_stream.payload_rules import PayloadRule

__all__ = [
    "ActivationRefused",
    "BackendCancelRefused",
    "BackendTimeout",
    "BackendUnavailable",
    "BrokerAccessDenied",
    "BrokerError",
    "BrokerUnavailable",
    "BudgetRefused",
    "ConfigNotFound",
    "ConfigurationError",
    "Conflict",
    "DecisionAlreadyAnswered",
    "DecisionExpired",
    "DecisionNotFound",
    "DecisionNotOpen",
    "DecisionReserved",
    "DecisionStale",
    "DeliveryNotFound",
    "DevAlreadyRunning",
    "ExternalQuotaExceeded",
    "ExternalSession",
    "ExternalSessionClosed",
    "ExternalSessionUnavailable",
    "FenceNotAllowed",
    "FenceRequired",
    "GatewayError",
    "HistoryTooLong",
    "HookDisabled",
    "HookLimitReached",
    "HookNotFound",
    "HookUrlRefused",
    "IdempotencyConflict",
    "IncompatibleVersion",
    "InvalidConfig",
    "InvalidHook",
    "InvalidIdentifier",
    "InvalidPage",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidSetting",
    "InvalidTrigger",
    "KeelError",
    "KeyMismatch",
    "KeyNotAllowed",
    "KeyRequired",
    "KindNotAllowedAtEdge",
    "LeaseFenced",
    "LiteralSecret",
    "MigrationDrift",
    "MigrationFailed",
    "MissingDatabaseUrl",
    "MissingKafkaBootstrap",
    "NoRunningAttempt",
    "NotExternalSession",
    "NotFound",
    "NotWebhookTrigger",
    "OutcomeNotAllowed",
    "PayloadRule",
    "PayloadTooLarge",
    "PortInUse",
    "ProjectionBehind",
    "ProtocolError",
    "QuotaRefused",
    "RateLimited",
    "RemoteError",
    "ReplayTooLarge",
    "RequestCancelled",
    "RequestTimeout",
    "ServerBusy",
    "SessionExists",
    "SessionNotFound",
    "StoreError",
    "StoreUnavailable",
    "SubagentReserved",
    "TenantBusy",
    "TenantExists",
    "TenantNotFound",
    "TopicMissing",
    "TriggerLimitReached",
    "TriggerNotFound",
    "TriggerPaused",
    "Unauthorized",
    "UnknownBackend",
    "UnknownKind",
    "UnknownProjection",
    "UnmeteredRefused",
    "WebhookDeliveryIdMissing",
    "WebhookSignatureInvalid",
    "WrongProviderKind",
]
