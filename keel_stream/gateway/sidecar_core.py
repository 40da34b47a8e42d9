"""The semantics of the reference sidecar, independent of its transport.

``RefSidecar.handle`` takes one raw JSON-RPC message and returns an ``Outcome``: the response to
write (None for a notification), an optional event subscription to pump after the response, and
whether the provider was asked to shut down.  Sessions live in memory, and with a state file
(``--state-file``) also in that JSON file: ids, the closed flag and every event, rewritten
atomically after each change and loaded at start, so a restarted sidecar resumes them.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from keel_stream.errors import ProtocolError
from keel_stream.gateway.jsonrpc import (
    Message,
    Notification,
    Request,
    Response,
    decode,
    error_response,
)
from keel_stream.gateway.protocol import (
    AGENT_METHODS,
    PROTOCOL_VERSION,
    TOOL_METHODS,
    CancelParams,
    CancelResult,
    Capabilities,
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
    Usage,
)
from keel_stream.gateway.sidecar_tools import TOOLS, run_tool

__all__ = ["Outcome", "RefSidecar", "RpcFailure", "SidecarOptions", "Subscription"]

Subscription = asyncio.Queue[Notification | None]
CRASH_STATUS = 3


class RpcFailure(Exception):
    """A handler's error answer."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = int(code), message, data


@dataclass(frozen=True)
class SidecarOptions:
    kind: ProviderKind = ProviderKind.AGENT
    slow_ms: int = 0
    ignore_cancel: bool = False
    crash_after: int | None = None
    hang_handshake: bool = False
    version_override: str | None = None
    forbid_env: tuple[str, ...] = ()
    require_env: tuple[str, ...] = ()
    grandchildren: int = 0
    usage: bool = True
    http_port: int | None = None
    state_file: str | None = None
    ignore_stdin_eof: bool = False
    oversized_answer: int = 0
    ignore_sigterm: bool = False
    """With N > 0, tools.call and message.send are answered with one line of N bytes or more."""
    flood: int = 0
    """With N > 0, every turn first emits N text.delta events as fast as it can (an event flood)."""


@dataclass
class Outcome:
    response: Message | None
    subscription: Subscription | None = None
    shutdown: bool = False


@dataclass
class _Subscribed:
    result: EventStreamResult
    queue: Subscription


@dataclass
class _Session:
    id: str
    events: list[Notification] = field(default_factory=list)
    subscribers: list[Subscription] = field(default_factory=list)
    turns: dict[str, asyncio.Task[str]] = field(default_factory=dict)
    closed: bool = False

    @property
    def last_seq(self) -> int:
        return len(self.events)


_Reply = BaseModel | _Subscribed
_OVERSIZED = frozenset({Method.TOOLS_CALL, Method.MESSAGE_SEND})
_Handler = Callable[[dict[str, Any]], Awaitable[_Reply]]


