"""The wire shapes of decisions: an answer as a client sends it, a decision as the API shows it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from keel_stream.kernel.decisions import Decision

__all__ = ["AnswerBody", "AnswerView", "DecisionList", "DecisionView", "decision_view"]

Text = Annotated[str, StringConstraints(max_length=16_384)]


class _Wire(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True, serialize_by_alias=True, alias_generator=to_camel
    )


class AnswerBody(BaseModel):
    """`POST /v1/sessions/{id}/decisions/{decisionId}`. Who answers is the API key, never the
    body."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    outcome: Literal["approve", "edit", "reject", "respond"]
    args_digest: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="The argsDigest of the decision as it was shown: an answer to other "
        "arguments than the opened ones is refused (decision_stale)."
    )
    args: dict[str, Any] | None = Field(None, description="edit: the arguments to run with.")
    response: Text | None = Field(None, description="respond: the tool's result, as text.")
    reason: Annotated[str, StringConstraints(max_length=2_000)] | None = None


class AnswerView(_Wire):
    created: bool
    decision_id: str
    outcome: str
    seq: int
    committed_at: datetime


class DecisionView(_Wire):
    id: str
    session: str | None = Field(None, description="The session it belongs to (scope=tree).")
    tool: str
    arguments: dict[str, Any]
    args_digest: str
    outcomes: list[str]
    expires_at: str
    on_expire: str
    state: Literal["open", "expired", "answered", "resolved"]
    """expired: open past its expiry, until the sweeper records the system's answer."""
    opened_seq: int
    answer: dict[str, Any] | None = None
    answer_seq: int | None = None
    result_seq: int | None = None


class DecisionList(_Wire):
    decisions: list[DecisionView]


def decision_view(decision: Decision, now: datetime, session: str | None = None) -> DecisionView:
    state = decision.state.value
    if state == "open" and datetime.fromisoformat(decision.expires_at) <= now:
        state = "expired"
    approval = decision.approval
    return DecisionView(
        id=decision.id,
        session=session,
        tool=decision.tool,
        arguments=dict(decision.arguments),
        args_digest=str(approval.get("argsDigest")),
        outcomes=list(approval.get("outcomes") or ()),
        expires_at=decision.expires_at,
        on_expire=str(approval.get("onExpire")),
        state=state,
        opened_seq=decision.opened_seq,
        answer=dict(decision.answer) if decision.answer is not None else None,
        answer_seq=decision.answer_seq,
        result_seq=decision.result_seq,
    )
