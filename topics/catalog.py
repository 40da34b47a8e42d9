"""The topic catalog: every topic keel-stream writes, with its key, retention, record size limit
and record model.

`max_message_bytes` is the one source of truth for how large a record may be: `topics apply`
creates each topic with it as `max.message.bytes` (and reports an existing topic that differs as
drift), and the relay's producer refuses anything larger before it reaches the broker
(`max_request_size`). It is Kafka's own default, so a topic created before the catalog named it
shows no drift. The kernel's event limit (keel_stream.kernel.limits.MAX_EVENT_BYTES, 512 KiB) is
half of it: an accepted event fits in a record of every topic, envelope, headers and SSE frame
included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel

from keel_stream.topics.records import EventRecord, PartialFrame, SseFrame

__all__ = [
    "CATALOG",
    "EVENTS",
    "PARTIALS",
    "RECORD_MAX_BYTES",
    "SSE",
    "TopicSpec",
    "spec_named",
]

FOREVER: Final = -1
HOUR_MS: Final = 3_600_000
MINUTE_MS: Final = 60_000
RECORD_MAX_BYTES: Final = 1_048_588
"""The largest record batch a topic takes (`max.message.bytes`): Kafka's default, 1 MiB + 12."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic: what it holds and how the broker must keep it."""

    name: str
    partitions: int
    key: str
    cleanup_policy: str
    retention_ms: int
    purpose: str
    value_model: type[BaseModel]
    max_message_bytes: int = RECORD_MAX_BYTES
    """The largest record (batch) the topic takes; producers of the topic refuse larger ones."""

    def full_name(self, prefix: str = "") -> str:
        """The name on the broker: the deployment's prefix, then the catalog name."""
        return f"{prefix}{self.name}"

    def configs(self) -> dict[str, str]:
        """Topic configs that apply sets and checks for drift."""
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            "max.message.bytes": str(self.max_message_bytes),
        }


EVENTS: Final = TopicSpec(
    name="keel.events.v1",
    partitions=6,
    key="tenant/session",
    cleanup_policy="delete",
    retention_ms=FOREVER,
    purpose="every ledger event, as committed; the replay source",
    value_model=EventRecord,
)
SSE: Final = TopicSpec(
    name="keel.sse.v1",
    partitions=6,
    key="tenant/session",
    cleanup_policy="delete",
    retention_ms=6 * HOUR_MS,
    purpose="SSE frames rendered by the sse projection",
    value_model=SseFrame,
)
PARTIALS: Final = TopicSpec(
    name="keel.partials.v1",
    partitions=6,
    key="tenant/session",
    cleanup_policy="delete",
    retention_ms=10 * MINUTE_MS,
    purpose="token-level partial frames, never in the ledger",
    value_model=PartialFrame,
)

CATALOG: Final = (EVENTS, SSE, PARTIALS)


def spec_named(name: str) -> TopicSpec:
    """The catalog entry for a catalog name (without prefix)."""
    for spec in CATALOG:
        if spec.name == name:
            return spec
    raise KeyError(name)
