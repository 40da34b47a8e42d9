"""An attempt's tool calls: running the latest answer's calls that have no result yet, each as
what it is: an ordinary call runs; a gated call runs as its decision's answer says, or waits; a
`delegate` call creates its subagent and waits, or becomes the subagent's answer once reported.

Once the attempt is cancelled nothing more runs and no subagent is started: a call that would
run, or was running, gets an error result saying it was cancelled (seed 001 §5: a cancellation
is not re-run), so no later attempt, a takeover's included, ever runs it; the calls that wait
keep waiting (an open decision stays open; a subagent's cancel reaches it through its tree).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.kernel import Event, Kind, StopReason
from keel_stream.kernel.decisions import approval_of
from keel_stream.kernel.subagents import is_delegation
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.projections.transcript import TRANSCRIPT, TranscriptState
from keel_stream.tenancy.policy import Policy, SubagentSettings
from keel_stream.worker.agent_settings import AttemptSettings
from keel_stream.worker.decisions import Resolution, resolve
from keel_stream.worker.session_io import Fenced, SessionIO
from keel_stream.worker.settling import AttemptRecord
from keel_stream.worker.signals import Signals, Stopped, unless_stopped
from keel_stream.worker.subagents import Delegations, report_resolution
from keel_stream.worker.toolbox import Toolbox

__all__ = ["CANCELLED_TEXT", "Attempt", "CallRunner", "cancelled_result", "ms", "unanswered_calls"]

Answered = dict[str, tuple[int, Mapping[str, Any]]]
_WAIT: Final = "wait"
CANCELLED_TEXT: Final = "cancelled: the run was cancelled before this call finished"


def ms(since: float) -> int:
    return int((time.monotonic() - since) * 1000)


def unanswered_calls(state: TranscriptState) -> list[Mapping[str, Any]]:
    """Calls of the latest answer whose results are not in the log (after a takeover)."""
    answered = {m.get("toolCallId") for m in state.context if m.get("role") == "toolResult"}
    for message in reversed(state.context):
        if message.get("role") == "assistant":
            if message.get("stopReason") != StopReason.TOOL_USE:
                return []
            calls = tool_call_blocks({"content": message.get("content", [])})
            return [c for c in calls if c["id"] not in answered]
    return []


def cancelled_result(call: Mapping[str, Any]) -> dict[str, Any]:
    """The result of a call the run's cancel stopped (or kept from starting)."""
    return {
        "toolCallId": call["id"],
        "content": [{"type": "text", "text": CANCELLED_TEXT}],
        "isError": True,
        "cancelled": True,
    }


def _runs(resolution: Resolution | None) -> bool:
    """Whether answering the call runs a tool (not a result given without running one)."""
    return resolution is None or resolution.arguments is not None


@dataclass(slots=True)
class Attempt:
    """What one attempt runs with: its tenant's model settings, tools, approval policy and
    subagent limits, the log it started from, and the answers and subagent results in it."""

    settings: AttemptSettings
    toolbox: Toolbox
    policy: Policy | None
    limits: SubagentSettings
    history: list[Event]
    answers: Answered = field(default_factory=dict)
    reports: Answered = field(default_factory=dict)


class CallRunner:
    def __init__(self, delegations: Delegations | None) -> None:
        self._delegations = delegations

    @property
    def delegates(self) -> bool:
        """Whether `delegate` calls can be served (a store for subagent links is given)."""
        return self._delegations is not None

    async def answer_calls(
        self,
        io: SessionIO,
        transcript: TranscriptState,
        record: AttemptRecord,
        signals: Signals,
        attempt: Attempt,
    ) -> TranscriptState:
        """Answer the latest answer's calls that have no result yet, committing each result; the
        calls that wait (an open decision, a running subagent) are left, and say so. Once
        cancelled, a call that would run is closed with a cancelled result instead."""
        waiting = False
        for call in unanswered_calls(transcript):
            stopping = record.cancelled or signals.cancel.is_set()
            resolution = await self._resolution(io, call, attempt, stopping=stopping)
            if resolution == _WAIT:
                waiting = True
                continue
            assert not isinstance(resolution, str)
            event = None
            if not (stopping and _runs(resolution)):
                event = await self.run_tool(io, call, record, signals, attempt.toolbox, resolution)
            if event is None:  # the cancel came before or while it ran
                event = await io.commit(Kind.TOOL_RESULT, cancelled_result(call))
            transcript = TRANSCRIPT.apply_many(transcript, [event])
            if signals.cancel.is_set() or (resolution is not None and resolution.cancel):
                record.cancelled, record.stop_reason = True, StopReason.ABORTED
        record.waiting = waiting and not record.cancelled
        return transcript

    async def _resolution(
        self, io: SessionIO, call: Mapping[str, Any], attempt: Attempt, *, stopping: bool
    ) -> Resolution | str | None:
        """How the call is answered: None (run it), a Resolution, or _WAIT. A subagent is
        started for a delegate call unless `stopping`; then a call whose subagent was never
        started is answered as one that would run (it is closed as cancelled)."""
        call_id = str(call["id"])
        if approval_of(call) is not None:
            answered = attempt.answers.get(call_id)
            return _WAIT if answered is None else resolve(call, *answered)
        if not is_delegation(call) or self._delegations is None:
            return None
        reported = attempt.reports.get(call_id)
        if reported is not None:
            return report_resolution(call, *reported)
        claim = io.claim
        if stopping:
            started = await self._delegations.started(claim.tenant, claim.session, call)
            return _WAIT if started else None
        refused = await self._delegations.ensure(
            claim.tenant, claim.session, call, attempt.history, attempt.limits
        )
        return _WAIT if refused is None else refused

    async def run_tool(
        self,
        io: SessionIO,
        call: Mapping[str, Any],
        record: AttemptRecord,
        signals: Signals,
        toolbox: Toolbox,
        resolution: Resolution | None = None,
    ) -> Event | None:
        """Run one call (as its resolution says, if it has one) and commit its result; None if
        cancelled while it ran."""
        began = time.monotonic()
        raw = call.get("invalidArguments")
        arguments = call.get("arguments", {}) if resolution is None else resolution.arguments
        if raw is not None:
            text, is_error = f"the arguments are not a JSON object: {raw}", True
        elif arguments is None and resolution is not None:
            text, is_error = resolution.text, resolution.is_error
        else:
            try:
                text, is_error = await unless_stopped(
                    toolbox.run(str(call["name"]), arguments), signals
                )
            except Stopped:
                if signals.fenced.is_set():
                    raise Fenced("lease lost while a tool ran") from None
                return None
        record.timings.append(
            {"toolCallId": call["id"], "name": call["name"], "durationMs": ms(began)}
        )
        result: dict[str, Any] = {
            "toolCallId": call["id"],
            "content": [{"type": "text", "text": text}],
            "isError": is_error,
        }
        if resolution is not None:
            result[resolution.field] = resolution.provenance
        return await io.commit(Kind.TOOL_RESULT, result)
