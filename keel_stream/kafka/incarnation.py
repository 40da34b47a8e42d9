"""Which broker this is, and whether a consumer group is live on it.

A broker's cluster id names its incarnation: the embedded memory-only broker gets a new one at
every start (keel_stream.kafka.broker), and Apache Kafka keeps one for a cluster's life. Offsets
remembered from another cluster id point into topics that no longer exist. aiokafka speaks
metadata versions without topic ids, so the cluster id is what can be compared.

A consumer group is live when the broker reports it Stable with members: its partitions are
assigned, and each member has begun (or is about to begin) fetching from where it resumes.
"""

from __future__ import annotations

from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient

from keel_stream.kafka import clients
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["cluster_id", "group_live"]

_STATE: Final = 2
_MEMBERS: Final = 5
"""Positions in a DescribeGroups response's group entry (error, id, state, type, protocol,
members)."""


async def _admin(kafka: KafkaSettings) -> AIOKafkaAdminClient:
    admin = clients.admin(kafka, "probe")
    try:
        await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


async def cluster_id(kafka: KafkaSettings) -> str:
    """The broker's cluster id ("" when it reports none)."""
    async with kafka_translated("read the cluster id"):
        admin = await _admin(kafka)
        try:
            described: dict[str, Any] = await admin.describe_cluster()
        finally:
            await admin.close()
    return str(described.get("cluster_id") or "")


async def group_live(kafka: KafkaSettings, group: str) -> bool:
    """True when the consumer group is Stable with at least one member."""
    async with kafka_translated(f"describe consumer group {group}"):
        admin = await _admin(kafka)
        try:
            responses = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
    for response in responses:
        for entry in response.groups:
            if entry[1] == group and entry[0] == 0:
                return bool(entry[_STATE] == "Stable" and entry[_MEMBERS])
    return False
