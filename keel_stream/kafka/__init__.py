"""The Kafka seam: which broker, and how records are keyed and encoded."""

from keel_stream.kafka.broker import Broker, EmbeddedBroker, free_port
from keel_stream.kafka.records import EventRecordCodec, record_key

__all__ = ["Broker", "EmbeddedBroker", "EventRecordCodec", "free_port", "record_key"]
