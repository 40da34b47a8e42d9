"""Settings from KEEL_* environment variables (and flags that override them).

The one module that reads the process environment: the command line builds KeelSettings once,
at its edge, and passes it (or the values taken from it) in. `process_environ` is the
environment itself, for what reads variables by a name the user chose: the `${NAME}`/`env:NAME`
secret references of tenant documents (keel_stream.tenancy.document.resolve) and the
environment dev's children inherit."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "ENV_PREFIX",
    "KeelSettings",
    "LogLevel",
    "ProviderName",
    "SaslMechanism",
    "SecurityProtocol",
    "env_var",
    "process_environ",
]

ENV_PREFIX = "KEEL_"

LogLevel = Literal["debug", "info", "warning", "error", "critical"]
ProviderName = Literal["fake", "openai"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def process_environ() -> Mapping[str, str]:
    """The process environment (a live view), read at the edge and passed in."""
    return os.environ


def env_var(field: str) -> str:
    """The environment variable of a settings field (api_port -> KEEL_API_PORT)."""
    return f"{ENV_PREFIX}{field.upper()}"


class KeelSettings(BaseSettings):
    """Everything keel-stream reads from its environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str | None = None
    """PostgreSQL to use; unset: `keel-stream dev` starts an embedded one in data_dir."""
    kafka_bootstrap: str | None = None
    """Kafka bootstrap servers; unset: `keel-stream dev` starts an embedded broker."""
    kafka_client_id: str = Field(default="keel", min_length=1)
    """Every Kafka client's id starts with this (keel-relay, keel-hooks, ...)."""
    kafka_security_protocol: SecurityProtocol = "PLAINTEXT"
    """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (docs/operations.md#kafka-security)."""
    kafka_sasl_mechanism: SaslMechanism = "PLAIN"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = None
    kafka_ssl_cafile: Path | None = None
    """CA bundle for the brokers' certificates; unset: the system's trust store."""
    kafka_ssl_certfile: Path | None = None
    """Client certificate (PEM) for brokers that authenticate clients by TLS."""
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_key_password: str | None = None
    kafka_idempotence: bool = True
    """The relay asks for an idempotent producer (false: a principal without IDEMPOTENT_WRITE)."""
    kafka_replication_factor: int = Field(default=1, ge=1)
    """Replicas of each topic `topics apply` creates (3 on a three-broker cluster)."""
    kafka_min_insync_replicas: int | None = Field(default=None, ge=1)
    """min.insync.replicas of each topic `topics apply` creates; unset: the broker's default."""
    kafka_request_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    kafka_session_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    """A consumer-group member (projector, hooks, tail) silent this long leaves its group."""
    topic_prefix: str = ""
    """Prepended to every topic name (one cluster, several environments)."""
    data_dir: Path = Path(".keel")
    """Where embedded servers keep their data."""
    log_level: LogLevel = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    """Log lines on stderr: json, console (key=value), or auto (console on a terminal)."""
    relay_batch_size: int = Field(default=500, ge=1, le=10_000)
    relay_poll_interval_s: float = Field(default=1.0, gt=0)
    """Poll fallback when no NOTIFY arrives; also how often a standby tries to take over."""
    relay_shards: int = Field(default=1, ge=1)
    projector_batch_size: int = Field(default=500, ge=1, le=10_000)
    projector_reconcile_every_s: float = Field(default=2.0, gt=0)
    projector_reconcile_idle_s: float = Field(default=2.0, ge=0)
    """A session is reconciled from the ledger only after this long without a commit."""
    provider: ProviderName = "fake"
    """The model provider of workers: fake (deterministic, the default) or openai."""
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str | None = None
    openai_model: str = "gpt-4o-mini"
    worker_slots: int = Field(default=4, ge=1)
    worker_tenant_slots: int = Field(default=0, ge=0)
    """At most this many of a worker's slots per tenant; 0: all slots but one (one slot always
    stays open to the other tenants)."""
    tenant_max_running: int = Field(default=0, ge=0)
    """At most this many running attempts per tenant across all workers; 0: no cap."""
    worker_lease_ttl_s: float = Field(default=15.0, gt=0)
    worker_drain_grace_s: float = Field(default=10.0, ge=0)
    worker_max_turns: int = Field(default=8, ge=1)
    worker_context_budget_chars: int = Field(default=200_000, ge=0)
    """Compact a session's model context when it exceeds this many characters; 0: never."""
    tool_timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """A tool call that takes longer is an isError result (a provider's timeoutMs overrides)."""
    provider_stall_timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """A model stream that sends nothing for this long is cut (a retriable failure)."""
    provider_request_timeout_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    """The longest a model request may take in all, its retries included."""
    rpc_max_line_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """The largest JSON-RPC message an external provider may send (a stdio line, an http body
    or SSE event); a longer one fails the provider: it is reclaimed and its request errs."""
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """A request body over this is refused (413) before it is parsed."""
    api_header_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    """A request's headers must arrive within this, or the connection is closed (408)."""
    api_body_timeout_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """A request's body must arrive within this once its headers have (408)."""
    api_max_connections: int = Field(default=1000, ge=1)
    """Connections (SSE streams included) served at once; a request over it is 503."""
    api_backlog: int = Field(default=2048, ge=1)
    """Connections the kernel queues before the server accepts them."""
    tenant_max_streams: int = Field(default=500, ge=1)
    """SSE streams one tenant may hold open on an API process (429 tenant_busy past it)."""
    key_max_streams: int = Field(default=250, ge=1)
    """SSE streams one API key may hold open on an API process."""
    tenant_max_in_flight: int = Field(default=200, ge=1)
    """Other requests one tenant may have in flight on an API process at once."""
    key_max_in_flight: int = Field(default=100, ge=1)
    tenant_requests_per_s: int = Field(default=500, ge=1)
    """Requests a second per tenant and API process (429 rate_limited past it)."""
    tenant_sessions_per_min: int = Field(default=1200, ge=1)
    """Sessions a tenant may open a minute, per API process."""
    tenant_inputs_per_s: int = Field(default=100, ge=1)
    """Inputs (/input, /events) a tenant may send a second, per API process."""
    tenant_backend_events_per_s: int = Field(default=1000, ge=1)
    """Events a tenant's external backends may have committed a second, per API process: past
    it the gateway reads them no faster (backpressure), it never drops one."""
    backend_flood_grace_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """A backend held to its tenant's event rate this long without a pause is failed (audited,
    its sessions backend-unavailable, its process group reclaimed)."""
    dev_api_key: str | None = None
    """`keel-stream dev` uses this API key (for tenant "dev") instead of a random one."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Serve Prometheus metrics on this port (relay, worker, projections run); unset: not."""
    dev_kafka: Literal["embedded", "apache"] = "embedded"
    """The broker `keel-stream dev` starts without KEEL_KAFKA_BOOTSTRAP: the memory-only embedded
    one, or a durable Apache Kafka under the data directory (needs Java 17+ and Maven)."""
    metrics_host: str = "127.0.0.1"
    """The interface metrics are served on; 0.0.0.0 in a container, to be scraped."""
    hooks_allowed_hosts: str = ""
    """Hosts, addresses or CIDRs (comma-separated) hooks may send to although they resolve to
    loopback, private or link-local addresses (docs/hooks.md)."""
    hooks_timeout_s: float = Field(default=15.0, gt=0, allow_inf_nan=False)
    """The whole of one delivery attempt (resolution, connection, request, response)."""
    hooks_retry_base_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    """The first retry's delay; the Standard Webhooks schedule scales with it."""
    hooks_retry_max_delay_s: float = Field(default=86_400.0, gt=0, allow_inf_nan=False)
    hooks_max_attempts: int = Field(default=10, ge=1, le=1000)
    hooks_concurrency: int = Field(default=16, ge=1, le=1000)
    """Attempts in flight at once per hooks process."""
    hooks_poll_interval_s: float = Field(default=0.5, gt=0, allow_inf_nan=False)
    triggers_poll_interval_s: float = Field(default=0.5, gt=0, allow_inf_nan=False)
    """How often an idle trigger scheduler looks for due triggers (docs/triggers.md)."""
    triggers_lease_ttl_s: float = Field(default=15.0, gt=0, allow_inf_nan=False)
    """How long a scheduler's claim of a trigger lasts if it dies holding it."""
    triggers_min_interval_s: int = Field(default=60, ge=1)
    """The shortest `every` a schedule may have (the API refuses shorter ones)."""
    triggers_max_per_tenant: int = Field(default=100, ge=1, le=100_000)
    service_heartbeat_interval_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    """How often a hooks sender and a trigger scheduler beat their row; the API counts one as
    running while its last beat is within 3 of these (docs/operations.md#readiness)."""
    plugins_enabled: str | None = None
    """Distributions (comma-separated) whose plugins load; unset: every installed one
    (docs/plugins.md)."""
    external_config: Path | None = None
    """The runtime's boot document: the tenant document of tenants with none stored
    (docs/external.md)."""
    tool_notes_file: Path | None = None
    """Where the built-in `note` tool appends its lines (docs/runtime.md); unset: it fails."""
    no_color: str | None = Field(default=None, validation_alias="NO_COLOR")
    """NO_COLOR (no-color.org, no KEEL_ prefix): set and not empty, console logs have no colors."""

    @field_validator("external_config", "tool_notes_file", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower_case_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value
