"""Kafka's failures (aiokafka's errors are translated in keel_stream.kafka.errors)."""

from __future__ import annotations

from keel_stream.errors.base import KeelError

__all__ = ["BrokerAccessDenied", "BrokerError", "BrokerUnavailable", "TopicMissing"]


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
