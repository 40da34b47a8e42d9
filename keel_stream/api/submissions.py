"""Client input through either door, `POST /input` or `POST /events`: one path to the kernel.

Both doors read the body as raw JSON (strictly: no NaN or Infinity, no invalid UTF-8) and hand
the payload to the kernel unchanged, so the same payload gets the same answer at both doors:
the kernel's own rule code for a bad one (text_not_string, delivery_invalid, ...), and for a
good one every field stored exactly as sent, nulls and unknown fields included.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Final

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from keel_stream.api.deps import ERRORS, Services, Svc, Tenant
from keel_stream.api.external import deliver
from keel_stream.api.models import (
    EVENT_REQUEST_SCHEMA,
    INPUT_BODY_SCHEMA,
    EventRequest,
    SubmissionView,
)
from keel_stream.errors import ExternalSession, InvalidRequest
from keel_stream.kernel import CommitRequest, Delivery, Kind, require_edge_kind, validate_payload

__all__ = ["parse_json_body", "router", "submit"]

router = APIRouter(tags=["v1"])

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


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


def parse_json_body(raw: bytes, content_type: str | None) -> Any:
    """The body as a JSON value. InvalidRequest for a body that is absent, not JSON, nested
    deeper than the parser goes, or sent with a content type other than JSON."""
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
    except ValueError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from exc


async def _read_body(request: Request) -> Any:
    return parse_json_body(await request.body(), request.headers.get("content-type"))


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
    payload: Any,
    key: str | None,
) -> SubmissionView:
    """Commit an edge event; the payload goes to the kernel exactly as the client sent it."""
    validate_payload(kind, payload)  # the rule's own code, before anything reads the payload
    fields = dict(payload)
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
    payload = await _read_body(request)
    submission = await submit(services, tenant, session_id, Kind.USER_MESSAGE, payload, None)
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
    """Commit an edge event: only user.message is accepted here."""
    envelope = _envelope(await _read_body(request))
    kind = require_edge_kind(envelope.kind)
    submission = await submit(
        services, tenant, session_id, kind, envelope.payload, envelope.request_id
    )
    return _answered(submission, response)
