"""The chat-completions wire format: messages out, streamed chunks in."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.worker.providers.base import (
    Finish,
    ProviderRequest,
    ToolCall,
    ToolSpec,
    json_object,
)

__all__ = [
    "ChatStream",
    "WireError",
    "chat_body",
    "completion_text",
    "to_chat_messages",
    "to_chat_tools",
]

_STOP_REASONS: Final = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class WireError(ValueError):
    """The server sent something that is not the chat-completions format."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _chat_call(block: Mapping[str, Any]) -> dict[str, Any]:
    # A call whose arguments were not a JSON object goes back as the model sent it.
    raw = block.get("invalidArguments")
    arguments = raw if isinstance(raw, str) else json.dumps(block.get("arguments", {}))
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }


def to_chat_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The transcript's context view in the chat-completions message shape."""
    chat: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "user":
            chat.append({"role": "user", "content": _text(m.get("content"))})
        elif role == "summary":
            chat.append({"role": "system", "content": f"Summary so far: {_text(m.get('content'))}"})
        elif role == "assistant":
            blocks = m.get("content") or []
            calls = [
                _chat_call(b) for b in blocks if isinstance(b, dict) and b.get("type") == "toolCall"
            ]
            message: dict[str, Any] = {"role": "assistant", "content": _text(blocks) or None}
            if calls:
                message["tool_calls"] = calls
            chat.append(message)
        elif role == "toolResult":
            chat.append(
                {
                    "role": "tool",
                    "tool_call_id": m["toolCallId"],
                    "content": _text(m.get("content")),
                }
            )
    return chat


def to_chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def chat_body(model: str, request: ProviderRequest) -> dict[str, Any]:
    """The streamed chat-completions request body: the system prompt first, then the context;
    temperature and max_tokens only when the request sets them (else the server's defaults)."""
    messages = to_chat_messages(request.messages)
    if request.system_prompt:
        messages.insert(0, {"role": "system", "content": request.system_prompt})
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.tools:
        body["tools"] = to_chat_tools(request.tools)
    return body


def _usage(raw: Any) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    return {
        "input": int(raw.get("prompt_tokens") or 0),
        "output": int(raw.get("completion_tokens") or 0),
    }


def _tool_call(call: Mapping[str, str]) -> ToolCall:
    raw = call["arguments"]
    if not raw.strip():
        return ToolCall(call["id"], call["name"], {})
    arguments = json_object(raw)
    if arguments is None:
        return ToolCall(call["id"], call["name"], {}, invalid_arguments=raw)
    return ToolCall(call["id"], call["name"], arguments)


@dataclass
class ChatStream:
    """One streamed completion, assembled chunk by chunk.

    Complete only once a finish_reason arrived and `[DONE]` ended the stream: `[DONE]` alone
    does not make an answer (a proxy may end a cut stream with it), and a stream cut after its
    finish_reason lost what follows it (the usage the request asks for)."""

    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    done: bool = False
    _calls: dict[int, dict[str, str]] = field(default_factory=dict)

    def feed(self, data: str) -> list[str]:
        """Take one SSE data payload; the text pieces it carries. WireError if malformed."""
        if data.strip() == "[DONE]":
            self.done = True
            return []
        try:
            return self._chunk(json.loads(data))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise WireError(
                f"malformed chunk ({exc.__class__.__name__}: {exc}): {data[:200]}"
            ) from exc

    def _chunk(self, chunk: dict[str, Any]) -> list[str]:
        if chunk.get("error"):
            raise WireError(f"error in stream: {json.dumps(chunk['error'])[:2000]}")
        self.usage = _usage(chunk.get("usage")) or self.usage
        texts: list[str] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                texts.append(str(delta["content"]))
            for part in delta.get("tool_calls") or []:
                call = self._calls.setdefault(
                    int(part.get("index", 0)), {"id": "", "name": "", "arguments": ""}
                )
                function = part.get("function") or {}
                call["id"] = part.get("id") or call["id"]
                call["name"] = function.get("name") or call["name"]
                call["arguments"] += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return texts

    @property
    def complete(self) -> bool:
        return self.finish_reason is not None and self.done

    def incomplete_error(self) -> str:
        if self.finish_reason is not None:
            return "stream incomplete: cut after its finish_reason, before [DONE]"
        ending = "[DONE]" if self.done else "the end of the stream"
        return f"stream incomplete: {ending} without a finish_reason"

    def tool_calls(self) -> list[ToolCall]:
        return [_tool_call(self._calls[index]) for index in sorted(self._calls)]

    def finish(self) -> Finish:
        reason = self.finish_reason or "stop"
        return Finish(_STOP_REASONS.get(reason, reason), self.usage)


def completion_text(body: Any) -> str:
    """The answer text of a non-streamed completion. WireError if there is none."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (LookupError, TypeError) as exc:
        raise WireError(f"no message in the completion: {json.dumps(body)[:200]}") from exc
    if not isinstance(content, str) or not content.strip():
        raise WireError("the completion has no text")
    return content
