"""Which subscriptions a hook event goes to, and the delivery row it becomes (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from keel_stream.hooks.derive import Hook
from keel_stream.hooks.envelope import body_of, webhook_id
from keel_stream.store.hooks import NewDelivery, Subscription

__all__ = ["SourceEvent", "committed_at_of", "delivery_for", "matches", "session_matches"]


class SourceEvent(Protocol):
    """An event off the topic (its committedAt the record's text) or from the ledger."""

    @property
    def tenant(self) -> str: ...
    @property
    def session(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def committed_at(self) -> datetime | str: ...


def committed_at_of(event: SourceEvent) -> datetime:
    value = event.committed_at
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def session_matches(subscription: Subscription, session: str) -> bool:
    if subscription.session_ids is not None and session not in subscription.session_ids:
        return False
    prefix = subscription.session_prefix
    return prefix is None or session.startswith(prefix)


def matches(subscription: Subscription, event: SourceEvent, hook: Hook, *, live: bool) -> bool:
    """Whether the subscription takes this hook event. Live (the dispatcher), only events
    committed since the subscription was created: earlier ones are for a replay to send."""
    return (
        subscription.state == "active"
        and subscription.tenant == event.tenant
        and hook.name in subscription.events
        and session_matches(subscription, event.session)
        and (not live or committed_at_of(event) >= subscription.created_at)
    )


def delivery_for(subscription: Subscription, event: SourceEvent, hook: Hook) -> NewDelivery:
    base: dict[str, Any] = {
        "tenant": event.tenant,
        "session": event.session,
        "seq": hook.seq,
        "kind": event.kind,
    }
    return NewDelivery(
        hook_id=subscription.id,
        tenant=event.tenant,
        session=event.session,
        seq=hook.seq,
        hook=hook.name,
        decision_id=hook.decision_id,
        webhook_id=webhook_id(event.tenant, event.session, hook.seq, hook.name, hook.decision_id),
        body=body_of(hook.name, event.committed_at, base, hook.data),
    )
