"""The hooks dispatcher: a consumer group on keel.events.v1 that folds each session's events
(keel_stream.hooks.derive) and writes one delivery row per matching (subscription, hook event).

Per batch, one PostgreSQL transaction locks the sessions' folds, folds the events past each
fold's last seq (a record at or below it is a duplicate; a gap or a claim check is read from
the ledger, as the projector does), writes the deliveries and the new folds; only then are the
offsets committed. A batch redelivered after a crash therefore writes nothing twice. The
dispatcher never calls an endpoint: senders do, so no endpoint can slow the topic down, and
nothing here is in a worker's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

from keel_stream.errors import BrokerError, KeelError, TopicMissing
from keel_stream.hooks.derive import FoldState, fold_many
from keel_stream.hooks.matching import delivery_for, matches
from keel_stream.hooks.metrics import DISPATCHED, GAP_FILLED
from keel_stream.kafka import clients
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.logs import get_logger
from keel_stream.projector.events import SourceEvent, SourceRecord, Undecodable, decode, gather
from keel_stream.retry import Backoff
from keel_stream.store.hooks import NewDelivery
from keel_stream.store.hooks_dispatch import DispatchTransaction, HookDispatchStore

__all__ = ["Dispatcher"]

Key = tuple[str, str]
_POLL_MS: Final = 500


class Dispatcher:
    def __init__(
        self,
        store: HookDispatchStore,
        kafka: KafkaSettings,
        topic: str,
        group: str,
        *,
        batch_size: int = 500,
        wake: asyncio.Event | None = None,
    ) -> None:
        self._store = store
        self._kafka = kafka
        self._topic = topic
        self._group = group
        self._batch_size = batch_size
        self._wake = wake
        self._log = get_logger("hooks")

    async def apply(self, records: Sequence[SourceRecord | Undecodable]) -> int:
        """Fold a batch and write its deliveries; how many rows it asked to write."""
        by_session: dict[Key, list[SourceEvent]] = defaultdict(list)
        for record in records:
            if isinstance(record, Undecodable):
                # Its event is in the ledger: the session's next record finds the gap.
                self._log.warning("hooks: undecodable record passed over", error=record.error)
                continue
            by_session[record.event.key].append(record.event)
        if not by_session:
            return 0
        async with self._store.transaction() as tx:
            rows = await self._apply(tx, by_session)
        DISPATCHED.inc(len(rows))
        if rows and self._wake is not None:
            self._wake.set()
        return len(rows)

    async def _apply(
        self, tx: DispatchTransaction, by_session: dict[Key, list[SourceEvent]]
    ) -> list[NewDelivery]:
        folds = await tx.lock_folds(by_session)
        subscriptions = await tx.subscriptions(tenant for tenant, _ in by_session)
        rows: list[NewDelivery] = []
        written: dict[Key, tuple[int, dict[str, Any]]] = {}
        for key in sorted(by_session):
            stored = folds[key]
            run, filled = await gather(tx, stored.last_seq, key, by_session[key])
            GAP_FILLED.inc(filled)
            if not run:
                continue
            state, derived = fold_many(FoldState.load(stored.state), run, native=stored.native)
            written[key] = (run[-1].seq, state.dump())
            for event, hook in derived:
                rows.extend(
                    delivery_for(s, event, hook)
                    for s in subscriptions
                    if matches(s, event, hook, live=True)
                )
        await tx.insert_deliveries(rows)
        if written:
            await tx.write_folds(written)
        return rows

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until stop is set; the broker or the database away: back off, go on."""
        backoff = Backoff(0.5, 10.0)
        while not stop.is_set():
            try:
                await self._consume(stop, backoff)
            except asyncio.CancelledError:
                raise
            except (KeelError, OSError) as exc:
                # A commit refused by a rebalance is a BrokerError too: consume again.
                again = not isinstance(exc, KeelError) or exc.retriable
                if not (again or isinstance(exc, BrokerError)):
                    raise
                self._log.warning("hooks dispatcher: retrying", error=repr(exc))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff.next_delay())

    async def _consume(self, stop: asyncio.Event, backoff: Backoff) -> None:
        if not await topic_partitions(self._kafka, [self._topic]):
            raise TopicMissing(f"{self._topic} does not exist yet (keel-stream topics apply)")
        consumer = clients.consumer(
            self._kafka,
            "hooks",
            self._topic,
            group_id=self._group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        try:
            async with kafka_translated("hooks: consume keel.events.v1"):
                await consumer.start()
                while not stop.is_set():
                    batches = await consumer.getmany(
                        timeout_ms=_POLL_MS, max_records=self._batch_size
                    )
                    records = [
                        decode(r.value, tp.partition, r.offset)
                        for tp, batch in batches.items()
                        for r in batch
                        if r.value is not None
                    ]
                    if records:
                        await self.apply(records)
                        await consumer.commit()
                    backoff.reset()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 5)
