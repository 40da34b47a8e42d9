"""A topic's partitions, from a metadata request that names the topics.

Not ``consumer.topics()`` + ``partitions_for_topic()``: on Apache Kafka 4 that pair answers None
for a topic that exists (``topics()`` fills a metadata object of its own, and the all-topics
request differs between protocol versions), so every reader asks the admin client instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition
from aiokafka.partitioner import murmur2

from keel_stream.kafka import clients
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["key_partition", "topic_partitions"]


def key_partition(key: bytes, partitions: int) -> int:
    """The partition index a record key lands in among `partitions`, as the client's default
    partitioner (murmur2, like the Java client's) picks it."""
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


async def topic_partitions(kafka: KafkaSettings, topics: Sequence[str]) -> list[TopicPartition]:
    """Every partition of the named topics that exist, in topic and partition order; a topic
    that does not exist contributes none."""
    async with kafka_translated("describe topics"):
        admin = clients.admin(kafka, "metadata")
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
