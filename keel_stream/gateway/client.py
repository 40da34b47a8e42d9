"""GatewayClient: requests with per-request timeouts, event notifications, and an activation
handshake that refuses a protocol revision or provider kind it cannot speak."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from keel_stream.errors import (
    BackendCancelRefused,
    BackendTimeout,
    BackendUnavailable,
    GatewayError,
    IncompatibleVersion,
    ProtocolError,
    RemoteError,
    RequestCancelled,
    WrongProviderKind,
)
from keel_stream.gateway.jsonrpc import (
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    RpcError,
)
from keel_stream.gateway.protocol import (
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    CancelParams,
    CancelResult,
    CloseParams,
    CloseResult,
    ErrorCode,
    Event,
    EventStreamParams,
    EventStreamResult,
    HealthResult,
    InitializeParams,
    InitializeResult,
    MessageSendParams,
    MessageSendResult,
    Method,
    PeerInfo,
    ProviderKind,
    SessionOpenParams,
    SessionOpenResult,
    SessionResumeParams,
    SessionResumeResult,
    ToolCallParams,
    ToolCallResult,
    ToolsListResult,
)
from keel_stream.gateway.transport import Transport

__all__ = ["GatewayClient", "error_from_rpc"]

log = logging.getLogger("keel_stream.gateway")
ResultT = TypeVar("ResultT", bound=BaseModel)

_BY_CODE: dict[int, type[GatewayError]] = {
    ErrorCode.TIMEOUT: BackendTimeout,
    ErrorCode.CANCELLED: RequestCancelled,
    ErrorCode.UNAVAILABLE: BackendUnavailable,
    ErrorCode.PARSE_ERROR: ProtocolError,
    ErrorCode.INVALID_REQUEST: ProtocolError,
    ErrorCode.METHOD_NOT_FOUND: ProtocolError,
    ErrorCode.INVALID_PARAMS: ProtocolError,
}


def error_from_rpc(error: RpcError) -> GatewayError:
    """The gateway error for a JSON-RPC error object."""
    cls = _BY_CODE.get(error.code, RemoteError)
    return cls(error.message, rpc_code=error.code, data=error.data)


class GatewayClient:
    """One connection to one provider of ``kind`` over ``transport``."""

    def __init__(
        self,
        transport: Transport,
        kind: ProviderKind,
        *,
        timeout_s: float = 30.0,
        client_info: PeerInfo | None = None,
    ) -> None:
        self.transport = transport
        self.kind = kind
        self.timeout_s = timeout_s
        self.client_info = client_info or PeerInfo(name="keel-stream", version="0.1.0")
        self.server: InitializeResult | None = None
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._closed_reason: str | None = None
        self._event_handlers: list[Callable[[Event], None]] = []
        self._notification_handlers: list[Callable[[Notification], None]] = []
        self._lost_handlers: list[Callable[[str], None]] = []
        self._pace: Callable[[str | None], Awaitable[None]] | None = None

    # -- the transport's sink ------------------------------------------------------------
    async def admit(self, message: Message) -> None:
        """An event waits for ``pace_events``' handler before it is taken (and the reader
        reads nothing meanwhile); every other message is taken at once. Only its sessionId is
        read here: the event is validated once, when it is taken."""
        if self._pace is None or not isinstance(message, Notification):
            return
        if message.method != Method.EVENT_STREAM:
            return
        params = message.params if isinstance(message.params, dict) else {}
        session = params.get("sessionId")
        await self._pace(session if isinstance(session, str) else None)

    def on_message(self, message: Message) -> None:
        if isinstance(message, Notification):
            self._notify(message)
        elif isinstance(message, Request):
            log.warning("provider sent a request (%s); this client serves none", message.method)
        elif message.id is None:
            log.warning("provider reported an error without id: %s", message.error.message)
        else:
            future = self._pending.pop(message.id, None)
            if future is None or future.done():
                return
            if isinstance(message, Response):
                future.set_result(message.result)
            else:
                assert isinstance(message, ErrorResponse)
                future.set_exception(error_from_rpc(message.error))

    def on_malformed(self, error: ProtocolError) -> None:
        log.warning("malformed message from provider: %s", error.message)

    def on_request_failed(self, request_id: RequestId, error: GatewayError) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def on_closed(self, reason: str) -> None:
        first = self._closed_reason is None
        self._closed_reason = reason
        if first:
            for handler in self._lost_handlers:
                handler(reason)
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(BackendUnavailable(f"provider connection lost: {reason}"))

    # -- notifications -------------------------------------------------------------------
    def on_event(self, handler: Callable[[Event], None]) -> None:
        """Call ``handler`` for every event.stream notification."""
        self._event_handlers.append(handler)

    def pace_events(self, handler: Callable[[str | None], Awaitable[None]]) -> None:
        """Await ``handler`` (with the event's sessionId) before each event is taken: the
        backend's event rate."""
        self._pace = handler

    def on_lost(self, handler: Callable[[str], None]) -> None:
        """Call ``handler`` once, with the reason, when the connection is lost or closed."""
        self._lost_handlers.append(handler)

    @property
    def lost(self) -> str | None:
        """Why the connection is gone; None while it is up."""
        return self._closed_reason

    def on_notification(self, handler: Callable[[Notification], None]) -> None:
        """Call ``handler`` for every notification (events included)."""
        self._notification_handlers.append(handler)

    def _notify(self, message: Notification) -> None:
        for raw_handler in self._notification_handlers:
            raw_handler(message)
        if message.method != Method.EVENT_STREAM:
            return
        try:
            event = Event.model_validate(message.params or {})
        except ValidationError as exc:
            log.warning("invalid event.stream notification: %s", exc)
            return
        for handler in self._event_handlers:
            handler(event)

    # -- requests ------------------------------------------------------------------------
    async def start(self) -> None:
        await self.transport.start(self)

    async def request(
        self,
        method: str,
        params: BaseModel | dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Send one request and return its raw result; errors raise GatewayError subclasses."""
        if method != Method.INITIALIZE and self.server is None:
            raise ProtocolError(f"{method} before a successful initialize")
        if self._closed_reason is not None:
            raise BackendUnavailable(f"provider connection lost: {self._closed_reason}")
        if isinstance(params, BaseModel):
            params = params.model_dump(by_alias=True, exclude_none=True, mode="json")
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout):  # sending counts: a provider may read nothing
                await self.transport.send(Request(request_id, method, params))
                return await future
        except TimeoutError:
            raise BackendTimeout(
                f"{method} got no answer within {timeout}s", rpc_code=ErrorCode.TIMEOUT
            ) from None
        except (ConnectionError, OSError) as exc:
            raise BackendUnavailable(f"cannot send {method}: {exc}") from exc
        finally:
            self._pending.pop(request_id, None)

    async def _call(
        self,
        method: Method,
        params: BaseModel | None,
        result_type: type[ResultT],
        timeout_s: float | None = None,
    ) -> ResultT:
        raw = await self.request(method, params, timeout_s)
        try:
            return result_type.model_validate(raw)
        except ValidationError as exc:
            raise ProtocolError(f"invalid {method} result: {exc}") from exc

    async def initialize(self, timeout_s: float | None = None) -> InitializeResult:
        """Handshake; ActivationRefused (and no activation) on a version or kind mismatch."""
        params = InitializeParams(
            protocol_version=PROTOCOL_VERSION, kind=self.kind, client_info=self.client_info
        )
        result = await self._call(Method.INITIALIZE, params, InitializeResult, timeout_s)
        if result.protocol_version not in SUPPORTED_VERSIONS:
            raise IncompatibleVersion(
                f"provider speaks protocol {result.protocol_version!r}; "
                f"this client supports {', '.join(SUPPORTED_VERSIONS)}",
                data={"protocolVersion": result.protocol_version},
            )
        if result.kind != self.kind:
            raise WrongProviderKind(f"provider is a {result.kind}, expected a {self.kind}")
        self.server = result
        return result

    async def open_session(self, metadata: dict[str, str] | None = None) -> SessionOpenResult:
        params = SessionOpenParams(metadata=metadata or {})
        return await self._call(Method.SESSION_OPEN, params, SessionOpenResult)

    async def resume_session(self, session_id: str) -> SessionResumeResult:
        params = SessionResumeParams(session_id=session_id)
        return await self._call(Method.SESSION_RESUME, params, SessionResumeResult)

    async def send_message(
        self, session_id: str, text: str, *, wait: bool = False, timeout_ms: int | None = None
    ) -> MessageSendResult:
        params = MessageSendParams(
            session_id=session_id, text=text, wait=wait, timeout_ms=timeout_ms
        )
        return await self._call(Method.MESSAGE_SEND, params, MessageSendResult)

    async def subscribe(self, session_id: str, after_seq: int = 0) -> EventStreamResult:
        params = EventStreamParams(session_id=session_id, after_seq=after_seq)
        return await self._call(Method.EVENT_STREAM, params, EventStreamResult)

    async def cancel(self, session_id: str, turn_id: str) -> CancelResult:
        """Cancel a turn; an error answer raises BackendCancelRefused (the turn goes on)."""
        params = CancelParams(session_id=session_id, turn_id=turn_id)
        try:
            return await self._call(Method.CANCEL, params, CancelResult)
        except (RemoteError, BackendUnavailable, ProtocolError, RequestCancelled) as exc:
            raise BackendCancelRefused(
                f"cancel refused: {exc.message}", rpc_code=exc.rpc_code, data=exc.data
            ) from exc

    async def health(self) -> HealthResult:
        return await self._call(Method.HEALTH, None, HealthResult)

    async def close_session(self, session_id: str) -> CloseResult:
        return await self._call(Method.CLOSE, CloseParams(session_id=session_id), CloseResult)

    async def shutdown(self, timeout_s: float | None = None) -> CloseResult:
        """Ask the provider for a graceful shutdown (close without sessionId)."""
        return await self._call(Method.CLOSE, CloseParams(), CloseResult, timeout_s)

    async def list_tools(self) -> ToolsListResult:
        return await self._call(Method.TOOLS_LIST, None, ToolsListResult)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        params = ToolCallParams(name=name, arguments=arguments)
        return await self._call(Method.TOOLS_CALL, params, ToolCallResult)

    async def aclose(self) -> None:
        """Close the transport (for stdio: the full process-group reclaim)."""
        await self.transport.close()
        self.on_closed("closed by the client")
