"""The fake provider: deterministic, scriptable from the user's own words.

By default it answers `echo: <the latest user text>`, one word per delta. Directives in the
latest user message script it:

- `[[tool:NAME {json args}]]`: first ask for the tool, answer after its result arrives
  (arguments that are not a JSON object, NaN included, are kept as `invalidArguments`); several
  such directives ask for several tools in one answer;
- `[[fail:N]]`: fail (stopReason error) on the first N attempts of the run;
- `[[fail-after-tool]]`: fail on the request that follows a tool result;
- `[[slow:MS]]`: wait MS milliseconds before each delta (a slow token stream).

Its stream has the limits of every provider (KEEL_PROVIDER_STALL_TIMEOUT_S,
KEEL_PROVIDER_REQUEST_TIMEOUT_S): a `slow` pause longer than the stall bound ends the answer
with a (retriable) error.

Its summary (compaction) is `summary of N messages: ` and the start of each user/assistant text.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, Final

from keel_stream.worker.limits import StreamLimits
from keel_stream.worker.providers.base import (
    Finish,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
    json_object,
)
from keel_stream.worker.providers.bounds import bounded

__all__ = ["FakeProvider"]

_DIRECTIVE: Final = re.compile(r"\[\[(\w[\w-]*)(?::([^\]]*))?\]\]")
_SUMMARY_LIMIT: Final = 2000


def _latest_user(messages: Sequence[Mapping[str, Any]]) -> tuple[str, bool]:
    """The latest user text, and whether a tool result came after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user":
            after = messages[index + 1 :]
            return str(message.get("content") or ""), any(
                m.get("role") == "toolResult" for m in after
            )
    return "", False


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _result_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "toolResult":
            content = message.get("content") or []
            return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _call(generation_id: str, index: int, spec: str) -> ToolCall:
    """The index-th tool directive of the message as a call (ids: call-<generation>, then
    call-<generation>-2, -3, ...)."""
    name, _, raw = spec.strip().partition(" ")
    arguments = json_object(raw) if raw.strip() else {}
    call_id = f"call-{generation_id}" + (f"-{index + 1}" if index else "")
    if arguments is None:  # e.g. NaN: the call is answered with an error result
        return ToolCall(call_id, name, {}, invalid_arguments=raw)
    return ToolCall(call_id, name, arguments)


class FakeProvider:
    name = "fake"

    def __init__(self, model: str = "fake", limits: StreamLimits | None = None) -> None:
        self.model = model
        self._limits = limits or StreamLimits()

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        return bounded(self._script(request), self._limits, "fake provider")

    async def _script(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        text, after_tool = _latest_user(request.messages)
        directives = {m[1]: (m[2] or "") for m in _DIRECTIVE.finditer(text)}
        plain = _DIRECTIVE.sub("", text).strip()
        delay = int(directives.get("slow") or 0) / 1000
        fail_attempts = int(directives.get("fail") or 0)
        usage = {"input": sum(len(str(m.get("content", ""))) for m in request.messages)}
        if request.attempt <= fail_attempts or (after_tool and "fail-after-tool" in directives):
            yield Finish("error", usage, error="fake provider failure")
            return
        calls = [m[2] or "" for m in _DIRECTIVE.finditer(text) if m[1] == "tool"]
        if calls and not after_tool:
            for index, spec in enumerate(calls):
                yield _call(request.generation_id, index, spec)
            yield Finish("tool_use", {**usage, "output": len(calls)})
            return
        reply = f"done: {_result_text(request.messages)}" if after_tool else f"echo: {plain}"
        words = reply.split(" ")
        for index, word in enumerate(words):
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(word if index == 0 else f" {word}")
        yield Finish("end_turn", {**usage, "output": len(words)})

    async def summarize(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """`summary of N messages: ` and the first 40 characters of each user/assistant text."""
        texts = [
            _text_of(m.get("content"))[:40]
            for m in messages
            if m.get("role") in ("user", "assistant")
        ]
        summary = f"summary of {len(messages)} messages: " + " | ".join(texts)
        return summary[:_SUMMARY_LIMIT]
