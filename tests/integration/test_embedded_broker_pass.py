"""The lean embedded-broker pass: `keel-stream dev`'s default broker stays covered while the rest
of the suite runs on Apache Kafka (wherever Java and Maven exist).

The module's own `kafka` fixture (the embedded broker, whatever the ladder chose for the rest)
overrides the session one for the tests imported here, so each runs a second time on it. When
the whole run already uses the embedded broker, they run twice on it: cheap, and still true.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.test_projections import (
    test_2000_events_fold_into_models_equal_to_the_ledger as test_embedded_projection_equals_ledger,
)
from tests.integration.test_relay import (
    test_5000_events_over_50_sessions_reach_the_topic_in_order as test_embedded_relay_in_order,
)
from tests.integration.test_relay_exactly_once import (
    test_relays_killed_under_load_leave_every_event_on_the_topic_exactly_once as test_embedded_exactly_once,  # noqa: E501
)
from tests.support.kafka import KafkaServer, embedded_kafka

__all__ = [
    "test_embedded_exactly_once",
    "test_embedded_projection_equals_ledger",
    "test_embedded_relay_in_order",
]


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaServer]:
    with embedded_kafka(" (the lean embedded pass)") as server:
        yield server
