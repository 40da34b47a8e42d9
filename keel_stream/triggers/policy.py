"""What a firing does (pure): the overlap decision, the keys, the session, the message."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from keel_stream.triggers.schedule import iso

__all__ = [
    "BUSY_STATUSES",
    "Plan",
    "decide",
    "expansion_bound",
    "message_payload",
    "new_session_id",
    "render",
    "request_id",
]

BUSY_STATUSES: Final = frozenset({"running", "pending"})
"""A target whose run row is in one of these still has an attempt running or owed."""
EXECUTES: Final = frozenset({"fire", "cancel_other", "buffer"})
"""Decisions that end in a commit (a buffered one once the target is idle)."""


@dataclass(frozen=True, slots=True)
class Plan:
    decision: str
    """fire, skip, buffer or cancel_other."""
    reason: str
    """idle, busy, coalesced, missed, webhook."""
    delivery: str | None
    """queue or guide for a decision that commits; None for a skip."""
    outcome: str | None = None
    """Set when nothing is left to do (a skip): skipped."""


def decide(overlap: str, busy: bool, buffered: bool, delivery: str) -> Plan:
    """The decision for one nominal time: `busy` when the target's run is running or pending,
    `buffered` when the trigger already holds a buffered firing."""
    if not busy:
        return Plan("fire", "idle", delivery)
    if overlap == "queue":
        return Plan("fire", "busy", "queue")
    if overlap == "guide":
        return Plan("fire", "busy", "guide")
    if overlap == "cancel_other":
        return Plan("cancel_other", "busy", "queue")
    if overlap == "buffer_one":
        if buffered:
            return Plan("skip", "coalesced", None, "skipped")
        return Plan("buffer", "busy", delivery)
    return Plan("skip", "busy", None, "skipped")


def request_id(trigger_id: str, key: str) -> str:
    """The idempotency key of a firing's user.message: one fact per (trigger, key)."""
    return f"trigger:{trigger_id}:{key}"


def new_session_id(trigger_id: str, key: str, scheduled: bool) -> str:
    """The session a `newSession` firing creates, derived from (trigger, key) so that a retry
    finds the one it created. A webhook's delivery id is hashed: it may hold any character."""
    if scheduled:
        return f"{trigger_id}-{key}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{trigger_id}-d-{digest}"


_PLACEHOLDER: Final = re.compile(r"\{\{([A-Za-z]+)\}\}")


def render(template: str, values: Mapping[str, str]) -> str:
    """The template with each `{{name}}` of `values` replaced, in one pass over the template:
    a value is inserted as it is, never read as template syntax (a sender's delivery id or body
    holding `{{body}}` stays that text). Other `{{…}}` are left as written."""

    def value_of(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    return _PLACEHOLDER.sub(value_of, template)


def expansion_bound(template: str, widths: Mapping[str, int]) -> int:
    """The most characters `render` can make of the template when each value named in `widths`
    is at most that long: what a trigger's creation checks against the event limit."""
    bound = len(template)
    for match in _PLACEHOLDER.finditer(template):
        width = widths.get(match.group(1))
        if width is not None:
            bound += width - len(match.group(0))
    return bound


def message_payload(
    trigger_id: str,
    key: str,
    nominal: datetime,
    firing_id: int,
    text: str,
    delivery: str | None,
) -> dict[str, Any]:
    """The user.message a firing commits: the same for every retry of the firing."""
    payload: dict[str, Any] = {
        "text": text,
        "requestId": request_id(trigger_id, key),
        "source": {"trigger": trigger_id, "nominalTime": iso(nominal), "firingId": firing_id},
    }
    if delivery == "guide":
        payload["delivery"] = "guide"
    return payload
