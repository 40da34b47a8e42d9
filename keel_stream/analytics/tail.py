"""`keel-stream tail`: the reference analytics consumer, JSON lines out."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from keel_stream.analytics.dedupe import SeqDeduplicator
from keel_stream.kafka import clients
from keel_stream.kafka.admin import admin_client
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["TailOptions", "tail"]


@dataclass(frozen=True)
class TailOptions:
    """What to read and what to print."""

    kafka: KafkaSettings
    topic: str
    from_beginning: bool = True
    tenant: str | None = None
    kinds: frozenset[str] = frozenset()
    group: str = field(default_factory=lambda: f"keel-tail-{secrets.token_hex(4)}")
    dedupe: bool = True
    limit: int | None = None
    """Stop after printing this many events."""


async def tail(
    options: TailOptions, emit: Callable[[bytes], None], stop: asyncio.Event | None = None
) -> int:
    """Read the topic in a consumer group and emit each matching event as one JSON line."""
    async with admin_client(options.kafka, "tail") as admin:
        if options.topic not in await admin.list_topics():
            raise LookupError(
                f"topic {options.topic} does not exist (run: keel-stream topics apply)"
            )
    consumer = clients.consumer(
        options.kafka,
        "tail",
        options.topic,
        group_id=options.group,
        auto_offset_reset="earliest" if options.from_beginning else "latest",
        enable_auto_commit=True,
        fetch_max_wait_ms=100,
    )
    seen = SeqDeduplicator()
    printed = 0
    await consumer.start()
    try:
        while stop is None or not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    event = EventRecordCodec.decode(record.value)
                    if options.dedupe and not seen.admit(event.tenant, event.session, event.seq):
                        continue
                    if options.tenant is not None and event.tenant != options.tenant:
                        continue
                    if options.kinds and event.kind not in options.kinds:
                        continue
                    emit(orjson.dumps(event.model_dump(mode="json")))
                    printed += 1
                    if options.limit is not None and printed >= options.limit:
                        return printed
    finally:
        await consumer.stop()
    return printed
