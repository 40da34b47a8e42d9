"""One error body for every failure, and the one table from error codes to HTTP statuses."""

from __future__ import annotations

from typing import Final

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from keel_stream import errors

__all__ = [
    "HTTP_ERROR_CODES",
    "REQUEST_ERROR_CODES",
    "ErrorBody",
    "ErrorDetail",
    "error_json",
    "error_response",
    "install_error_handlers",
    "status_for",
    "status_of",
]


class ErrorDetail(BaseModel):
    code: str
    message: str
    retriable: bool = False


class ErrorBody(BaseModel):
    """Every error response: `{"error": {"code", "message", "retriable"}}`."""

    error: ErrorDetail


# Most specific class first.
_STATUS: Final[tuple[tuple[type[errors.KeelError], int], ...]] = (
    (errors.Unauthorized, 401),
    (errors.WebhookSignatureInvalid, 401),
    (errors.RequestTimeout, 408),
    (errors.ServerBusy, 503),
    (errors.InvalidConfig, 400),
    (errors.ConfigNotFound, 404),
    (errors.PayloadTooLarge, 413),
    (errors.HookUrlRefused, 400),  # the hooks' errors are in this table's tree from here on
    (errors.InvalidRequest, 400),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.ExternalQuotaExceeded, 429),
    (errors.RateLimited, 429),
    (errors.QuotaRefused, 403),
    (errors.StoreUnavailable, 503),
    (errors.ProjectionBehind, 503),
    (errors.StoreError, 500),
    (errors.BrokerUnavailable, 503),
    (errors.BrokerError, 502),
    (errors.BackendTimeout, 504),
    (errors.BackendUnavailable, 503),
    (errors.GatewayError, 502),
)


_HTTP_CODES: Final = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
_HTTP_OTHER: Final = "http_error"
_INTERNAL: Final = "internal_error"
HTTP_ERROR_CODES: Final = frozenset({*_HTTP_CODES.values(), _HTTP_OTHER, _INTERNAL})
"""Codes of errors raised by the HTTP layer itself (no such route, wrong method, a fault)."""
REQUEST_ERROR_CODES: Final = frozenset({errors.InvalidRequest.code})
"""The code of a request that fails the OpenAPI schema (query, path, header or body)."""


def status_of(cls: type[errors.KeelError]) -> int:
    """The HTTP status of an error class."""
    for base, status in _STATUS:
        if issubclass(cls, base):
            return status
    return 500


def status_for(error: errors.KeelError) -> int:
    return status_of(type(error))


def _body(code: str, message: str, retriable: bool = False) -> dict[str, object]:
    return ErrorBody(
        error=ErrorDetail(code=code, message=message, retriable=retriable)
    ).model_dump()


def error_json(error: errors.KeelError) -> bytes:
    """The error body of an error, as sent."""
    return orjson.dumps(_body(error.error_code, error.message, error.retriable))


def error_response(error: errors.KeelError, *, close: bool = False) -> JSONResponse:
    """The response to an error; `close`: the server closes the connection after it."""
    retry_after = getattr(error, "retry_after_s", 1)
    headers = {"Retry-After": str(retry_after)} if error.retriable else {}
    if close:
        headers["Connection"] = "close"
    body = _body(error.error_code, error.message, error.retriable)
    return JSONResponse(body, status_code=status_for(error), headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.KeelError)
    async def keel_error(request: Request, exc: errors.KeelError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid request')}"
        return JSONResponse(_body(errors.InvalidRequest.code, message), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, _HTTP_OTHER)
        return JSONResponse(_body(code, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def fault(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not a client error: the same body shape, no details (the log has them).
        return JSONResponse(_body(_INTERNAL, "internal server error"), status_code=500)
