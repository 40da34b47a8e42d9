"""One request to the model: stream it (partials out as they come), assemble the answer.

The provider's output is untrusted: every tool call is made committable and answerable (an id,
a name, object arguments; arguments that were not a JSON object are kept as sent and answered
with an error result). A cancel stops the stream at once and keeps the text streamed so far.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from keel_stream.kernel import StopReason
from keel_stream.store.protocol import Claim
from keel_stream.worker.agent_settings import TurnModel
from keel_stream.worker.output_bounds import TEXT_MAX_BYTES, bounded_text
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers.base import (
    Finish,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from keel_stream.worker.signals import Signals, Stopped, stream_unless_stopped

__all__ = ["Answer", "ask_model", "generation_id"]

_SESSION_TAG_CHARS: Final = 12


@dataclass(frozen=True, slots=True)
class Answer:
    generation_id: str
    content: list[dict[str, Any]]
    finish: Finish
    cancelled: bool


def generation_id(claim: Claim, turn: int) -> str:
    """The id of the answer to an attempt's `turn`-th request: `g<epoch>-<turn>-<tag>`, the tag a
    digest of the session id. Epoch and turn tell the session's own answers apart (and a retried
    commit of one answer keeps its id); the tag keeps them apart from the answers a fork copied
    with their keys from the sessions it forks (whose epochs and turns count from 1 too)."""
    tag = hashlib.sha256(claim.session.encode()).hexdigest()[:_SESSION_TAG_CHARS]
    return f"g{claim.lease.epoch}-{turn}-{tag}"


def _uncommittable(arguments: Mapping[str, Any]) -> str | None:
    """Why object arguments cannot be committed as they are (None: they can). JSON keeps no NaN
    or infinity (orjson would write null), and one call may not fill an event."""
    encoded = orjson.dumps(arguments, option=orjson.OPT_NON_STR_KEYS)
    if len(encoded) > TEXT_MAX_BYTES:
        return f"arguments of {len(encoded)} bytes (at most {TEXT_MAX_BYTES})"
    if orjson.loads(encoded) != arguments:
        return "arguments with a number JSON cannot hold (NaN or infinity)"
    return None


def _call_block(call: ToolCall, fallback_id: str) -> dict[str, Any]:
    arguments = call.arguments
    block: dict[str, Any] = {
        "type": "toolCall",
        "id": call.id or fallback_id,
        "name": call.name or "unknown",
        "arguments": {},
    }
    if call.invalid_arguments is not None:
        block["invalidArguments"] = bounded_text(call.invalid_arguments)
    elif not isinstance(arguments, Mapping):
        block["invalidArguments"] = bounded_text(repr(arguments))
    elif (problem := _uncommittable(arguments)) is not None:
        block["invalidArguments"] = problem
    else:
        block["arguments"] = dict(arguments)
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
    generation = generation_id(claim, turn)
    request = ProviderRequest(
        tenant=claim.tenant,
        session=claim.session,
        generation_id=generation,
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
                    claim.tenant, claim.session, generation, len(text), item.text
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
        content.append({"type": "text", "text": bounded_text("".join(text))})
    if not cancelled:
        content += [_call_block(c, f"call-{generation}-{i}") for i, c in enumerate(calls)]
    return Answer(generation, content, finish, cancelled)
