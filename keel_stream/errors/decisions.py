"""Decisions: the approval of gated tool calls."""

from __future__ import annotations

from keel_stream.errors.base import Conflict, InvalidRequest, NotFound

__all__ = [
    "DecisionAlreadyAnswered",
    "DecisionExpired",
    "DecisionNotFound",
    "DecisionNotOpen",
    "DecisionReserved",
    "DecisionStale",
    "OutcomeNotAllowed",
]


class DecisionNotFound(NotFound):
    """No decision with this id in the session (no gated call has that toolCallId)."""

    code = "decision_not_found"


class DecisionNotOpen(Conflict):
    """The decision's call already has its result: there is nothing left to answer."""

    code = "decision_not_open"


class DecisionAlreadyAnswered(Conflict):
    """The decision was answered before, differently (first answer wins; the same answer again
    is 200 created:false)."""

    code = "decision_already_answered"


class DecisionExpired(Conflict):
    """The decision expired unanswered; the expiry sweeper answers it as its policy says."""

    code = "decision_expired"


class DecisionStale(Conflict):
    """The answer's argsDigest is not the digest of the arguments the decision opened with."""

    code = "decision_stale"


class OutcomeNotAllowed(InvalidRequest):
    """The outcome is not one the decision allows, or lacks what it needs (edit: args,
    respond: response)."""

    code = "outcome_not_allowed"


class DecisionReserved(InvalidRequest):
    """A plain input may not carry a `decision` or a `decision:` requestId: decisions are
    answered at POST /v1/sessions/{id}/decisions/{decisionId}."""

    code = "decision_reserved"
