"""The agent loop: one attempt of a run, committing every fact through the kernel, fenced.

Order per turn (the ordering contract): at the request boundary, guide inputs committed since the
last boundary are injected (one message each) and their seqs go into this request's inputSeqs;
the provider's output is assembled and committed as an assistant.message before any tool runs;
each tool call's result is committed as a tool.result keyed by its toolCallId. The loop ends at
end_turn, on a provider error, on cancel, or at the turn bound; run.finished is committed under
the same lease before the run is settled by the status policy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.errors import LeaseFenced
from keel_stream.kernel import (
    AttemptOutcome,
    CommitRequest,
    Event,
    InputLedger,
    Kind,
    RunStatus,
    finish_status,
)
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.logs import get_logger
from keel_stream.store.postgres import MAX_READ_LIMIT, PostgresLedger
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers.base import (
    Finish,
    Provider,
    ProviderRequest,
    TextDelta,
    ToolCall,
)
from keel_stream.worker.runs import Claim, RunStore
from keel_stream.worker.tools import TOOLS, run_tool
from projections.transcript import TRANSCRIPT

__all__ = ["AgentLoop", "AttemptResult", "Signals"]

_GUIDE: Final = "guide"


@dataclass
class Signals:
    """What the worker tells a running attempt: cancel (a client asked), fenced (lost the lease)."""

    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    fenced: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class AttemptResult:
    status: RunStatus | None
    """The settled run status; None when the attempt was fenced and nothing was settled."""
    turns: int
    stop_reason: str | None


class _Fenced(Exception):
    """The lease is gone: stop without another commit."""


class AgentLoop:
    def __init__(
        self,
        ledger: PostgresLedger,
        runs: RunStore,
        provider: Provider,
        partials: PartialsPublisher,
        max_turns: int = 8,
    ) -> None:
        self._ledger = ledger
        self._runs = runs
        self._provider = provider
        self._partials = partials
        self._max_turns = max_turns
        self._log = get_logger("worker")

    async def _read_log(self, claim: Claim, after: int = 0) -> list[Event]:
        events: list[Event] = []
        while True:
            page = await self._ledger.read_events(
                claim.tenant, claim.session, after=after, limit=MAX_READ_LIMIT
            )
            events.extend(page)
            if len(page) < MAX_READ_LIMIT:
                return events
            after = page[-1].seq

    async def _commit(self, claim: Claim, kind: Kind, payload: dict[str, Any]) -> Event:
        try:
            submission = await self._ledger.commit(
                CommitRequest(
                    tenant_id=claim.tenant,
                    session_id=claim.session,
                    kind=kind.value,
                    payload=payload,
                    lease=claim.lease,
                )
            )
        except LeaseFenced as exc:
            raise _Fenced(str(exc)) from exc
        return Event(
            tenant=claim.tenant,
            session=claim.session,
            seq=submission.seq,
            kind=kind.value,
            payload=payload,
            committed_at=submission.committed_at,
        )

    async def run_attempt(self, claim: Claim, signals: Signals) -> AttemptResult:
        log = self._log.bind(session=claim.session, epoch=claim.lease.epoch)
        try:
            return await self._attempt(claim, signals)
        except _Fenced as exc:
            log.warning("fenced: another worker owns the run", error=str(exc))
            return AttemptResult(None, 0, None)

    async def _attempt(self, claim: Claim, signals: Signals) -> AttemptResult:
        started = time.monotonic()
        history = await self._read_log(claim)
        inputs = InputLedger().observe_many(history)
        transcript = TRANSCRIPT.apply_many(TRANSCRIPT.initial(), history)
        next_input_seqs = list(inputs.account(claim.read_watermark).unanswered)
        seen = history[-1].seq if history else 0
        if claim.attempts > claim.max_attempts:
            # Taken over again and again (each crash or expiry counts an attempt): stop here.
            return await self._finish(
                claim, started=started, turns=0, usage={}, timings=[],
                context_size=len(transcript.context), stop_reason="error",
                error="attempt budget spent", cancelled=False, failed=True,
            )  # fmt: skip
        account = inputs.account(claim.read_watermark)
        if not account.needs_turn:
            # Nothing unanswered and no turn owed (e.g. a guide already answered set
            # pending_input): settle without calling the model or writing to the log.
            await self._runs.settle(claim, RunStatus.DONE, max(inputs.answered, default=0))
            return AttemptResult(RunStatus.DONE, 0, None)
        turns = 0
        usage: dict[str, int] = {}
        timings: list[dict[str, Any]] = []
        stop_reason: str | None = None
        error: str | None = None
        cancelled = failed = False

        def pending_calls() -> list[Mapping[str, Any]]:
            """Calls of the latest answer whose results are not in the log (a takeover)."""
            context = transcript.context
            answered = {m.get("toolCallId") for m in context if m.get("role") == "toolResult"}
            for message in reversed(context):
                if message.get("role") == "assistant":
                    if message.get("stopReason") != "tool_use":
                        return []
                    calls = tool_call_blocks({"content": message.get("content", [])})
                    return [c for c in calls if c["id"] not in answered]
            return []

        while True:
            for call in pending_calls():
                if signals.cancel.is_set():
                    break
                event = await self._run_tool(claim, call, timings, signals)
                if event is None:
                    break
                transcript = TRANSCRIPT.apply_many(transcript, [event])
            if signals.cancel.is_set():
                cancelled, stop_reason = True, "aborted"
                break
            if turns >= self._max_turns:
                failed, stop_reason, error = True, "max_turns", f"stopped after {turns} turns"
                break
            # The request boundary: guides committed since the last one join this request.
            fresh = await self._read_log(claim, after=seen)
            if fresh:
                seen = fresh[-1].seq
                guides = [
                    e
                    for e in fresh
                    if e.kind == Kind.USER_MESSAGE and e.payload.get("delivery") == _GUIDE
                ]
                transcript = TRANSCRIPT.apply_many(transcript, guides)
                next_input_seqs += [g.seq for g in guides]
            turns += 1
            answer = await self._request(claim, list(transcript.context), turns, signals)
            for key, value in (answer.finish.usage or {}).items():
                usage[key] = usage.get(key, 0) + value
            aborted = signals.cancel.is_set()
            stop_reason = "aborted" if aborted else answer.finish.stop_reason
            payload: dict[str, Any] = {
                "role": "assistant",
                "content": answer.content,
                "inputSeqs": next_input_seqs,
                "stopReason": stop_reason,
                "generationId": answer.generation_id,
                "provider": self._provider.name,
                "model": self._provider.model,
            }
            if answer.finish.usage:
                payload["usage"] = dict(answer.finish.usage)
            if answer.finish.error and not aborted:
                payload["errorMessage"] = answer.finish.error
            committed = await self._commit(claim, Kind.ASSISTANT_MESSAGE, payload)
            seen = max(seen, committed.seq)
            transcript = TRANSCRIPT.apply_many(transcript, [committed])
            next_input_seqs = []
            if aborted:
                cancelled = True
                break
            if stop_reason == "error":
                failed, error = True, answer.finish.error
                break
            if stop_reason != "tool_use":
                break
        return await self._finish(
            claim,
            started=started,
            turns=turns,
            usage=usage,
            timings=timings,
            context_size=len(transcript.context),
            stop_reason=stop_reason,
            error=error,
            cancelled=cancelled,
            failed=failed,
        )

    async def _request(
        self, claim: Claim, context: list[Mapping[str, Any]], turn: int, signals: Signals
    ) -> _Answer:
        generation_id = f"g{claim.lease.epoch}-{turn}"
        request = ProviderRequest(
            tenant=claim.tenant,
            session=claim.session,
            generation_id=generation_id,
            messages=context,
            tools=[t.spec for t in TOOLS.values()],
            attempt=claim.attempts,
            turn=turn,
        )
        text: list[str] = []
        calls: list[ToolCall] = []
        finish = Finish("error", error="provider ended without a finish")
        try:
            async for item in self._provider.stream(request):
                if signals.fenced.is_set():
                    raise _Fenced("lease lost while streaming")
                if isinstance(item, TextDelta):
                    await self._partials.publish(
                        claim.tenant, claim.session, generation_id, len(text), item.text
                    )
                    text.append(item.text)
                elif isinstance(item, ToolCall):
                    calls.append(item)
                else:
                    finish = item
                if signals.cancel.is_set():
                    break
        except (OSError, ValueError, RuntimeError) as exc:
            finish = Finish("error", error=f"{exc.__class__.__name__}: {exc}")
        content: list[dict[str, Any]] = []
        if text:
            content.append({"type": "text", "text": "".join(text)})
        if not signals.cancel.is_set():
            content += [
                {
                    "type": "toolCall",
                    # Provider output is untrusted: a call must be committable and answerable.
                    "id": c.id or f"call-{generation_id}-{i}",
                    "name": c.name or "unknown",
                    "arguments": (
                        dict(c.arguments)
                        if isinstance(c.arguments, Mapping)
                        else {"value": c.arguments}
                    ),
                }
                for i, c in enumerate(calls)
            ]
        return _Answer(generation_id, content, finish)

    async def _run_tool(
        self,
        claim: Claim,
        call: Mapping[str, Any],
        timings: list[dict[str, Any]],
        signals: Signals,
    ) -> Event | None:
        """Run one call and commit its result; None if cancelled while it ran."""
        began = time.monotonic()
        task = asyncio.create_task(run_tool(str(call["name"]), call.get("arguments", {})))
        cancel = asyncio.create_task(signals.cancel.wait())
        fenced = asyncio.create_task(signals.fenced.wait())
        done, _ = await asyncio.wait({task, cancel, fenced}, return_when=asyncio.FIRST_COMPLETED)
        cancel.cancel()
        fenced.cancel()
        if task not in done:
            task.cancel()
            if signals.fenced.is_set():
                raise _Fenced("lease lost while a tool ran")
            return None
        text, is_error = task.result()
        timings.append({"toolCallId": call["id"], "name": call["name"], "durationMs": _ms(began)})
        return await self._commit(
            claim,
            Kind.TOOL_RESULT,
            {
                "toolCallId": call["id"],
                "content": [{"type": "text", "text": text}],
                "isError": is_error,
            },
        )

    async def _finish(
        self,
        claim: Claim,
        *,
        started: float,
        turns: int,
        usage: dict[str, int],
        timings: list[dict[str, Any]],
        context_size: int,
        stop_reason: str | None,
        error: str | None,
        cancelled: bool,
        failed: bool,
    ) -> AttemptResult:
        ledger = InputLedger().observe_many(await self._read_log(claim))
        account = ledger.account(claim.read_watermark)
        outcome = AttemptOutcome(
            cancelled=cancelled,
            failed=failed or (not cancelled and account.owed_turn),
            attempts=claim.attempts,
            max_attempts=claim.max_attempts if stop_reason != "max_turns" else claim.attempts,
            more_input=bool(account.unanswered),
        )
        status = finish_status(outcome)
        summary: dict[str, Any] = {
            "status": "cancelled" if cancelled else ("failed" if outcome.failed else "done"),
            "turns": turns,
            "tokens": usage,
            "toolTimings": timings,
            "context": {"messages": context_size},
            "stopReason": stop_reason,
            "durationMs": _ms(started),
            "provider": self._provider.name,
            "model": self._provider.model,
        }
        if error:
            summary["error"] = error
        try:
            await self._commit(claim, Kind.RUN_FINISHED, summary)
        except _Fenced:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed summary never changes the settling
            self._log.warning("run.finished not recorded", error=repr(exc))
        await self._runs.settle(claim, status, max(ledger.answered, default=0))
        return AttemptResult(status, turns, stop_reason)


@dataclass(frozen=True, slots=True)
class _Answer:
    generation_id: str
    content: list[dict[str, Any]]
    finish: Finish


def _ms(since: float) -> int:
    return int((time.monotonic() - since) * 1000)
