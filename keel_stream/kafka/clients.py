"""The one factory of Kafka clients: every producer, consumer and admin client, and the Faust
app's broker settings, are built here from one KafkaSettings (keel_stream.kafka.settings).

A caller names its role (the client id's suffix) and may tune how its client batches, fetches
or waits; where the brokers are and how the client authenticates are the settings' alone.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any, Final, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.helpers import create_ssl_context

from keel_stream.kafka.errors import access_denied
from keel_stream.kafka.settings import CLIENT_LOGGER, KafkaSettings

__all__ = [
    "CLIENT_LOGGER",
    "Admin",
    "Consumer",
    "Producer",
    "TopicPartition",
    "admin",
    "connection",
    "consumer",
    "producer",
    "ssl_context",
]

Producer = AIOKafkaProducer
Consumer = AIOKafkaConsumer
Admin = AIOKafkaAdminClient

_OWNED: Final = frozenset(
    {
        "bootstrap_servers",
        "client_id",
        "security_protocol",
        "ssl_context",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
    }
)
"""Keys a caller's tuning may not set: they are the settings'."""


@functools.cache
def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext:
    """The TLS context of the settings: their CA (or the system's), their client certificate."""
    context: ssl.SSLContext = create_ssl_context(
        cafile=kafka.ssl_cafile,
        certfile=kafka.ssl_certfile,
        keyfile=kafka.ssl_keyfile,
        password=kafka.ssl_key_password,
    )
    return context


def connection(kafka: KafkaSettings, role: str) -> dict[str, Any]:
    """What every client of the settings gets: brokers, id, request timeout, security."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": kafka.bootstrap,
        "client_id": f"{kafka.client_id}-{role}",
        "request_timeout_ms": int(kafka.request_timeout_s * 1000),
        "security_protocol": kafka.security_protocol,
    }
    if kafka.tls:
        kwargs["ssl_context"] = ssl_context(kafka)
    if kafka.sasl:
        kwargs["sasl_mechanism"] = kafka.sasl_mechanism
        kwargs["sasl_plain_username"] = kafka.sasl_username
        kwargs["sasl_plain_password"] = kafka.sasl_password
    return kwargs


def _kwargs(kafka: KafkaSettings, role: str, tuning: dict[str, Any]) -> dict[str, Any]:
    owned = _OWNED & tuning.keys()
    if owned:
        raise TypeError(f"{', '.join(sorted(owned))} come from KafkaSettings, not the caller")
    return connection(kafka, role) | tuning


async def _refusal(kafka: KafkaSettings, role: str) -> BaseException | None:
    """The first broker's refusal of the settings' credentials (or certificate), if it refuses
    them: connect to it once, as the client's bootstrap does."""
    host, _, port = kafka.bootstrap.split(",")[0].strip().rpartition(":")
    kwargs = connection(kafka, role)
    del kwargs["bootstrap_servers"]
    try:
        conn = await create_conn(host, int(port), **kwargs)
    except (KafkaError, OSError, TimeoutError) as exc:
        return exc if access_denied(exc) else None
    conn.close()
    return None


def _reporting_refusals(client: AIOKafkaClient, kafka: KafkaSettings, role: str) -> None:
    """aiokafka 0.14's bootstrap logs a broker's refusal of the credentials and reports only
    that no broker could be reached (KafkaConnectionError, i.e. "unavailable, retry"): a client
    with wrong credentials would retry forever. On that failure, ask the first broker again and
    raise its refusal, which keel_stream.kafka.errors names BrokerAccessDenied."""
    bootstrap = client.bootstrap

    async def bootstrap_or_refusal() -> None:
        try:
            await bootstrap()
        except KafkaConnectionError as exc:
            if (kafka.sasl or kafka.tls) and (refusal := await _refusal(kafka, role)):
                raise refusal from exc
            raise

    client.bootstrap = bootstrap_or_refusal


_Client = TypeVar("_Client", AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient)


def _built(built: _Client, kafka: KafkaSettings, role: str) -> _Client:
    inner = built.client if isinstance(built, AIOKafkaProducer) else built._client
    _reporting_refusals(inner, kafka, role)
    return built


def producer(kafka: KafkaSettings, role: str, **tuning: Any) -> AIOKafkaProducer:
    """A producer (not started) for `role`, tuned by `tuning` (acks, linger_ms, ...)."""
    return _built(AIOKafkaProducer(**_kwargs(kafka, role, tuning)), kafka, role)


def consumer(kafka: KafkaSettings, role: str, *topics: str, **tuning: Any) -> AIOKafkaConsumer:
    """A consumer (not started) for `role`: subscribed to `topics` when given (a group_id in
    `tuning` makes it a group member, with the settings' session timeout), else assigned by
    its caller."""
    session_ms = int(kafka.session_timeout_s * 1000)
    group = {"session_timeout_ms": session_ms, "heartbeat_interval_ms": max(100, session_ms // 3)}
    built = AIOKafkaConsumer(*topics, **(group | _kwargs(kafka, role, tuning)))
    return _built(built, kafka, role)


def admin(kafka: KafkaSettings, role: str, **tuning: Any) -> AIOKafkaAdminClient:
    """An admin client (not started) for `role`."""
    return _built(AIOKafkaAdminClient(**_kwargs(kafka, role, tuning)), kafka, role)