class RefSidecar:
    """A minimal AgentBackend or ToolProvider with switches that simulate misbehaviour."""

    def __init__(self, options: SidecarOptions) -> None:
        self.options = options
        self.received = 0
        self.sessions: dict[str, _Session] = self._load()
        self._stopping = False
        self._handlers: dict[str, _Handler] = {
            Method.INITIALIZE: self._initialize,
            Method.SESSION_OPEN: self._open,
            Method.SESSION_RESUME: self._resume,
            Method.MESSAGE_SEND: self._send,
            Method.EVENT_STREAM: self._subscribe,
            Method.CANCEL: self._cancel,
            Method.HEALTH: self._health,
            Method.CLOSE: self._close,
            Method.TOOLS_LIST: self._tools_list,
            Method.TOOLS_CALL: self._tools_call,
        }

    async def handle(self, data: bytes | str) -> Outcome:
        self.received += 1
        if self.options.crash_after is not None and self.received > self.options.crash_after:
            os._exit(CRASH_STATUS)
        try:
            message = decode(data)
        except ProtocolError as exc:
            request_id = exc.data.get("id") if isinstance(exc.data, dict) else None
            return Outcome(error_response(request_id, exc.rpc_code or -32600, exc.message))
        if not isinstance(message, Request):
            return Outcome(None)
        return await self._dispatch(message)

    async def _dispatch(self, request: Request) -> Outcome:
        allowed = AGENT_METHODS if self.options.kind is ProviderKind.AGENT else TOOL_METHODS
        handler = self._handlers.get(request.method)
        if handler is None or request.method not in allowed:
            message = f"method not found: {request.method} ({self.options.kind})"
            return Outcome(error_response(request.id, ErrorCode.METHOD_NOT_FOUND, message))
        params = request.params or {}
        try:
            reply = await handler(params)
        except ValidationError as exc:
            text = f"invalid params: {exc.error_count()} error(s): {exc.errors()[0]['msg']}"
            return Outcome(error_response(request.id, ErrorCode.INVALID_PARAMS, text))
        except RpcFailure as exc:
            return Outcome(error_response(request.id, exc.code, exc.message, exc.data))
        shutdown = request.method == Method.CLOSE and params.get("sessionId") is None
        if isinstance(reply, _Subscribed):
            return Outcome(Response(request.id, _dump(reply.result)), reply.queue)
        result = _dump(reply)
        if self.options.oversized_answer and request.method in _OVERSIZED:
            result["padding"] = "x" * self.options.oversized_answer
        return Outcome(Response(request.id, result), shutdown=shutdown)

    def _load(self) -> dict[str, _Session]:
        """The sessions of the state file (none without one); OSError or ValueError when it
        cannot be read."""
        path = self.options.state_file
        if path is None or not Path(path).exists():
            return {}
        document = orjson.loads(Path(path).read_bytes())
        sessions = {}
        for stored in document["sessions"]:
            events = [Notification(Method.EVENT_STREAM, params) for params in stored["events"]]
            sessions[stored["id"]] = _Session(stored["id"], events, closed=stored["closed"])
        return sessions

    def _save(self) -> None:
        if self.options.state_file is None:
            return
        target = Path(self.options.state_file)
        document = {
            "sessions": [
                {"id": s.id, "closed": s.closed, "events": [n.params for n in s.events]}
                for s in self.sessions.values()
            ]
        }
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(orjson.dumps(document))
        temporary.replace(target)

    def _session(self, session_id: str) -> _Session:
        session = self.sessions.get(session_id)
        if session is None or session.closed or self._stopping:
            data = {"sessionId": session_id}
            raise RpcFailure(ErrorCode.UNAVAILABLE, f"session unavailable: {session_id}", data)
        return session

    def unsubscribe(self, queue: Subscription) -> None:
        for session in self.sessions.values():
            if queue in session.subscribers:
                session.subscribers.remove(queue)

    def end_all(self) -> None:
        """Shut down: turns cancelled, subscriptions ended, every session unavailable.  The
        state file keeps them open: a restarted sidecar resumes them."""
        self._stopping = True
        for session in self.sessions.values():
            self._stop(session)

    def _end(self, session: _Session) -> None:
        session.closed = True
        self._save()
        self._stop(session)

    def _stop(self, session: _Session) -> None:
        for turn in session.turns.values():
            turn.cancel()
        for queue in session.subscribers:
            queue.put_nowait(None)
        session.subscribers.clear()

    def _emit(self, session: _Session, turn_id: str, kind: str, data: dict[str, Any]) -> None:
        event = Event(
            session_id=session.id, seq=session.last_seq + 1, turn_id=turn_id, type=kind, data=data
        )
        notification = Notification(Method.EVENT_STREAM, _dump(event))
        session.events.append(notification)
        self._save()
        for queue in session.subscribers:
            queue.put_nowait(notification)

    def _usage(self, text: str, reply: str) -> Usage | None:
        if not self.options.usage:
            return None
        return Usage(input_tokens=len(text.split()), output_tokens=len(reply.split()))

    async def _run_turn(self, session: _Session, turn_id: str, text: str) -> str:
        reply = f"echo: {text}"
        self._emit(session, turn_id, "turn.started", {})
        for _ in range(self.options.flood):
            self._emit(session, turn_id, "text.delta", {"text": "."})
        try:
            for index, word in enumerate(reply.split(" ")):
                await asyncio.sleep(self.options.slow_ms / 1000)
                self._emit(
                    session, turn_id, "text.delta", {"text": word if not index else f" {word}"}
                )
        except asyncio.CancelledError:
            self._emit(session, turn_id, "turn.cancelled", {})
            raise
        data: dict[str, Any] = {"text": reply}
        usage = self._usage(text, reply)
        if usage is not None:
            data["usage"] = _dump(usage)
        self._emit(session, turn_id, "turn.finished", data)
        return reply

    # -- methods -------------------------------------------------------------------------
    async def _initialize(self, params: dict[str, Any]) -> _Reply:
        InitializeParams.model_validate(params)
        if self.options.hang_handshake:
            await asyncio.Event().wait()
        capabilities = Capabilities(
            cancel=not self.options.ignore_cancel, resume=True, usage=self.options.usage
        )
        return InitializeResult(
            protocol_version=self.options.version_override or PROTOCOL_VERSION,
            kind=self.options.kind,
            server_info=PeerInfo(name="keel-sidecar-ref", version="0.1.0"),
            capabilities=capabilities,
            tools=list(TOOLS) if self.options.kind is ProviderKind.TOOL else [],
        )

    async def _open(self, params: dict[str, Any]) -> _Reply:
        SessionOpenParams.model_validate(params)
        session = _Session(id=f"ref-{uuid.uuid4().hex[:12]}")
        self.sessions[session.id] = session
        self._save()
        metering = "external" if self.options.usage else "none"
        return SessionOpenResult(
            session_id=session.id, state_owner="external", metering=metering, last_seq=0
        )

    async def _resume(self, params: dict[str, Any]) -> _Reply:
        p = SessionResumeParams.model_validate(params)
        session = self.sessions.get(p.session_id)
        if session is None or session.closed or self._stopping:
            return SessionResumeResult(resumed=False, last_seq=0)
        return SessionResumeResult(resumed=True, last_seq=session.last_seq)

    async def _send(self, params: dict[str, Any]) -> _Reply:
        p = MessageSendParams.model_validate(params)
        session = self._session(p.session_id)
        turn_id = f"turn-{uuid.uuid4().hex[:12]}"
        task = asyncio.create_task(self._run_turn(session, turn_id, p.text))
        session.turns[turn_id] = task
        if not p.wait:
            return MessageSendResult(turn_id=turn_id)
        timeout = None if p.timeout_ms is None else p.timeout_ms / 1000
        done, _ = await asyncio.wait({task}, timeout=timeout)
        data = {"turnId": turn_id}
        if not done:
            task.cancel()
            raise RpcFailure(ErrorCode.TIMEOUT, f"turn not finished in {p.timeout_ms} ms", data)
        if task.cancelled():
            raise RpcFailure(ErrorCode.CANCELLED, "the turn was cancelled", data)
        reply = task.result()
        usage = self._usage(p.text, reply)
        return MessageSendResult(turn_id=turn_id, text=reply, usage=usage)

    async def _subscribe(self, params: dict[str, Any]) -> _Reply:
        p = EventStreamParams.model_validate(params)
        session = self._session(p.session_id)
        queue: Subscription = asyncio.Queue()
        for notification in session.events[p.after_seq :]:
            queue.put_nowait(notification)
        session.subscribers.append(queue)
        return _Subscribed(EventStreamResult(subscribed=True, last_seq=session.last_seq), queue)

    async def _cancel(self, params: dict[str, Any]) -> _Reply:
        p = CancelParams.model_validate(params)
        session = self._session(p.session_id)
        if self.options.ignore_cancel:
            reason = {"reason": "cancel_unsupported", "turnId": p.turn_id}
            raise RpcFailure(ErrorCode.UNAVAILABLE, "this backend cannot cancel a turn", reason)
        turn = session.turns.get(p.turn_id)
        if turn is None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"unknown turn: {p.turn_id}")
        if turn.done():
            return CancelResult(cancelled=False)
        turn.cancel()
        await asyncio.wait({turn})
        return CancelResult(cancelled=True)

    async def _health(self, params: dict[str, Any]) -> _Reply:
        return HealthResult(status="ok")

    async def _close(self, params: dict[str, Any]) -> _Reply:
        p = CloseParams.model_validate(params)
        if p.session_id is None:
            self.end_all()
            return CloseResult(closed=True)
        self._end(self._session(p.session_id))
        return CloseResult(closed=True)

    async def _tools_list(self, params: dict[str, Any]) -> _Reply:
        return ToolsListResult(tools=list(TOOLS))

    async def _tools_call(self, params: dict[str, Any]) -> _Reply:
        p = ToolCallParams.model_validate(params)
        if p.name not in {tool.name for tool in TOOLS}:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"unknown tool: {p.name}")
        return ToolCallResult(content=run_tool(p.name, p.arguments))


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")
