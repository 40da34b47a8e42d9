"""Topic catalog, record models and JSON Schemas (keel_stream.kafka.admin applies them)."""

from keel_stream.topics.catalog import CATALOG, EVENTS, PARTIALS, SSE, TopicSpec, spec_named
from keel_stream.topics.records import EventRecord, PartialFrame, SseFrame

__all__ = [
    "CATALOG",
    "EVENTS",
    "PARTIALS",
    "SSE",
    "EventRecord",
    "PartialFrame",
    "SseFrame",
    "TopicSpec",
    "spec_named",
]
