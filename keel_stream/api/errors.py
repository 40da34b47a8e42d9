"""One error body for every failure, and the one table from error codes to HTTP statuses."""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from keel_stream import errors

__all__ = ["ErrorBody", "ErrorDetail", "Unauthorized", "install_error_handlers", "status_for"]


class ErrorDetail(BaseModel):
    code: str
    message: str
    retriable: bool = False


class ErrorBody(BaseModel):
    """Every error response: `{"error": {"code", "message", "retriable"}}`."""

    error: ErrorDetail


class Unauthorized(errors.KeelError):
    """No API key, or one that is unknown or revoked."""

    code = "unauthorized"


class NoRunningAttempt(errors.Conflict):
    """There is no running attempt to cancel."""

    code = "no_running_attempt"


# Most specific class first.
_STATUS: Final[tuple[tuple[type[errors.KeelError], int], ...]] = (
    (Unauthorized, 401),
    (errors.InvalidRequest, 400),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.StoreUnavailable, 503),
    (errors.ProjectionBehind, 503),
    (errors.StoreError, 500),
)


def status_for(error: errors.KeelError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def _body(code: str, message: str, retriable: bool = False) -> dict[str, object]:
    return ErrorBody(
        error=ErrorDetail(code=code, message=message, retriable=retriable)
    ).model_dump()


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.KeelError)
    async def keel_error(request: Request, exc: errors.KeelError) -> JSONResponse:
        status = status_for(exc)
        headers = {"Retry-After": "1"} if exc.retriable else None
        body = _body(exc.error_code, exc.message, exc.retriable)
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid request')}"
        return JSONResponse(_body("invalid_request", message), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(_body(code, str(exc.detail)), status_code=exc.status_code)
