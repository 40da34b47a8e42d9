"""Bringing the read models' stored offsets and the topics back in line with the broker at start.

The embedded broker keeps nothing across a restart, while PostgreSQL keeps the ledger, the read
models and the source offsets stored with them. At every start, before the projections worker
runs, dev therefore:

- compares the broker's cluster id with the one recorded in <data_dir>/dev.kafka.json (the
  incarnation the stored offsets point into); when it differs, or the events topic was just
  created (so it is empty), the stored offsets of the events topic are reset: the worker starts
  over at offset zero and drops by seq what its states already include;
- when the events topic was just created, republishes the ledger into it (the path of
  `keel-stream republish`; the relay publishes what it enqueues), so the topic again holds
  what the ledger holds;
- records the cluster id once both are done (a start that dies halfway does them again).

dev does the same when it restarts a broker that died (`realign`, with the catalog applied
first); a memory-only broker comes back empty, so its events topic is refilled even when a client
recreated it before dev could.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.incarnation import cluster_id
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.store.backend import Database
from keel_stream.store.outbox import RepublishReport
from keel_stream.topics.catalog import EVENTS

__all__ = ["INCARNATION_FILE", "Resumed", "align_with_broker", "needs_reset", "realign"]

INCARNATION_FILE: Final = "dev.kafka.json"


@dataclass(frozen=True, slots=True)
class Resumed:
    """What the start-up alignment did."""

    cluster_id: str
    offsets_reset: int | None
    """Partition offsets forgotten; None when the stored offsets were kept."""
    republished: RepublishReport | None
    """None when the events topic already existed."""

    def summary(self) -> str:
        parts = [f"cluster {self.cluster_id or '(no id)'}"]
        if self.offsets_reset is not None:
            parts.append(f"stored offsets reset ({self.offsets_reset} partitions)")
        if self.republished is not None:
            parts.append(
                f"republished {self.republished.events} events of "
                f"{self.republished.sessions} sessions"
            )
        return "; ".join(parts)


def needs_reset(recorded: str | None, current: str, *, topic_created: bool) -> bool:
    """Stored offsets are stale when the broker is another incarnation or the topic is new."""
    return topic_created or recorded != current


def _recorded(data_dir: Path) -> str | None:
    try:
        value = json.loads((data_dir / INCARNATION_FILE).read_text()).get("cluster_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _record(data_dir: Path, current: str) -> None:
    path = data_dir / INCARNATION_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"cluster_id": current}))
    temporary.replace(path)


async def align_with_broker(
    store: Database,
    kafka: KafkaSettings,
    prefix: str,
    created: Sequence[str],
    data_dir: Path,
    *,
    emptied: bool = False,
) -> Resumed:
    """Reset stale stored offsets and refill a new events topic (see the module); created are
    the topics apply_catalog just created, emptied says the broker is known to have lost its
    data. Run before any projections worker starts."""
    source = EVENTS.full_name(prefix)
    topic_created = emptied or source in created
    current = await cluster_id(kafka)
    reset = None
    if needs_reset(_recorded(data_dir), current, topic_created=topic_created):
        reset = await store.admin().reset_offsets([source])
    republished = await store.outbox().republish() if topic_created else None
    _record(data_dir, current)
    return Resumed(current, reset, republished)


async def realign(
    store: Database, kafka: KafkaSettings, prefix: str, data_dir: Path, *, emptied: bool
) -> tuple[Resumed, list[str]]:
    """After a broker restart, with no projections worker or relay running: apply the topic
    catalog, then align (align_with_broker); return what was done and the catalog's drift."""
    async with kafka_translated("apply topics"):
        topics = await apply_catalog(kafka, prefix)
    resumed = await align_with_broker(
        store, kafka, prefix, topics.created, data_dir, emptied=emptied
    )
    return resumed, topics.drift
