"""Replay: re-derive a subscription's hook events from the LEDGER (not from Kafka) and queue
them again, with the same webhook ids, from a seq or a time on.

Every session is folded from its first event (the fold needs the whole log to know whether a
turn is open), and the hook events at or past `from_seq` and committed at or after `from_time`
are queued again: written if they were never written, reset to pending with a fresh attempt
budget if they were (delivered and dead ones included). One request folds at most `max_events`
events; a larger replay is refused before anything is queued (narrow it to a session).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from keel_stream.errors import HookDisabled, ReplayTooLarge
from keel_stream.hooks.derive import FoldState, fold_many
from keel_stream.hooks.matching import committed_at_of, delivery_for, matches, session_matches
from keel_stream.store.hooks import HookStore, NewDelivery, Subscription

__all__ = ["MAX_REPLAY_EVENTS", "ReplayReport", "ReplayRequest", "replay"]

MAX_REPLAY_EVENTS: Final = 50_000
_PAGE: Final = 1000
_SESSIONS_PAGE: Final = 500


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    from_seq: int = 1
    from_time: datetime | None = None
    session: str | None = None


@dataclass(frozen=True, slots=True)
class ReplayReport:
    queued: int
    sessions: int
    events: int


async def replay(
    store: HookStore,
    subscription: Subscription,
    request: ReplayRequest,
    max_events: int = MAX_REPLAY_EVENTS,
) -> ReplayReport:
    """Queue the subscription's hook events again (HookDisabled for a disabled one)."""
    if subscription.state != "active":
        raise HookDisabled(f"hook {subscription.id!r} is disabled: {subscription.disabled_reason}")
    rows: list[NewDelivery] = []
    read = 0
    sessions = 0
    async for session, native in _sessions(store, subscription, request.session):
        sessions += 1
        read = await _replay_session(store, subscription, request, session, native, read, rows)
        if read > max_events:
            raise ReplayTooLarge(
                f"the replay folds more than {max_events} events; replay one session at a time"
            )
    await store.queue_again(rows)
    return ReplayReport(queued=len(rows), sessions=sessions, events=read)


async def _replay_session(
    store: HookStore,
    subscription: Subscription,
    request: ReplayRequest,
    session: str,
    native: bool,
    read: int,
    rows: list[NewDelivery],
) -> int:
    state = FoldState()
    after = 0
    while True:
        events = await store.ledger_range(subscription.tenant, session, after, after + _PAGE)
        if not events:
            return read
        read += len(events)
        state, derived = fold_many(state, events, native=native)
        for event, hook in derived:
            if hook.seq < request.from_seq:
                continue
            if request.from_time is not None and committed_at_of(event) < request.from_time:
                continue
            if matches(subscription, event, hook, live=False):
                rows.append(delivery_for(subscription, event, hook))
        after = events[-1].seq
        if len(events) < _PAGE:
            return read


async def _sessions(
    store: HookStore, subscription: Subscription, only: str | None
) -> AsyncIterator[tuple[str, bool]]:
    """The tenant's sessions the subscription takes (only `only`, when given), by id."""
    if only is not None:
        # `only` sorts first among the ids it prefixes: the first row is it, if it exists.
        found = await store.sessions(subscription.tenant, "", only, 1)
        if found and found[0][0] == only and session_matches(subscription, only):
            yield found[0]
        return
    after = ""
    while True:
        page = await store.sessions(
            subscription.tenant, after, subscription.session_prefix, _SESSIONS_PAGE
        )
        for session, native in page:
            if session_matches(subscription, session):
                yield session, native
        if len(page) < _SESSIONS_PAGE:
            return
        after = page[-1][0]
