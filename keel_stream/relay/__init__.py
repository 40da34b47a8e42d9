"""Outbox → Kafka: the relay (the republish path is the Outbox port's `republish`)."""

from keel_stream.relay.relay import Relay, RelayConfig
from keel_stream.store.outbox import Shard

__all__ = ["Relay", "RelayConfig", "Shard"]
