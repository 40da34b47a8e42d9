"""Outbox → Kafka: the relay and the republish path."""

from keel_stream.relay.relay import Relay, RelayConfig
from keel_stream.relay.republish import republish
from keel_stream.store.outbox import Shard

__all__ = ["Relay", "RelayConfig", "Shard", "republish"]
