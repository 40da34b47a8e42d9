"""How every Kafka client of a process connects: one `KafkaSettings`, built once from the
KEEL_KAFKA_* settings at the process's edge and passed in (keel_stream.kafka.clients builds
every producer, consumer, admin client and the Faust app's broker settings from it).

Security follows Kafka's own vocabulary: `security_protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or
SASL_SSL; a SASL mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with a username and password;
for TLS a CA file (the system's trust store when unset) and, for mutual TLS, a client
certificate and key. docs/operations.md#kafka-security lists the variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from keel_stream.errors import InvalidSetting, MissingKafkaBootstrap
from keel_stream.settings import KeelSettings, SaslMechanism, SecurityProtocol, env_var

__all__ = [
    "CLIENT_LOGGER",
    "KafkaSettings",
    "SaslMechanism",
    "SecurityProtocol",
    "kafka_settings",
]

CLIENT_LOGGER: Final = "aiokafka"
"""The standard-library logger the Kafka client writes to."""

_TLS: Final = frozenset({"SSL", "SASL_SSL"})
_SASL: Final = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """Where the brokers are and how to talk to them; the same for every client of a process."""

    bootstrap: str
    client_id: str = "keel"
    """Each client's id is this and its role (keel-relay, keel-hooks...): quotas and ACLs of a
    shared cluster can name them."""
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: Path | None = None
    """The CA bundle the brokers' certificates are checked against; None: the system's."""
    ssl_certfile: Path | None = None
    """A client certificate (PEM), for brokers that authenticate clients by TLS."""
    ssl_keyfile: Path | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    idempotence: bool = True
    """Whether the relay asks for an idempotent producer (it falls back to a plain one on a
    broker that has no producer ids); false where the principal lacks IDEMPOTENT_WRITE."""
    replication_factor: int = 1
    """Replicas of each topic the catalog's apply creates (3 on a three-broker cluster)."""
    min_insync_replicas: int | None = None
    """min.insync.replicas of each topic the catalog's apply creates; None: the broker's."""
    request_timeout_s: float = 10.0
    session_timeout_s: float = 10.0
    """A consumer group member silent this long is taken out of the group."""

    def __post_init__(self) -> None:
        if not self.bootstrap.strip():
            raise MissingKafkaBootstrap(f"set {env_var('kafka_bootstrap')} to the brokers")
        if self.security_protocol in _SASL and not (self.sasl_username and self.sasl_password):
            raise InvalidSetting(
                f"{env_var('kafka_security_protocol')}={self.security_protocol} needs "
                f"{env_var('kafka_sasl_username')} and {env_var('kafka_sasl_password')}"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise InvalidSetting(
                f"{env_var('kafka_ssl_certfile')} and {env_var('kafka_ssl_keyfile')} go together"
            )
        if self.security_protocol not in _TLS and self._tls_files():
            raise InvalidSetting(
                f"TLS files are set but {env_var('kafka_security_protocol')} is "
                f"{self.security_protocol} (SSL or SASL_SSL uses them)"
            )
        if self.min_insync_replicas is not None and not (
            1 <= self.min_insync_replicas <= self.replication_factor
        ):
            raise InvalidSetting(
                f"{env_var('kafka_min_insync_replicas')} must be between 1 and "
                f"{env_var('kafka_replication_factor')} ({self.replication_factor})"
            )
        if self.request_timeout_s <= 0 or self.session_timeout_s <= 0:
            raise InvalidSetting("Kafka timeouts must be positive")

    def _tls_files(self) -> bool:
        return any(f is not None for f in (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile))

    @property
    def tls(self) -> bool:
        return self.security_protocol in _TLS

    @property
    def sasl(self) -> bool:
        return self.security_protocol in _SASL

    def at(self, bootstrap: str) -> KafkaSettings:
        """The same settings for other brokers."""
        return replace(self, bootstrap=bootstrap)


def kafka_settings(settings: KeelSettings, bootstrap: str | None = None) -> KafkaSettings:
    """The Kafka settings of a process, from its KEEL_* settings; `bootstrap` stands in for
    KEEL_KAFKA_BOOTSTRAP (a broker the process started itself)."""
    servers = bootstrap or settings.kafka_bootstrap
    if not servers:
        raise MissingKafkaBootstrap(
            f"set {env_var('kafka_bootstrap')} or --bootstrap (or start `keel-stream dev`)"
        )
    return KafkaSettings(
        bootstrap=servers,
        client_id=settings.kafka_client_id,
        security_protocol=settings.kafka_security_protocol,
        sasl_mechanism=settings.kafka_sasl_mechanism,
        sasl_username=settings.kafka_sasl_username,
        sasl_password=settings.kafka_sasl_password,
        ssl_cafile=settings.kafka_ssl_cafile,
        ssl_certfile=settings.kafka_ssl_certfile,
        ssl_keyfile=settings.kafka_ssl_keyfile,
        ssl_key_password=settings.kafka_ssl_key_password,
        idempotence=settings.kafka_idempotence,
        replication_factor=settings.kafka_replication_factor,
        min_insync_replicas=settings.kafka_min_insync_replicas,
        request_timeout_s=settings.kafka_request_timeout_s,
        session_timeout_s=settings.kafka_session_timeout_s,
    )
