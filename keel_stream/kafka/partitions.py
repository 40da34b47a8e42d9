"""A topic's partitions, from a metadata request that names the topics.

Not ``consumer.topics()`` + ``partitions_for_topic()``: on Apache Kafka 4 that pair answers None
for a topic that exists (``topics()`` fills a metadata object of its own, and the all-topics
request differs between protocol versions), so every reader asks the admin client instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from keel_stream.kafka.errors import kafka_translated

__all__ = ["topic_partitions"]


async def topic_partitions(bootstrap: str, topics: Sequence[str]) -> list[TopicPartition]:
    """Every partition of the named topics that exist, in topic and partition order; a topic
    that does not exist contributes none."""
    async with kafka_translated("describe topics"):
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            await admin.start()
            described = await admin.describe_topics(list(topics))
        finally:
            await admin.close()
    found = {
        str(t["topic"]): sorted(int(p["partition"]) for p in t["partitions"])
        for t in described
        if t["error_code"] == 0
    }
    return [TopicPartition(topic, n) for topic in topics for n in found.get(topic, [])]
