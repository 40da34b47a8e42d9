"""The `trigger.before` / `trigger.after` hook events of a firing, as delivery rows (pure).

A firing's decision and outcome are facts of the firings table (a skip commits nothing to a
session), so their delivery rows are written in the transaction that records them. The row's
seq is the firing id and its decision id `trigger:{id}:{key}`, so the hooks' unique key holds
one row per (subscription, firing, hook); the webhook-id is derived from (tenant, trigger, key,
hook) and is the same whenever the row is written again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from keel_stream.hooks.envelope import body_of, webhook_id
from keel_stream.hooks.matching import session_matches
from keel_stream.store.hooks import NewDelivery, Subscription

__all__ = ["AFTER", "BEFORE", "hook_rows"]

BEFORE: Final = "trigger.before"
AFTER: Final = "trigger.after"


def hook_rows(
    subscriptions: Iterable[Subscription],
    hook: str,
    *,
    tenant: str,
    trigger_id: str,
    session: str,
    firing_id: int,
    key: str,
    at: datetime,
    data: Mapping[str, Any],
) -> list[NewDelivery]:
    """One row per active subscription of the tenant that takes `hook` for this session."""
    decision_id = f"trigger:{trigger_id}:{key}"
    base = {"tenant": tenant, "trigger": trigger_id, "session": session, "firingId": firing_id}
    rows = []
    for subscription in subscriptions:
        if (
            subscription.state != "active"
            or subscription.tenant != tenant
            or hook not in subscription.events
            or not session_matches(subscription, session)
        ):
            continue
        rows.append(
            NewDelivery(
                hook_id=subscription.id,
                tenant=tenant,
                session=session,
                seq=firing_id,
                hook=hook,
                decision_id=decision_id,
                webhook_id=webhook_id(tenant, f"trigger:{trigger_id}", 0, hook, key),
                body=body_of(hook, at, base, data),
            )
        )
    return rows
