"""Client input through either door, `POST /input` or `POST /events`: one path to the kernel.

The doors differ in one thing: an external session's state lives at its backend, so only
`/input` (the documented door for input to it) records and forwards a message there; `/events`
is the seed's edge-event door, a native write, and the kernel's refusal stands (409
external_session).

Both doors read the body as raw JSON and hand the payload to the kernel unchanged, so the same
payload gets the same answer at both doors: the kernel's own rule code for a bad one
(text_not_string, delivery_invalid, ...), and for a good one every field stored exactly as
sent, nulls and unknown fields included. A body that is not JSON text is invalid_request; a
number JSON cannot hold (NaN, Infinity, -Infinity, or one that overflows to infinity, 1e400)
is payload_not_json, as the kernel answers a value it cannot store.

A body over OFF_LOOP_BYTES is parsed and checked in a thread: the event loop (and /healthz, and
in `keel-stream dev` the relay and the worker) keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Callable
from typing import Any, Final, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from keel_stream.api.deps import ERRORS, Services, Svc, Tenant
from keel_stream.api.external import deliver
from keel_stream.api.limits import OFF_LOOP_BYTES
from keel_stream.api.models import (
    EVENT_REQUEST_SCHEMA,
    INPUT_BODY_SCHEMA,
    EventRequest,
    SubmissionView,
)
from keel_stream.errors import (
    DecisionReserved,
    ExternalSession,
    InvalidPayload,
    InvalidRequest,
    PayloadRule,
    SubagentReserved,
)
from keel_stream.kernel import CommitRequest, Delivery, Kind, require_edge_kind, validate_payload
from keel_stream.kernel.decisions import ANSWER_KEY_PREFIX
from keel_stream.kernel.subagents import REPORT_KEY_PREFIX, TASK_KEY_PREFIX

__all__ = ["parse_json_body", "router", "submit"]

router = APIRouter(tags=["v1"])

_T = TypeVar("_T")

_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    **ERRORS,
    200: {"model": SubmissionView, "description": "A retry: the original submission"},
}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


class _NotANumber(ValueError):
    """A number JSON cannot hold."""


def _constant(name: str) -> Any:
    raise _NotANumber(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotANumber(f"{text} is out of range for a JSON number")
    return value


def parse_json_body(raw: bytes, content_type: str | None) -> Any:
    """The body as a JSON value. InvalidRequest for a body that is absent, not JSON, nested
    deeper than the parser goes, or sent with a content type other than JSON; InvalidPayload
    (payload_not_json) for a number JSON cannot hold."""
    if content_type is not None:
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not (
            media.startswith("application/") and media.endswith("+json")
        ):
            raise InvalidRequest(f"send the body as application/json, not {media!r}")
    if not raw.strip():
        raise InvalidRequest("the request needs a JSON body")
    try:
        return json.loads(raw, parse_constant=_constant, parse_float=_finite)
    except RecursionError as exc:
        raise InvalidRequest("the body is nested too deeply") from exc
    except _NotANumber as exc:
        raise InvalidPayload(PayloadRule.PAYLOAD_NOT_JSON, str(exc)) from exc
    except ValueError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from exc


async def _off_loop_if_large(request: Request, check: Callable[[Any], _T]) -> _T:
    """Parse the body and check it, in a thread when the body is large."""
    raw = await request.body()
    content_type = request.headers.get("content-type")

    def parsed_and_checked() -> _T:
        return check(parse_json_body(raw, content_type))

    if len(raw) <= OFF_LOOP_BYTES:
        return parsed_and_checked()
    return await asyncio.to_thread(parsed_and_checked)


def _checked(kind: Kind, payload: Any) -> dict[str, Any]:
    """The payload as a dict, once the kernel's rules pass (each answers with its own code)."""
    if kind == Kind.USER_MESSAGE and isinstance(payload, dict) and _answers_a_decision(payload):
        raise DecisionReserved(
            "decisions are answered at POST /v1/sessions/{id}/decisions/{decisionId}, "
            "not as plain input (no `decision` field, no requestId starting decision:)"
        )
    if kind == Kind.USER_MESSAGE and isinstance(payload, dict):
        _refuse_subagent_fields(payload.keys(), payload.get("requestId"))
    validate_payload(kind, payload)
    return dict(payload)


_SUBAGENT_FIELDS: Final = frozenset({"subagent", "subagentResult"})
_SUBAGENT_KEYS: Final = (REPORT_KEY_PREFIX, TASK_KEY_PREFIX)


