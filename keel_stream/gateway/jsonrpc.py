"""JSON-RPC 2.0 messages: four frozen dataclasses, one encoder, one strict decoder.

``decode`` raises ProtocolError with ``rpc_code`` -32700 (not JSON) or -32600 (JSON, but not a
valid JSON-RPC 2.0 message; batches are not part of this protocol) and keeps the request id when
one could be read, so a server can answer the error to the right request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from keel_stream.errors import ProtocolError
from keel_stream.gateway.protocol import ErrorCode

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "ErrorResponse",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "RpcError",
    "decode",
    "encode",
    "encode_line",
    "error_response",
    "over_the_limit",
]

RequestId = int | str

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
"""The largest message a provider may send (KEEL_RPC_MAX_LINE_BYTES' default)."""


def over_the_limit(limit: int) -> str:
    """Why a provider that sent a message over ``limit`` bytes is failed."""
    return f"the provider sent a line over {limit} bytes"


@dataclass(frozen=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any] | None = None


@dataclass(frozen=True)
class Notification:
    method: str
    params: dict[str, Any] | None = None


@dataclass(frozen=True)
class Response:
    id: RequestId
    result: Any


@dataclass(frozen=True)
class RpcError:
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class ErrorResponse:
    id: RequestId | None
    error: RpcError = field()


Message = Request | Notification | Response | ErrorResponse


def error_response(
    request_id: RequestId | None, code: int, message: str, data: Any = None
) -> ErrorResponse:
    return ErrorResponse(request_id, RpcError(int(code), message, data))


def _to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0"}
    if isinstance(message, Request | Notification):
        if isinstance(message, Request):
            out["id"] = message.id
        out["method"] = message.method
        if message.params is not None:
            out["params"] = message.params
    elif isinstance(message, Response):
        out["id"] = message.id
        out["result"] = message.result
    else:
        error: dict[str, Any] = {"code": message.error.code, "message": message.error.message}
        if message.error.data is not None:
            error["data"] = message.error.data
        out["id"] = message.id
        out["error"] = error
    return out


def encode(message: Message) -> bytes:
    """The message as compact UTF-8 JSON (no newline: JSON never needs one inside)."""
    return json.dumps(_to_dict(message), separators=(",", ":"), ensure_ascii=False).encode()


def encode_line(message: Message) -> bytes:
    """The message framed for stdio: one line."""
    return encode(message) + b"\n"


def _invalid(reason: str, request_id: RequestId | None = None) -> ProtocolError:
    return ProtocolError(
        f"invalid JSON-RPC 2.0 message: {reason}",
        rpc_code=ErrorCode.INVALID_REQUEST,
        data={"id": request_id},
    )


def _read_id(raw: dict[str, Any]) -> RequestId | None:
    value = raw.get("id")
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def _decode_error(raw: dict[str, Any], request_id: RequestId | None) -> ErrorResponse:
    error = raw["error"]
    if not isinstance(error, dict):
        raise _invalid("error is not an object", request_id)
    code, message = error.get("code"), error.get("message")
    if isinstance(code, bool) or not isinstance(code, int) or not isinstance(message, str):
        raise _invalid("error needs an integer code and a string message", request_id)
    return ErrorResponse(request_id, RpcError(code, message, error.get("data")))


def _decode_call(raw: dict[str, Any], request_id: RequestId | None) -> Request | Notification:
    method, params = raw["method"], raw.get("params")
    if not isinstance(method, str) or not method:
        raise _invalid("method is not a non-empty string", request_id)
    if params is not None and not isinstance(params, dict):
        raise _invalid("params must be an object (positional params are not used)", request_id)
    if "id" not in raw:
        return Notification(method, params)
    if request_id is None:
        raise _invalid("id must be a string or an integer")
    return Request(request_id, method, params)


def decode(data: bytes | str) -> Message:
    """Parse one JSON-RPC 2.0 message; ProtocolError (-32700 / -32600) when it is not one."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"parse error: {exc}", rpc_code=ErrorCode.PARSE_ERROR) from exc
    if isinstance(raw, list):
        raise _invalid("batches are not supported")
    if not isinstance(raw, dict):
        raise _invalid("not an object")
    request_id = _read_id(raw)
    if raw.get("jsonrpc") != "2.0":
        raise _invalid('jsonrpc must be "2.0"', request_id)
    kinds = [key for key in ("method", "result", "error") if key in raw]
    if len(kinds) != 1:
        raise _invalid("exactly one of method, result, error is required", request_id)
    if kinds[0] == "method":
        return _decode_call(raw, request_id)
    if "id" not in raw or (request_id is None and raw["id"] is not None):
        raise _invalid("a response needs an id", request_id)
    if kinds[0] == "error":
        return _decode_error(raw, request_id)
    if request_id is None:
        raise _invalid("a result needs a string or integer id")
    return Response(request_id, raw["result"])
