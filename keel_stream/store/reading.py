"""Reading a session's whole log through the Ledger protocol, page by page."""

from __future__ import annotations

from keel_stream.kernel import Event
from keel_stream.store.protocol import MAX_READ_LIMIT, Ledger

__all__ = ["whole_log"]


async def whole_log(ledger: Ledger, tenant: str, session: str, after: int = 0) -> list[Event]:
    """Every event of the session after `after`, in seq order."""
    events: list[Event] = []
    while True:
        page = await ledger.read_events(tenant, session, after=after, limit=MAX_READ_LIMIT)
        events.extend(page)
        if len(page) < MAX_READ_LIMIT:
            return events
        after = page[-1].seq
