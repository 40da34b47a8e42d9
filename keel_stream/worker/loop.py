"""The agent loop: one attempt of a run, committing every fact through the kernel, fenced.

Order per turn (the ordering contract): at the request boundary, guide inputs committed since the
last boundary join the inputs waiting to be presented (one message each, after the sibling tool
results), and the context is compacted first if it outgrew its budget; the request carries the
transcript's model view, and the inputs it presents become its inputSeqs, so the log replays
exactly what the model saw. The provider's output is assembled and committed as an
assistant.message before any tool runs; each tool call's result is committed as a tool.result
keyed by its toolCallId. The loop ends at end_turn, on a provider error, on cancel, or at the
turn bound; the settler then commits run.finished under the same lease and settles the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Final

from keel_stream.kernel import Event, InputTally, Kind, StopReason
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.logs import get_logger
from keel_stream.projections.transcript import TRANSCRIPT, TranscriptState
from keel_stream.store.protocol import Claim, Ledger, Runs
from keel_stream.worker.answers import Answer, ask_model
from keel_stream.worker.compaction import Compactor
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers.base import Provider
from keel_stream.worker.session_io import Fenced, SessionIO
from keel_stream.worker.settling import AttemptRecord, AttemptResult, Settler
from keel_stream.worker.signals import Signals, Stopped, unless_stopped
from keel_stream.worker.tools import run_tool

__all__ = ["AgentLoop", "AttemptResult", "Signals"]

_GUIDE: Final = "guide"


def _unanswered_calls(state: TranscriptState) -> list[Mapping[str, Any]]:
    """Calls of the latest answer whose results are not in the log (after a takeover)."""
    answered = {m.get("toolCallId") for m in state.context if m.get("role") == "toolResult"}
    for message in reversed(state.context):
        if message.get("role") == "assistant":
            if message.get("stopReason") != StopReason.TOOL_USE:
                return []
            calls = tool_call_blocks({"content": message.get("content", [])})
            return [c for c in calls if c["id"] not in answered]
    return []


class AgentLoop:
    def __init__(
        self,
        ledger: Ledger,
        runs: Runs,
        provider: Provider,
        partials: PartialsPublisher,
        max_turns: int = 8,
        context_budget_chars: int = 0,
    ) -> None:
        self._ledger = ledger
        self._provider = provider
        self._partials = partials
        self._max_turns = max_turns
        self._settler = Settler(runs, provider.name, provider.model)
        self._compactor = Compactor(provider, context_budget_chars)
        self._log = get_logger("worker")

    async def run_attempt(self, claim: Claim, signals: Signals) -> AttemptResult:
        """Run (or, after a takeover, settle) one attempt; never raises for the attempt's own
        failures: a crash is settled as a failed attempt with its summary."""
        log = self._log.bind(session=claim.session, epoch=claim.lease.epoch)
        io = SessionIO(self._ledger, claim)
        record = AttemptRecord()
        try:
            if claim.taken_over:
                return await self._settler.settle_abandoned(io)
            await self._attempt(io, record, signals)
            record.duration_ms = _ms(record.started)
            return await self._settler.settle(io, record)
        except (Fenced, Stopped) as exc:
            # Stopped escapes only when the heartbeat found the lease gone mid-request.
            log.warning("fenced: another worker owns the run", error=str(exc))
            return AttemptResult(None, record.turns, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash settles as a failed attempt
            log.error("attempt crashed", error=repr(exc))
            record.failed, record.stop_reason = True, StopReason.ERROR
            record.error = f"attempt crashed: {exc.__class__.__name__}: {exc}"
            record.duration_ms = _ms(record.started)
            return await self._settler.settle(io, record)

    async def _attempt(self, io: SessionIO, record: AttemptRecord, signals: Signals) -> None:
        history = await io.read_log()
        if not InputTally().observe_many(history).account(io.claim.read_watermark).needs_turn:
            return  # Nothing owed (a race with an answer): settled done, with its summary.
        transcript = TRANSCRIPT.apply_many(TRANSCRIPT.initial(), history)
        seen = history[-1].seq if history else 0
        while True:
            transcript = await self._answer_calls(io, transcript, record, signals)
            if signals.cancel.is_set():
                record.cancelled, record.stop_reason = True, StopReason.ABORTED
                break
            if record.turns >= self._max_turns:
                record.failed, record.stop_reason = True, StopReason.MAX_TURNS
                record.error = f"stopped after {record.turns} turns"
                break
            transcript, seen = await self._request_boundary(io, transcript, seen, signals)
            record.turns += 1
            answer = await ask_model(
                self._provider, self._partials, io.claim, transcript.model_view,
                record.turns, signals,
            )  # fmt: skip
            committed = await self._commit_answer(io, answer, transcript, record)
            seen = max(seen, committed.seq)
            transcript = TRANSCRIPT.apply_many(transcript, [committed])
            if answer.cancelled or record.stop_reason != StopReason.TOOL_USE:
                break
        record.context_messages = len(transcript.model_view)

    async def _request_boundary(
        self, io: SessionIO, transcript: TranscriptState, seen: int, signals: Signals
    ) -> tuple[TranscriptState, int]:
        """Guides committed since the last boundary join this request; compact if needed."""
        fresh = await io.read_log(after=seen)
        if fresh:
            seen = fresh[-1].seq
            guides = [
                e
                for e in fresh
                if e.kind == Kind.USER_MESSAGE and e.payload.get("delivery") == _GUIDE
            ]
            transcript = TRANSCRIPT.apply_many(transcript, guides)
        try:
            compaction = await self._compactor.compact(io, transcript, signals)
        except Stopped:
            if signals.fenced.is_set():
                raise Fenced("lease lost while compacting") from None
            return transcript, seen
        if compaction is not None:
            transcript = TRANSCRIPT.apply_many(transcript, [compaction])
            seen = max(seen, compaction.seq)
        return transcript, seen

    async def _commit_answer(
        self, io: SessionIO, answer: Answer, transcript: TranscriptState, record: AttemptRecord
    ) -> Event:
        finish = answer.finish
        record.add_usage(finish.usage)
        record.stop_reason = StopReason.ABORTED if answer.cancelled else finish.stop_reason
        payload: dict[str, Any] = {
            "role": "assistant",
            "content": answer.content,
            "inputSeqs": [m["seq"] for m in transcript.waiting],
            "stopReason": record.stop_reason,
            "generationId": answer.generation_id,
            "provider": self._provider.name,
            "model": self._provider.model,
        }
        if finish.usage:
            payload["usage"] = dict(finish.usage)
        if answer.cancelled:
            record.cancelled = True
        elif finish.stop_reason == StopReason.ERROR:
            record.failed, record.error = True, finish.error
            record.permanent = finish.permanent
            if finish.error:
                payload["errorMessage"] = finish.error
        return await io.commit(Kind.ASSISTANT_MESSAGE, payload)

    async def _answer_calls(
        self, io: SessionIO, transcript: TranscriptState, record: AttemptRecord, signals: Signals
    ) -> TranscriptState:
        """Run the latest answer's calls that have no result yet, committing each result."""
        for call in _unanswered_calls(transcript):
            event = await self._run_tool(io, call, record, signals)
            if event is None:
                break
            transcript = TRANSCRIPT.apply_many(transcript, [event])
        return transcript

    async def _run_tool(
        self, io: SessionIO, call: Mapping[str, Any], record: AttemptRecord, signals: Signals
    ) -> Event | None:
        """Run one call and commit its result; None if cancelled while it ran."""
        began = time.monotonic()
        raw = call.get("invalidArguments")
        if raw is not None:
            text, is_error = f"the arguments are not a JSON object: {raw}", True
        else:
            try:
                text, is_error = await unless_stopped(
                    run_tool(str(call["name"]), call.get("arguments", {})), signals
                )
            except Stopped:
                if signals.fenced.is_set():
                    raise Fenced("lease lost while a tool ran") from None
                return None
        record.timings.append(
            {"toolCallId": call["id"], "name": call["name"], "durationMs": _ms(began)}
        )
        return await io.commit(
            Kind.TOOL_RESULT,
            {
                "toolCallId": call["id"],
                "content": [{"type": "text", "text": text}],
                "isError": is_error,
            },
        )


def _ms(since: float) -> int:
    return int((time.monotonic() - since) * 1000)