def _refuse_subagent_fields(fields: Any, request_id: Any) -> None:
    """A subagent's task and its result are the worker's own commits: a client that could write
    them could link a session into another's tree or answer a call in a child's name."""
    reserved = sorted(_SUBAGENT_FIELDS.intersection(fields))
    if reserved:
        raise SubagentReserved(f"{', '.join(reserved)} may only be written by the worker")
    if isinstance(request_id, str) and request_id.startswith(_SUBAGENT_KEYS):
        raise SubagentReserved("requestIds starting subagent: are the subagents' own")


def _answers_a_decision(payload: Any) -> bool:
    request_id = payload.get("requestId")
    return "decision" in payload or (
        isinstance(request_id, str) and request_id.startswith(ANSWER_KEY_PREFIX)
    )


def _input(body: Any) -> dict[str, Any]:
    return _checked(Kind.USER_MESSAGE, body)


def _edge_event(body: Any) -> tuple[Kind, dict[str, Any], str | None]:
    envelope = _envelope(body)
    kind = require_edge_kind(envelope.kind)
    payload = _checked(kind, envelope.payload)
    if envelope.request_id is not None and envelope.request_id.startswith(ANSWER_KEY_PREFIX):
        raise DecisionReserved("requestIds starting decision: are the decisions' own")
    _refuse_subagent_fields((), envelope.request_id)
    return kind, payload, envelope.request_id


def _envelope(body: Any) -> EventRequest:
    try:
        return EventRequest.model_validate(body)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from exc


async def submit(
    services: Services,
    tenant: str,
    session_id: str,
    kind: Kind,
    fields: dict[str, Any],
    key: str | None,
    *,
    forward_external: bool,
) -> SubmissionView:
    """Commit an edge event whose payload passed the kernel's rules (`_checked`); it goes to
    the kernel exactly as the client sent it. With forward_external, input to an external
    session goes to its backend; without, the kernel's 409 external_session is the answer."""
    request_id = key if key is not None else fields.get("requestId")
    if request_id is None:
        request_id = str(uuid.uuid4())
    try:
        submission = await services.ledger.commit(
            CommitRequest(
                tenant_id=tenant, session_id=session_id, kind=kind, payload=fields, key=request_id
            )
        )
    except ExternalSession:
        if not forward_external:
            raise
        # Refused under the session lock: the input goes to the session's backend instead.
        return await deliver(services, tenant, session_id, fields, str(request_id))
    delivery = fields.get("delivery")
    if delivery == Delivery.GUIDE:
        # What was written: a guide without an active attempt was degraded to queue.
        (event,) = await services.ledger.read_events(
            tenant, session_id, after=submission.seq - 1, limit=1
        )
        delivery = event.payload.get("delivery")
    return SubmissionView(
        created=submission.created,
        request_id=request_id,
        seq=submission.seq,
        kind=submission.kind,
        delivery=delivery,
        committed_at=submission.committed_at,
    )


def _answered(submission: SubmissionView, response: Response) -> SubmissionView:
    response.status_code = 201 if submission.created else 200
    return submission


@router.post(
    "/v1/sessions/{session_id}/input",
    status_code=201,
    response_model=SubmissionView,
    responses=_RESPONSES,
    openapi_extra=_json_body(INPUT_BODY_SCHEMA),
)
async def post_input(
    request: Request, services: Svc, tenant: Tenant, session_id: str, response: Response
) -> SubmissionView:
    """Commit a user message (the body is its payload). The same requestId again returns the
    same submission; without one, one is generated. Unknown fields are stored as sent."""
    await services.guard.count(tenant, "inputs")
    payload = await _off_loop_if_large(request, _input)
    submission = await submit(
        services, tenant, session_id, Kind.USER_MESSAGE, payload, None, forward_external=True
    )
    return _answered(submission, response)


@router.post(
    "/v1/sessions/{session_id}/events",
    status_code=201,
    response_model=SubmissionView,
    responses=_RESPONSES,
    openapi_extra=_json_body(EVENT_REQUEST_SCHEMA),
)
async def post_event(
    request: Request, services: Svc, tenant: Tenant, session_id: str, response: Response
) -> SubmissionView:
    """Commit an edge event: only user.message is accepted here, and only to a native session
    (an external session's input goes through /input)."""
    await services.guard.count(tenant, "inputs")
    kind, payload, request_id = await _off_loop_if_large(request, _edge_event)
    submission = await submit(
        services, tenant, session_id, kind, payload, request_id, forward_external=False
    )
    return _answered(submission, response)
