"""The Kafka seam's error boundary: aiokafka errors become keel errors, chained, and go no
further (as the store does for the database driver)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from aiokafka import errors as kafka

from keel_stream.errors import BrokerError, BrokerUnavailable, KeelError, TopicMissing

__all__ = [
    "broker_error",
    "idempotence_unsupported",
    "kafka_translated",
    "producer_session_lost",
]

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


def broker_error(action: str, exc: BaseException) -> KeelError:
    """The keel error for a failure of `action` at the broker."""
    if isinstance(exc, KeelError):
        return exc
    if isinstance(exc, kafka.UnknownTopicOrPartitionError):
        return TopicMissing(f"{action}: {exc}")
    retriable = isinstance(exc, _UNAVAILABLE) or bool(getattr(exc, "retriable", False))
    error_class = BrokerUnavailable if retriable else BrokerError
    text = str(exc)
    name = exc.__class__.__name__
    # aiokafka's messages often start with the class name already; say it once.
    return error_class(f"{action}: {text if text.startswith(name) else f'{name}: {text}'}")


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
