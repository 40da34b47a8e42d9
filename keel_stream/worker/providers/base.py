"""One provider interface: a request in, a stream of deltas, tool calls and a finish out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Finish",
    "Provider",
    "ProviderEvent",
    "ProviderRequest",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments."""


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """What the model is asked: the context messages (transcript context view) and the tools."""

    tenant: str
    session: str
    generation_id: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[ToolSpec] = ()
    attempt: int = 1
    turn: int = 1


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Finish:
    stop_reason: str
    """end_turn, tool_use, max_tokens, or error."""
    usage: Mapping[str, int] | None = None
    error: str | None = None


ProviderEvent = TextDelta | ToolCall | Finish


class Provider(Protocol):
    """A model behind some wire protocol."""

    name: str
    model: str

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        """Deltas as they come, then exactly one Finish (stopReason error on failure)."""
        ...
