"""The Kafka seam's error boundary: aiokafka errors become keel errors, chained, and go no
further (as the store does for the database driver)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from aiokafka import errors as kafka

from keel_stream.errors import (
    BrokerAccessDenied,
    BrokerError,
    BrokerUnavailable,
    KeelError,
    TopicMissing,
)

__all__ = [
    "KafkaClientError",
    "access_denied",
    "broker_error",
    "client_failure",
    "idempotence_unsupported",
    "kafka_translated",
    "producer_session_lost",
    "record_refusal",
    "transient",
]

KafkaClientError = kafka.KafkaError
"""The root of the Kafka client's own errors."""

_DENIED: Final = (
    ssl.SSLCertVerificationError,  # an OSError: without this it would pass for the broker away
    kafka.SaslAuthenticationFailed,
    kafka.AuthenticationFailedError,
    kafka.AuthenticationMethodNotSupported,
    kafka.UnsupportedSaslMechanismError,
    kafka.IllegalSaslStateError,
    kafka.TransactionalIdAuthorizationFailed,
    kafka.TopicAuthorizationFailedError,
    kafka.GroupAuthorizationFailedError,
    kafka.ClusterAuthorizationFailedError,
)

_UNAVAILABLE: Final = (
    OSError,
    TimeoutError,
    kafka.KafkaConnectionError,
    kafka.KafkaTimeoutError,
    kafka.NodeNotReadyError,
    kafka.RequestTimedOutError,
    kafka.KafkaUnavailableError,
    kafka.BrokerNotAvailableError,
    kafka.LeaderNotAvailableError,
    kafka.NotLeaderForPartitionError,
    kafka.CoordinatorNotAvailableError,
)


def access_denied(exc: BaseException) -> bool:
    """Whether the broker refused the client's credentials, certificate or rights."""
    return isinstance(exc, _DENIED)


def broker_error(action: str, exc: BaseException) -> KeelError:
    """The keel error for a failure of `action` at the broker."""
    if isinstance(exc, KeelError):
        return exc
    if isinstance(exc, kafka.UnknownTopicOrPartitionError):
        return TopicMissing(f"{action}: {exc}")
    if isinstance(exc, _DENIED):
        return BrokerAccessDenied(f"{action}: {_named(exc)}")
    retriable = isinstance(exc, _UNAVAILABLE) or bool(getattr(exc, "retriable", False))
    error_class = BrokerUnavailable if retriable else BrokerError
    return error_class(f"{action}: {_named(exc)}")


def _named(exc: BaseException) -> str:
    text, name = str(exc), exc.__class__.__name__
    # aiokafka's messages often start with the class name already; say it once.
    return text if text.startswith(name) else f"{name}: {text}"


@asynccontextmanager
async def kafka_translated(action: str) -> AsyncIterator[None]:
    """Run a broker action; any client failure leaves as a BrokerError."""
    try:
        yield
    except KeelError:
        raise
    except (kafka.KafkaError, OSError, TimeoutError) as exc:
        raise broker_error(action, exc) from exc


_IDEMPOTENCE_UNSUPPORTED: Final = (
    kafka.UnknownError,  # what a broker that advertises InitProducerId but lacks it may answer
    kafka.UnsupportedVersionError,
    kafka.IncompatibleBrokerVersion,
    kafka.UnsupportedForMessageFormatError,
    kafka.ClusterAuthorizationFailedError,  # brokers before 2.8 want the IDEMPOTENT_WRITE ACL
    NotImplementedError,  # the client lacks every InitProducerId version the broker accepts
)

_PRODUCER_SESSION_LOST: Final = (
    kafka.OutOfOrderSequenceNumber,
    kafka.InvalidProducerEpoch,
    kafka.ProducerFenced,
    kafka.UnknownProducerId,
    kafka.InvalidProducerIdMapping,
)


def idempotence_unsupported(exc: BaseException) -> bool:
    """True when starting an idempotent producer failed because this broker (or this client
    against it) does not offer producer ids: a plain producer is the way to go on."""
    return isinstance(exc, _IDEMPOTENCE_UNSUPPORTED)


def producer_session_lost(exc: BaseException) -> bool:
    """True for a failure of the idempotent producer's session (its producer id, epoch or
    sequence numbers) that a new producer, with a new producer id, does not have."""
    return isinstance(exc, _PRODUCER_SESSION_LOST)


def transient(exc: BaseException) -> bool:
    """True for a failure of the Kafka client (or the connection under it) that may pass when
    tried again later, the way broker_error classifies it; also a lost producer session, which
    a new producer does not inherit."""
    if producer_session_lost(exc):
        return True
    if isinstance(exc, kafka.KafkaError | ConnectionError | TimeoutError):
        return broker_error("classify", exc).retriable
    return False


def client_failure(exc: BaseException) -> bool:
    """True for an error the Kafka client raised (not one of the caller's own)."""
    return isinstance(exc, kafka.KafkaError)


_TOO_LARGE: Final = (
    kafka.MessageSizeTooLargeError,
    kafka.RecordListTooLargeError,
    kafka.RecordTooLargeError,
)
_INVALID: Final = (kafka.CorruptRecordException, kafka.UnknownError)
"""INVALID_RECORD (87) reaches the client as an UnknownError."""


def record_refusal(exc: BaseException) -> str | None:
    """Why the broker (or the producer) refused one record for what it is: too_large or
    refused; None when the failure is not about the record."""
    if isinstance(exc, _TOO_LARGE):
        return "too_large"
    if isinstance(exc, _INVALID):
        return "refused"
    return None
