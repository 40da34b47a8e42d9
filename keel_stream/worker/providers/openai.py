"""An OpenAI-compatible chat-completions provider over httpx, streaming (SSE)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

import httpx
from httpx_sse import aconnect_sse

from keel_stream.worker.providers.base import (
    Finish,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
)

__all__ = ["OpenAIProvider"]

_STOP_REASONS: Final = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


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
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {
                        "name": b["name"],
                        "arguments": json.dumps(b.get("arguments", {})),
                    },
                }
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "toolCall"
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


class OpenAIProvider:
    """Configured by KEEL_OPENAI_BASE_URL, KEEL_OPENAI_API_KEY and KEEL_OPENAI_MODEL."""

    name = "openai"

    def __init__(
        self, base_url: str, api_key: str | None, model: str, timeout_s: float = 60
    ) -> None:
        self.model = model
        self._base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_chat_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        calls: dict[int, dict[str, str]] = {}
        finish_reason: str | None = None
        usage: dict[str, int] | None = None
        try:
            async with (
                httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client,
                aconnect_sse(
                    client, "POST", f"{self._base_url}/chat/completions", json=body
                ) as source,
            ):
                source.response.raise_for_status()
                async for sse in source.aiter_sse():
                    if sse.data.strip() == "[DONE]":
                        break
                    chunk = json.loads(sse.data)
                    if chunk.get("usage"):
                        usage = {
                            "input": int(chunk["usage"].get("prompt_tokens", 0)),
                            "output": int(chunk["usage"].get("completion_tokens", 0)),
                        }
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            yield TextDelta(delta["content"])
                        for part in delta.get("tool_calls") or []:
                            call = calls.setdefault(
                                int(part.get("index", 0)), {"id": "", "name": "", "arguments": ""}
                            )
                            function = part.get("function") or {}
                            call["id"] = part.get("id") or call["id"]
                            call["name"] = function.get("name") or call["name"]
                            call["arguments"] += function.get("arguments") or ""
                        finish_reason = choice.get("finish_reason") or finish_reason
        except (httpx.HTTPError, json.JSONDecodeError, KeyError, ValueError) as exc:
            yield Finish("error", usage, error=f"{exc.__class__.__name__}: {exc}")
            return
        for index in sorted(calls):
            call = calls[index]
            arguments = json.loads(call["arguments"]) if call["arguments"].strip() else {}
            yield ToolCall(call["id"], call["name"], arguments)
        yield Finish(_STOP_REASONS.get(finish_reason or "stop", finish_reason or "end_turn"), usage)
