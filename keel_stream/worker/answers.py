"""One request to the model: stream it (partials out as they come), assemble the answer.

The provider's output is untrusted: every tool call is made committable and answerable (an id,
a name, object arguments; arguments that were not a JSON object are kept as sent and answered
with an error result). A cancel stops the stream at once and keeps the text streamed so far.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from keel_stream.kernel import StopReason
from keel_stream.store.protocol import Claim
from keel_stream.worker.agent_settings import TurnModel
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers.base import (
    Finish,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from keel_stream.worker.signals import Signals, Stopped, stream_unless_stopped

__all__ = ["Answer", "ask_model"]


@dataclass(frozen=True, slots=True)
class Answer:
    generation_id: str
    content: list[dict[str, Any]]
    finish: Finish
    cancelled: bool


def _call_block(call: ToolCall, fallback_id: str) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "toolCall",
        "id": call.id or fallback_id,
        "name": call.name or "unknown",
        "arguments": dict(call.arguments) if isinstance(call.arguments, Mapping) else {},
    }
    if call.invalid_arguments is not None:
        block["invalidArguments"] = call.invalid_arguments
    elif not isinstance(call.arguments, Mapping):
        block["invalidArguments"] = repr(call.arguments)
    return block


async def ask_model(
    model: TurnModel,
    tools: Sequence[ToolSpec],
    partials: PartialsPublisher,
    claim: Claim,
    messages: Sequence[Mapping[str, Any]],
    turn: int,
    signals: Signals,
) -> Answer:
    """Stream one request; Stopped propagates only when fenced (a cancel ends the answer)."""
    generation_id = f"g{claim.lease.epoch}-{turn}"
    request = ProviderRequest(
        tenant=claim.tenant,
        session=claim.session,
        generation_id=generation_id,
        messages=messages,
        tools=tools,
        attempt=claim.attempts,
        turn=turn,
        system_prompt=model.system_prompt,
        temperature=model.temperature,
        max_tokens=model.max_tokens,
    )
    provider = model.provider
    text: list[str] = []
    calls: list[ToolCall] = []
    finish = Finish(StopReason.ERROR, error="provider ended without a finish")
    try:
        async for item in stream_unless_stopped(provider.stream(request), signals):
            if isinstance(item, TextDelta):
                await partials.publish(
                    claim.tenant, claim.session, generation_id, len(text), item.text
                )
                text.append(item.text)
            elif isinstance(item, ToolCall):
                calls.append(item)
            else:
                finish = item
    except Stopped:
        if signals.fenced.is_set():
            raise
    except (OSError, ValueError, RuntimeError) as exc:
        finish = Finish(StopReason.ERROR, error=f"{exc.__class__.__name__}: {exc}")
    cancelled = signals.cancel.is_set()
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": "".join(text)})
    if not cancelled:
        content += [_call_block(c, f"call-{generation_id}-{i}") for i, c in enumerate(calls)]
    return Answer(generation_id, content, finish, cancelled)
