"""Topic catalog, record models and JSON Schemas; `topics.admin` applies them to a broker."""

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
