"""The external-gateway protocol, revision 2026-11-07: method names, error codes and the shapes
of every method's params and result.

JSON-RPC 2.0 carries it over stdio (newline-delimited JSON) or Streamable HTTP; only the transport
is shared with MCP, the methods are not MCP's. One connection carries exactly one provider kind:

- AgentBackend: initialize, session.open, session.resume, message.send, event.stream, cancel,
  health, close.  ``event.stream`` is a request with an id (subscribe; its result acknowledges the
  subscription) and, from the provider, notifications without an id (one event each).
- ToolProvider: initialize (its result advertises the tools), tools.list, tools.call, health,
  close.  The seed names no tool methods; ``tools.list`` and ``tools.call`` are this project's
  choice, spelled like the rest of the dotted method set (not MCP's ``tools/call``).

Fields are camelCase on the wire and snake_case in Python.  Params models forbid unknown fields
(a provider answers -32602); result models ignore them (a newer provider may say more).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "AGENT_METHODS",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "TOOL_METHODS",
    "CancelParams",
    "CancelResult",
    "Capabilities",
    "CloseParams",
    "CloseResult",
    "ErrorCode",
    "Event",
    "EventStreamParams",
    "EventStreamResult",
    "HealthResult",
    "InitializeParams",
    "InitializeResult",
    "MessageSendParams",
    "MessageSendResult",
    "Method",
    "PeerInfo",
    "ProviderKind",
    "SessionOpenParams",
    "SessionOpenResult",
    "SessionResumeParams",
    "SessionResumeResult",
    "ToolCallParams",
    "ToolCallResult",
    "ToolSpec",
    "ToolsListResult",
    "Usage",
]

PROTOCOL_VERSION = "2026-11-07"
SUPPORTED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)


class Method(StrEnum):
    INITIALIZE = "initialize"
    SESSION_OPEN = "session.open"
    SESSION_RESUME = "session.resume"
    MESSAGE_SEND = "message.send"
    EVENT_STREAM = "event.stream"
    CANCEL = "cancel"
    HEALTH = "health"
    CLOSE = "close"
    TOOLS_LIST = "tools.list"
    TOOLS_CALL = "tools.call"


class ProviderKind(StrEnum):
    AGENT = "AgentBackend"
    TOOL = "ToolProvider"


_COMMON = frozenset({Method.INITIALIZE, Method.HEALTH, Method.CLOSE})
AGENT_METHODS: frozenset[Method] = _COMMON | {
    Method.SESSION_OPEN,
    Method.SESSION_RESUME,
    Method.MESSAGE_SEND,
    Method.EVENT_STREAM,
    Method.CANCEL,
}
TOOL_METHODS: frozenset[Method] = _COMMON | {Method.TOOLS_LIST, Method.TOOLS_CALL}


class ErrorCode(IntEnum):
    """JSON-RPC 2.0's standard codes and the three the protocol reserves."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    TIMEOUT = -32001
    CANCELLED = -32002
    UNAVAILABLE = -32003


class _Params(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class _Result(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class PeerInfo(_Result):
    name: str
    version: str


class InitializeParams(_Params):
    protocol_version: str
    kind: ProviderKind
    client_info: PeerInfo


class Capabilities(_Result):
    cancel: bool = False
    resume: bool = False
    usage: bool = False


class ToolSpec(_Result):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class InitializeResult(_Result):
    protocol_version: str
    kind: ProviderKind
    server_info: PeerInfo
    capabilities: Capabilities = Field(default_factory=Capabilities)
    tools: list[ToolSpec] = Field(default_factory=list)


class SessionOpenParams(_Params):
    metadata: dict[str, str] = Field(default_factory=dict)


class SessionOpenResult(_Result):
    session_id: str
    state_owner: Literal["external"]
    metering: Literal["external", "none"]
    last_seq: int = Field(ge=0)


class SessionResumeParams(_Params):
    session_id: str


class SessionResumeResult(_Result):
    resumed: bool
    last_seq: int = Field(default=0, ge=0)


class Usage(_Result):
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


class MessageSendParams(_Params):
    session_id: str
    text: str
    wait: bool = False
    timeout_ms: int | None = Field(default=None, gt=0)


class MessageSendResult(_Result):
    turn_id: str
    text: str | None = None
    usage: Usage | None = None


class EventStreamParams(_Params):
    session_id: str
    after_seq: int = Field(default=0, ge=0)


class EventStreamResult(_Result):
    subscribed: bool
    last_seq: int = Field(ge=0)


class Event(_Result):
    """The params of one event.stream notification."""

    session_id: str
    seq: int = Field(ge=1)
    turn_id: str | None = None
    type: str
    data: dict[str, Any] = Field(default_factory=dict)


class CancelParams(_Params):
    session_id: str
    turn_id: str


class CancelResult(_Result):
    """cancelled=false: the turn had already ended; nothing was stopped."""

    cancelled: bool


class HealthResult(_Result):
    status: Literal["ok", "degraded", "unavailable"]


class CloseParams(_Params):
    session_id: str | None = None


class CloseResult(_Result):
    closed: bool


class ToolsListResult(_Result):
    tools: list[ToolSpec]


class ToolCallParams(_Params):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallResult(_Result):
    content: Any = None
    is_error: bool = False
