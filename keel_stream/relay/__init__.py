"""Outbox → Kafka: the relay and the republish path."""

from keel_stream.relay.outbox import Shard
from keel_stream.relay.relay import Relay, RelayConfig
from keel_stream.relay.republish import republish

__all__ = ["Relay", "RelayConfig", "Shard", "republish"]
