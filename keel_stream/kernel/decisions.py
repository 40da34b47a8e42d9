"""Decisions: human (or policy-service) approval of a tool call, in the seed's own vocabulary.

A decision is opened by the ``approval`` object on a toolCall block of a committed
assistant.message (its id is the toolCallId); it is answered by a user.message carrying a
``decision`` object, keyed ``requestId = decision:<id>`` so that at most one answer exists; it
is resolved by the call's tool.result. This module holds the shapes, the digest that binds an
answer to the arguments it approved, and the fold of a session's decisions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from keel_stream.errors import InvalidPayload, PayloadRule
from keel_stream.kernel.canonical import canonical_json
from keel_stream.kernel.types import EventLike
from keel_stream.kernel.vocabulary import Kind

__all__ = [
    "ANSWER_KEY_PREFIX",
    "Decision",
    "DecisionState",
    "Outcome",
    "answer_key",
    "answer_of",
    "approval_of",
    "args_digest",
    "decisions_of",
    "released_call",
    "validate_answer",
    "validate_approval",
]

ANSWER_KEY_PREFIX: Final = "decision:"


class Outcome(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    RESPOND = "respond"
    CANCEL = "cancel"
    """Only the system's answer to an expired decision whose policy says cancel."""


HUMAN_OUTCOMES: Final = frozenset({Outcome.APPROVE, Outcome.EDIT, Outcome.REJECT, Outcome.RESPOND})


class DecisionState(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    RESOLVED = "resolved"
    """Its tool.result is committed."""


def args_digest(arguments: Any) -> str:
    """What an answer must name to approve these arguments: SHA-256 of their canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical_json(arguments)).hexdigest()


def answer_key(decision_id: str) -> str:
    return ANSWER_KEY_PREFIX + decision_id


def approval_of(block: Mapping[str, Any]) -> Mapping[str, Any] | None:
    approval = block.get("approval")
    return approval if isinstance(approval, Mapping) else None


def answer_of(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The decision a user.message answers, or None for an ordinary input."""
    decision = payload.get("decision")
    return decision if isinstance(decision, Mapping) else None


def released_call(payload: Mapping[str, Any]) -> str | None:
    """The waiting call a user.message releases: a decision's answer, or a subagent's result
    (keel_stream.kernel.subagents); None for an ordinary input."""
    decision = answer_of(payload)
    if decision is not None:
        return str(decision.get("id"))
    report = payload.get("subagentResult")
    return str(report.get("toolCallId")) if isinstance(report, Mapping) else None


def _fail(rule: PayloadRule, message: str) -> InvalidPayload:
    return InvalidPayload(rule, message)


def _is_timestamp(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def validate_approval(block: Mapping[str, Any]) -> None:
    """An approval on a toolCall block: bound to that call and its arguments."""
    approval = block.get("approval")
    if approval is None:
        return
    rule = PayloadRule.APPROVAL_INVALID
    if not isinstance(approval, Mapping):
        raise _fail(rule, "approval must be an object")
    if approval.get("decisionId") != block.get("id"):
        raise _fail(rule, "approval.decisionId must equal the toolCall's id")
    if approval.get("argsDigest") != args_digest(block.get("arguments", {})):
        raise _fail(rule, "approval.argsDigest must be the digest of the call's arguments")
    outcomes = approval.get("outcomes")
    if not isinstance(outcomes, list) or not outcomes or not set(outcomes) <= HUMAN_OUTCOMES:
        raise _fail(rule, "approval.outcomes must list some of approve, edit, reject, respond")
    if not _is_timestamp(approval.get("expiresAt")):
        raise _fail(rule, "approval.expiresAt must be an RFC 3339 timestamp with its offset")
    if approval.get("onExpire") not in (Outcome.REJECT, Outcome.CANCEL):
        raise _fail(rule, "approval.onExpire must be reject or cancel")


def validate_answer(payload: Mapping[str, Any]) -> None:
    """A decision answer on a user.message: its key, outcome and the digest it approved."""
    if "decision" not in payload:
        return
    decision = payload["decision"]
    rule = PayloadRule.DECISION_INVALID
    if not isinstance(decision, Mapping):
        raise _fail(rule, "decision must be an object")
    decision_id = decision.get("id")
    if not isinstance(decision_id, str) or not decision_id:
        raise _fail(rule, "decision.id must name the decision")
    if payload.get("requestId") != answer_key(decision_id):
        raise _fail(rule, f"a decision answer's requestId is {answer_key(decision_id)!r}")
    if decision.get("outcome") not in tuple(Outcome):
        raise _fail(rule, "decision.outcome must be approve, edit, reject, respond or cancel")
    if not isinstance(decision.get("argsDigest"), str):
        raise _fail(rule, "decision.argsDigest must name the arguments answered")
    if "args" in decision and not isinstance(decision["args"], Mapping):
        raise _fail(rule, "decision.args must be an object")
    for text in ("response", "reason", "answeredBy"):
        if text in decision and not isinstance(decision[text], str):
            raise _fail(rule, f"decision.{text} must be a string")


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision as the log tells it."""

    id: str
    tool: str
    arguments: Mapping[str, Any]
    approval: Mapping[str, Any]
    opened_seq: int
    answer: Mapping[str, Any] | None = None
    answer_seq: int | None = None
    answered_at: str | None = None
    result_seq: int | None = None

    @property
    def state(self) -> DecisionState:
        if self.result_seq is not None:
            return DecisionState.RESOLVED
        return DecisionState.OPEN if self.answer is None else DecisionState.ANSWERED

    @property
    def expires_at(self) -> str:
        return str(self.approval.get("expiresAt", ""))


def _stamp(event: EventLike) -> str | None:
    at = getattr(event, "committed_at", None)
    return at.isoformat() if at is not None else None


def decisions_of(events: Iterable[EventLike]) -> dict[str, Decision]:
    """Every decision of a session's log, by id, in the order they were opened."""
    found: dict[str, Decision] = {}
    for event in events:
        payload = event.payload
        if event.kind == Kind.ASSISTANT_MESSAGE and payload.get("stopReason") == "tool_use":
            # Only an answer whose calls run opens decisions (a cut or failed one runs none).
            for block in payload.get("content") or ():
                if not isinstance(block, dict) or block.get("type") != "toolCall":
                    continue
                approval = approval_of(block)
                if approval is not None:
                    found[str(block["id"])] = Decision(
                        str(block["id"]), str(block.get("name")), block.get("arguments") or {},
                        approval, event.seq,
                    )  # fmt: skip
        elif event.kind == Kind.USER_MESSAGE:
            answer = answer_of(payload)
            known = found.get(str(answer.get("id"))) if answer is not None else None
            if answer is not None and known is not None and known.answer is None:
                found[known.id] = replace(
                    known, answer=answer, answer_seq=event.seq, answered_at=_stamp(event)
                )
        elif event.kind == Kind.TOOL_RESULT:
            known = found.get(str(payload.get("toolCallId")))
            if known is not None:
                found[known.id] = replace(known, result_seq=event.seq)
    return found
