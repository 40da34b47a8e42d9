"""One provider interface: a request in, a stream of deltas, tool calls and a finish out."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Finish",
    "Provider",
    "ProviderEvent",
    "ProviderFailed",
    "ProviderRequest",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
    "json_object",
]


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond the range of a number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_object(raw: str) -> dict[str, Any] | None:
    """``raw`` as a JSON object, strictly: NaN, Infinity and numbers beyond a float's range
    are not JSON (Python's json reads them; the ledger refuses them). None when it is not one."""
    try:
        value = json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except ValueError:  # JSONDecodeError is one
        return None
    return value if isinstance(value, dict) else None


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
    system_prompt: str | None = None
    """Sent as the first (system) message of the request."""
    temperature: float | None = None
    max_tokens: int | None = None
    """None: the provider's own default."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    invalid_arguments: str | None = None
    """The raw arguments text when it was not a JSON object (``json_object``); the loop answers
    the call with an isError result."""


@dataclass(frozen=True, slots=True)
class Finish:
    stop_reason: str
    """end_turn, tool_use, max_tokens, or error."""
    usage: Mapping[str, int] | None = None
    error: str | None = None
    retriable: bool = True
    """With an error: False for a deterministic failure (e.g. HTTP 401, 400): trying again
    cannot help, the run fails at once."""
    retry_after_s: float | None = None
    """With an error: the wait the server asked for on the failure that ended the request
    (Retry-After, retry-after-ms); the run's next attempt waits it out too."""


ProviderEvent = TextDelta | ToolCall | Finish


class ProviderFailed(Exception):
    """A provider request failed after the provider's own retries; not `retriable` when it was
    a deterministic failure (trying again cannot help)."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class Provider(Protocol):
    """A model behind some wire protocol."""

    name: str
    model: str

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        """Deltas as they come, then exactly one Finish (stopReason error on failure)."""
        ...

    async def summarize(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """A summary of these context messages, to replace them (compaction).

        Raises ProviderFailed when the provider cannot produce one."""
        ...
