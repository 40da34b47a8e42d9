"""The worker's side of decisions: an approval on each call the tenant's policy gates (put on the
answer before it is committed, so the decision is opened by the same commit), and what an
answered decision makes of its call: run it with the opened or the edited arguments, or answer it
without running anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from keel_stream.clock import iso
from keel_stream.kernel import Kind
from keel_stream.kernel.decisions import Outcome, answer_of, args_digest
from keel_stream.kernel.types import EventLike
from keel_stream.tenancy.policy import Policy

__all__ = ["Resolution", "answers_in", "gate_calls", "resolve"]

_EXPIRED: Final = "the decision expired unanswered"


def gate_calls(
    content: Sequence[Mapping[str, Any]], policy: Policy | None, now: datetime
) -> list[dict[str, Any]]:
    """The answer's content with an `approval` on every call the policy gates."""
    blocks = [dict(b) for b in content]
    if policy is None or not policy.tools:
        return blocks
    for block in blocks:
        if block.get("type") != "toolCall" or "invalidArguments" in block:
            continue
        arguments = block.get("arguments") or {}
        rule = policy.for_call(str(block.get("name")), arguments)
        if rule is None:
            continue
        block["approval"] = {
            "decisionId": block["id"],
            "argsDigest": args_digest(arguments),
            "outcomes": list(rule.outcomes),
            "expiresAt": iso(now + timedelta(seconds=rule.expires_after_s)),
            "onExpire": rule.on_expire,
        }
    return blocks


def answers_in(events: Iterable[EventLike]) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """Decision id -> (seq, answer) for the answers among `events` (the first per id)."""
    found: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for event in events:
        if event.kind == Kind.USER_MESSAGE:
            answer = answer_of(event.payload)
            if answer is not None:
                found.setdefault(str(answer.get("id")), (event.seq, answer))
    return found


@dataclass(frozen=True, slots=True)
class Resolution:
    """What an answered decision makes of its call."""

    arguments: Mapping[str, Any] | None
    """Run the tool with these; None: the call is answered without running anything."""
    text: str = ""
    is_error: bool = False
    cancel: bool = False
    """The run stops (an expired decision whose policy says cancel)."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """Recorded on the tool.result under `field`."""
    field: str = "decision"


def resolve(call: Mapping[str, Any], seq: int, answer: Mapping[str, Any]) -> Resolution:
    outcome = answer.get("outcome")
    provenance: dict[str, Any] = {"id": call["id"], "outcome": outcome, "answerSeq": seq}
    if answer.get("system"):
        provenance["system"] = True
    reason = str(answer.get("reason") or (_EXPIRED if answer.get("system") else "no reason"))
    if outcome == Outcome.APPROVE:
        return Resolution(call.get("arguments") or {}, provenance=provenance)
    if outcome == Outcome.EDIT:
        edited = dict(answer.get("args") or {})
        return Resolution(edited, provenance={**provenance, "args": edited})
    if outcome == Outcome.RESPOND:
        return Resolution(None, str(answer.get("response", "")), provenance=provenance)
    if outcome == Outcome.CANCEL:
        return Resolution(None, f"cancelled: {reason}", True, True, provenance)
    return Resolution(None, f"rejected: {reason}", True, provenance=provenance)
