"""The Kafka seam: which broker, and how records are keyed and encoded."""

from keel_stream.kafka.broker import EmbeddedBroker, free_port
from keel_stream.kafka.records import EventRecordCodec, record_key

__all__ = ["EmbeddedBroker", "EventRecordCodec", "free_port", "record_key"]
