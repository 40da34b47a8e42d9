"""Decisions over HTTP: answer one (at most one answer each; first answer wins) and list them.

Every check is made against the log: the decision must exist (a gated call of this session), be
open (no result yet), not expired, allow the outcome, and name the digest of the arguments it
opened with. The answer is a user.message keyed decision:<id>; its commit also makes the
session owe a run (one transaction), so an answer is never recorded without a resume.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response

from keel_stream.api.decision_models import (
    AnswerBody,
    AnswerView,
    DecisionList,
    decision_view,
)
from keel_stream.api.deps import ERRORS, Config, Svc, Tenant, key_id_of, session_row
from keel_stream.errors import (
    DecisionAlreadyAnswered,
    DecisionExpired,
    DecisionNotFound,
    DecisionNotOpen,
    DecisionStale,
    IdempotencyConflict,
    OutcomeNotAllowed,
)
from keel_stream.kernel import CommitRequest, Delivery, Kind, check_identifier
from keel_stream.kernel.decisions import Decision, DecisionState, answer_key, decisions_of
from keel_stream.store.reading import whole_log

__all__ = ["router"]

router = APIRouter(tags=["v1"])
KeyId = Annotated[str, Depends(key_id_of)]
_SUBSTANCE = ("outcome", "argsDigest", "args", "response", "reason")
TREE_SESSIONS_MAX = 1_000
"""A tree's decisions are read from at most this many sessions (the root's nearest first)."""


def _answer(body: AnswerBody, decision_id: str, key_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": decision_id,
        "outcome": body.outcome,
        "argsDigest": body.args_digest,
        "answeredBy": f"key:{key_id}",
    }
    for name, value in (("args", body.args), ("response", body.response), ("reason", body.reason)):
        if value is not None:
            answer[name] = value
    return answer


def _same(given: dict[str, Any], recorded: Any) -> bool:
    return all(given.get(f) == recorded.get(f) for f in _SUBSTANCE)


def _check(decision: Decision, body: AnswerBody, now: datetime) -> None:
    approval = decision.approval
    if decision.state == DecisionState.RESOLVED:
        raise DecisionNotOpen(f"decision {decision.id!r} already has its result")
    if datetime.fromisoformat(decision.expires_at) <= now:
        raise DecisionExpired(f"decision {decision.id!r} expired at {decision.expires_at}")
    if body.outcome not in (approval.get("outcomes") or ()):
        raise OutcomeNotAllowed(f"{body.outcome!r} is not one of {approval.get('outcomes')}")
    if body.outcome == "edit" and body.args is None:
        raise OutcomeNotAllowed("edit needs args: the arguments to run the tool with")
    if body.outcome == "respond" and body.response is None:
        raise OutcomeNotAllowed("respond needs response: the tool's result")
    if body.args_digest != approval.get("argsDigest"):
        raise DecisionStale(
            f"argsDigest {body.args_digest!r} is not the digest of the arguments opened "
            f"({approval.get('argsDigest')!r}): read the decision again"
        )


async def _decisions(services: Svc, tenant: str, session_id: str) -> dict[str, Decision]:
    await session_row(services, tenant, session_id)
    return decisions_of(await whole_log(services.ledger, tenant, session_id))


@router.post(
    "/v1/sessions/{session_id}/decisions/{decision_id}",
    status_code=201,
    response_model=AnswerView,
    responses=ERRORS,
)
async def answer_decision(
    services: Svc,
    config: Config,
    tenant: Tenant,
    key_id: KeyId,
    session_id: str,
    decision_id: str,
    body: AnswerBody,
    response: Response,
) -> AnswerView:
    """Answer an open decision. The same answer again is 200 with created:false; a different
    one after the first is 409 decision_already_answered."""
    check_identifier(decision_id, "decision")
    decision = (await _decisions(services, tenant, session_id)).get(decision_id)
    if decision is None:
        raise DecisionNotFound(f"no decision {decision_id!r} in session {session_id!r}")
    answer = _answer(body, decision_id, key_id)
    if decision.answer is not None:
        return _recorded(decision, answer, response)
    _check(decision, body, config.clock())
    payload = {"requestId": answer_key(decision_id), "delivery": Delivery.QUEUE.value,
               "decision": answer}  # fmt: skip
    request = CommitRequest(tenant_id=tenant, session_id=session_id, kind=Kind.USER_MESSAGE,
                            payload=payload, key=payload["requestId"])  # fmt: skip
    try:
        submission = await services.ledger.commit(request)
    except IdempotencyConflict:
        # Another answer (a person's or the expiry's) was committed since the log was read.
        fresh = (await _decisions(services, tenant, session_id))[decision_id]
        return _recorded(fresh, answer, response)
    # The index follows the log (the next settle syncs it too); closed now, the session view
    # stops listing the decision at once.
    await services.deadlines.close(tenant, session_id, decision_id)
    response.status_code = 201 if submission.created else 200
    return AnswerView(created=submission.created, decision_id=decision_id, outcome=body.outcome,
                      seq=submission.seq, committed_at=submission.committed_at)  # fmt: skip


def _recorded(decision: Decision, answer: dict[str, Any], response: Response) -> AnswerView:
    recorded = decision.answer or {}
    if not _same(answer, recorded) or decision.answer_seq is None:
        raise DecisionAlreadyAnswered(
            f"decision {decision.id!r} was answered {recorded.get('outcome')!r} "
            f"by {recorded.get('answeredBy')} (seq {decision.answer_seq})"
        )
    response.status_code = 200
    return AnswerView(
        created=False, decision_id=decision.id, outcome=str(recorded.get("outcome")),
        seq=decision.answer_seq,
        committed_at=datetime.fromisoformat(decision.answered_at or "1970-01-01T00:00:00+00:00"),
    )  # fmt: skip


@router.get("/v1/sessions/{session_id}/decisions", response_model=DecisionList, responses=ERRORS)
async def list_decisions(
    services: Svc,
    config: Config,
    tenant: Tenant,
    session_id: str,
    state: Annotated[Literal["open", "expired", "answered", "resolved", "all"], Query()] = "all",
    scope: Annotated[Literal["session", "tree"], Query()] = "session",
) -> DecisionList:
    """The session's decisions in the order they were opened, as the log tells them; with
    scope=tree also those of every subagent below it (each names its session)."""
    await session_row(services, tenant, session_id)
    sessions = [session_id]
    if scope == "tree":
        sessions = await services.subagents.tree(tenant, session_id, TREE_SESSIONS_MAX)
    now = config.clock()
    views = []
    for session in sessions:
        found = decisions_of(await whole_log(services.ledger, tenant, session))
        views += [decision_view(d, now, session) for d in found.values()]
    return DecisionList(decisions=[v for v in views if state in ("all", v.state)])
