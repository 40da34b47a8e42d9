"""Relay metrics (Prometheus): backlog, age of the oldest unpublished event, publish latency,
the producer's mode and the events found on the topic already."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "ACTIVE",
    "BACKLOG",
    "CLAIM_CHECKED",
    "FAILURES",
    "IDEMPOTENT",
    "OLDEST_AGE",
    "PUBLISHED",
    "PUBLISH_LATENCY",
    "SKIPPED",
]

BACKLOG: Final = Gauge("keel_relay_backlog_events", "Events in the outbox not yet published")
OLDEST_AGE: Final = Gauge(
    "keel_relay_oldest_unpublished_seconds", "Age of the oldest event not yet published"
)
PUBLISH_LATENCY: Final = Histogram(
    "keel_relay_publish_latency_seconds",
    "From commit to the broker's acknowledgement",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
PUBLISHED: Final = Counter("keel_relay_published_events", "Events the broker acknowledged")
FAILURES: Final = Counter("keel_relay_publish_failures", "Batches the broker did not fully ack")
ACTIVE: Final = Gauge("keel_relay_active", "1 while this process is the active relay of its shard")
SKIPPED: Final = Counter(
    "keel_relay_skipped_events",
    "Outbox rows found on the topic already (published before a crash or a failed batch) and "
    "deleted without being sent again",
)
IDEMPOTENT: Final = Gauge(
    "keel_relay_idempotent_producer",
    "1 while the relay publishes with an idempotent producer, 0 with a plain one",
)
CLAIM_CHECKED: Final = Counter(
    "keel_relay_claim_checked_events",
    "Events the broker refused for what they are (too large, invalid), published as claim checks "
    "in their place: consumers fetch their payloads from the ledger by seq",
)
