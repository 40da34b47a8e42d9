from __future__ import annotations

import pytest
from aiokafka import errors as kafka

from keel_stream.errors import BrokerError, BrokerUnavailable, TopicMissing
from keel_stream.kafka.errors import broker_error, kafka_translated


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (kafka.KafkaConnectionError("no route"), BrokerUnavailable),
        (kafka.KafkaTimeoutError(), BrokerUnavailable),
        (kafka.RequestTimedOutError(), BrokerUnavailable),
        (ConnectionRefusedError(), BrokerUnavailable),
        (kafka.UnknownTopicOrPartitionError(), TopicMissing),
        (kafka.TopicAuthorizationFailedError(), BrokerError),
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
