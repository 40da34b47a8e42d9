"""Leaving out of a batch the events the topic holds already.

A relay that died between publishing a batch and deleting it from the outbox leaves rows behind
that are on the topic; so does a batch that failed after some of its records were written. The
next publisher reads the topic's tail first (keel_stream.kafka.tail) and this decides, row by
row, what is sent and what is only deleted.

A row is left out when its very (tenant, session, seq) was found, not when a higher seq of its
session was: a row missing from the tail is sent, so no event can be lost from the topic, even
where the topic holds a later event of a session without an earlier one. The tail must reach back
over everything that can have been published and not deleted; what it does not reach is sent
again (a duplicate, which consumers drop by seq), never skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from keel_stream.kafka.tail import SessionKey
from keel_stream.store.outbox import OutboxRow

__all__ = ["PublishedTail", "tail_depth"]


def tail_depth(
    batch_size: int, shards: int, configured: int | None = None, in_flight: int = 1
) -> int:
    """Records to read back per partition: the configured depth, else the batches a relay can
    have in flight, per shard.

    A relay has at most `in_flight` batches published and not deleted (it fetches the next batch
    only while fewer are awaiting their acknowledgements or their delete), and they can all land
    in a single partition. With several shards the other shards' relays write to the same
    partitions meanwhile, so their batches count too.
    """
    if configured is not None:
        return max(0, configured)
    return batch_size * max(1, in_flight) * max(1, shards)


class PublishedTail:
    """The events a topic's tail held when a publisher opened, until each is accounted for."""

    def __init__(self, seqs: Mapping[SessionKey, Iterable[int]] | None = None) -> None:
        self._seqs: dict[SessionKey, set[int]] = {
            key: set(found) for key, found in (seqs or {}).items() if found
        }

    def __len__(self) -> int:
        return sum(len(found) for found in self._seqs.values())

    @property
    def heads(self) -> dict[SessionKey, int]:
        """Per session, the highest seq found."""
        return {key: max(found) for key, found in self._seqs.items()}

    def split(self, rows: Sequence[OutboxRow]) -> tuple[list[OutboxRow], list[OutboxRow]]:
        """(rows the topic holds already, rows to send), each in outbox order.

        Rows found are forgotten: they leave the outbox, so they are never asked about again.
        """
        found: list[OutboxRow] = []
        send: list[OutboxRow] = []
        for row in rows:
            key = (row.tenant, row.session)
            seqs = self._seqs.get(key)
            if seqs is not None and row.seq in seqs:
                found.append(row)
                seqs.discard(row.seq)
                if not seqs:
                    del self._seqs[key]
            else:
                send.append(row)
        return found, send

    def forget(self) -> None:
        """Nothing left to match (the outbox ran empty): drop what was found."""
        self._seqs.clear()
