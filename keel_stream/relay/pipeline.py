"""The batches a relay has handed to its publisher and not yet deleted, oldest first.

The relay fetches and hands over the next batch while earlier ones await their acknowledgements,
and settles them strictly in the order it handed them over: a batch's acknowledged rows count
only once every earlier batch was settled without a failure. After a failure the later batches
are only waited for, and their rows stay in the outbox (whatever of them landed, the next
publisher's tail read finds and deletes).

A batch holds its place in the pipeline from its hand-over until its acknowledged rows are
deleted, so at most `slots` batches are ever published and not deleted: the tail read after a
crash reaches back over all of them (keel_stream.relay.skip.tail_depth). Deletes go with the next
fetch while a backlog drains, else beside the fetches (PipelinedShard.acknowledge_aside), one at
a time, each taking every row acknowledged since the last.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from keel_stream.relay.publisher import PublishResult
from keel_stream.store.outbox import OutboxRow

__all__ = ["InFlight", "Pipeline"]


@dataclass(frozen=True, slots=True)
class InFlight:
    """One batch handed to the publisher: its rows, the claim check's details when it is a
    refused row's stand-in, and the publishing."""

    rows: list[OutboxRow]
    claim_check: dict[str, Any] | None
    publishing: asyncio.Task[PublishResult]


class Pipeline:
    """Batches in flight, oldest first; then batches settled whose rows are being deleted."""

    def __init__(self) -> None:
        self._batches: deque[InFlight] = deque()
        self._ids: set[int] = set()
        self._acknowledged: list[int] = []
        self._settled = 0  # batches settled whose acknowledged rows are not being deleted yet
        self._deleting: tuple[int, set[int]] = (0, set())  # batches, rows
        self._delete: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Batches in flight."""
        return len(self._batches)

    @property
    def slots(self) -> int:
        """Batches handed over and not deleted yet: in flight, settled, or being deleted."""
        return len(self._batches) + self._settled + self._deleting[0]

    def slots_after(self, *, delete: bool) -> int:
        """`slots`, once the settled batches' rows were deleted when `delete` (by a statement
        that ends before anything else is handed over)."""
        return self.slots - self._settled if delete else self.slots

    @property
    def ids(self) -> list[int]:
        """The outbox ids of every row handed over and not deleted yet."""
        return [*self._ids, *self._acknowledged, *self._deleting[1]]

    @property
    def oldest_settled(self) -> bool:
        return bool(self._batches) and self._batches[0].publishing.done()

    def add(
        self,
        rows: list[OutboxRow],
        claim_check: dict[str, Any] | None,
        publishing: Coroutine[Any, Any, PublishResult],
    ) -> None:
        """Start publishing a batch (its records are queued after every earlier batch's)."""
        task = asyncio.create_task(publishing)
        self._batches.append(InFlight(rows, claim_check, task))
        self._ids.update(r.id for r in rows)

    async def settle_oldest(self) -> tuple[InFlight, PublishResult]:
        """The oldest batch, once its publisher has its outcome; it keeps its place until
        `delete_later` was told which of its rows were acknowledged and they were deleted."""
        batch = self._batches[0]
        result = await asyncio.shield(batch.publishing)
        self._batches.popleft()
        self._ids.difference_update(r.id for r in batch.rows)
        return batch, result

    def delete_later(self, rows: list[OutboxRow]) -> None:
        """The acknowledged rows of the batch just settled: to be deleted (none: its place is
        free at once)."""
        if rows:
            self._acknowledged.extend(r.id for r in rows)
            self._settled += 1

    def to_delete(self) -> list[int]:
        """Every acknowledged row not being deleted yet, handed over (for a delete the caller
        runs and awaits itself, and no delete is running)."""
        ids, self._acknowledged, self._settled = self._acknowledged, [], 0
        return ids

    def delete_aside(self, delete: Callable[[Sequence[int]], Awaitable[None]]) -> None:
        """Start deleting every acknowledged row, unless a delete runs already (the next one
        takes what was acknowledged meanwhile)."""
        self.reap()
        if self._delete is None and self._acknowledged:
            batches = self._settled
            ids = self.to_delete()
            self._deleting = (batches, set(ids))
            self._delete = asyncio.ensure_future(delete(ids))

    def reap(self) -> None:
        """Free the places of the batches deleted; raises what the delete raised."""
        if self._delete is not None and self._delete.done():
            task, self._delete = self._delete, None
            self._deleting = (0, set())
            task.result()

    async def wait(self, wake: asyncio.Event | None) -> None:
        """Until the oldest batch in flight is settled, a delete ended, or `wake` is set."""
        waiting: list[asyncio.Future[Any]] = [self._batches[0].publishing] if self._batches else []
        if self._delete is not None:
            waiting.append(self._delete)
        woken: asyncio.Future[Any] | None = None
        if wake is not None:
            if wake.is_set():
                return
            woken = asyncio.ensure_future(wake.wait())
            waiting.append(woken)
        if not waiting:
            return
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if woken is not None:
                woken.cancel()

    async def deleted(self) -> None:
        """Wait for the delete running, if one is (raises what it raised)."""
        if self._delete is not None:
            await asyncio.wait([self._delete])
        self.reap()

    async def abandon(self) -> None:
        """Wait for every batch still in flight and forget them: their rows stay in the
        outbox."""
        tasks = [b.publishing for b in self._batches]
        self._batches.clear()
        self._ids.clear()
        if tasks:
            await asyncio.wait(tasks)
            for task in tasks:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    task.result()  # what a batch after the failure met does not matter

    def cancel(self) -> None:
        """Stop publishing and deleting (the relay is going away): the rows stay in the outbox
        (the next relay's tail read finds those that were published)."""
        for batch in self._batches:
            batch.publishing.cancel()
        if self._delete is not None:
            self._delete.cancel()
        self._batches.clear()
        self._ids.clear()
        self.to_delete()
        self._deleting = (0, set())
        self._delete = None
