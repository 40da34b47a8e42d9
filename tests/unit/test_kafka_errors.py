from __future__ import annotations

import ssl

import pytest
from aiokafka import errors as kafka

from keel_stream.errors import BrokerAccessDenied, BrokerError, BrokerUnavailable, TopicMissing
from keel_stream.kafka.errors import broker_error, kafka_translated


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (kafka.KafkaConnectionError("no route"), BrokerUnavailable),
        (kafka.KafkaTimeoutError(), BrokerUnavailable),
        (kafka.RequestTimedOutError(), BrokerUnavailable),
        (ConnectionRefusedError(), BrokerUnavailable),
        (kafka.UnknownTopicOrPartitionError(), TopicMissing),
        (kafka.TopicAuthorizationFailedError(), BrokerAccessDenied),
        (kafka.GroupAuthorizationFailedError(), BrokerAccessDenied),
        (kafka.SaslAuthenticationFailed("bad password"), BrokerAccessDenied),
        (ssl.SSLCertVerificationError("unknown ca"), BrokerAccessDenied),
        (kafka.MessageSizeTooLargeError(), BrokerError),
    ],
)
def test_client_errors_map_onto_the_tree(raised: Exception, expected: type[BrokerError]) -> None:
    error = broker_error("publish", raised)
    assert type(error) is expected
    assert error.retriable is (expected is BrokerUnavailable)
    assert error.message.startswith("publish: ")


async def test_the_seam_chains_the_cause() -> None:
    cause = kafka.KafkaConnectionError("down")
    with pytest.raises(BrokerUnavailable) as info:
        async with kafka_translated("connect"):
            raise cause
    assert info.value.__cause__ is cause
    assert info.value.code == "broker_unavailable"


def test_refused_credentials_are_access_denied_not_a_broker_away() -> None:
    """A TLS certificate the client does not trust is an OSError, and a refused SASL login a
    client error: both used to pass for the broker unreachable (retried for minutes) or a
    generic broker error. Retrying cannot help until the settings change."""
    for raised in (ssl.SSLCertVerificationError("unknown ca"), kafka.SaslAuthenticationFailed()):
        error = broker_error("connect", raised)
        assert type(error) is BrokerAccessDenied
        assert not error.retriable
        assert error.code == "broker_access_denied"
