"""An attempt's tool calls: running the latest answer's calls that have no result yet, each as
what it is: an ordinary call runs; a gated call runs as its decision's answer says, or waits; a
`delegate` call creates its subagent and waits, or becomes the subagent's answer once reported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.gateway.config_policy import Policy, SubagentSettings
from keel_stream.kernel import Event, Kind, StopReason
from keel_stream.kernel.decisions import approval_of
from keel_stream.kernel.subagents import is_delegation
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.projections.transcript import TRANSCRIPT, TranscriptState
from keel_stream.worker.agent_settings import AttemptSettings
from keel_stream.worker.decisions import Resolution, resolve
from keel_stream.worker.session_io import Fenced, SessionIO
from keel_stream.worker.settling import AttemptRecord
from keel_stream.worker.signals import Signals, Stopped, unless_stopped
from keel_stream.worker.subagents import Delegations, report_resolution
from keel_stream.worker.toolbox import Toolbox

__all__ = ["Attempt", "CallRunner", "ms", "unanswered_calls"]

Answered = dict[str, tuple[int, Mapping[str, Any]]]
_WAIT: Final = "wait"


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
        """Run the latest answer's calls that have no result yet, committing each result; the
        calls that wait (an open decision, a running subagent) are left, and say so."""
        waiting = cancelled = False
        for call in unanswered_calls(transcript):
            resolution = await self._resolution(io, call, attempt, start=not cancelled)
            if resolution == _WAIT:
                waiting = True
                continue
            assert not isinstance(resolution, str)
            if cancelled and (resolution is None or resolution.arguments is not None):
                continue  # once cancelled nothing more runs; results already given are recorded
            event = await self.run_tool(io, call, record, signals, attempt.toolbox, resolution)
            if event is None:
                break
            transcript = TRANSCRIPT.apply_many(transcript, [event])
            cancelled = cancelled or (resolution is not None and resolution.cancel)
        if cancelled:
            record.cancelled, record.stop_reason = True, StopReason.ABORTED
        record.waiting = waiting and not cancelled
        return transcript

    async def _resolution(
        self, io: SessionIO, call: Mapping[str, Any], attempt: Attempt, *, start: bool = True
    ) -> Resolution | str | None:
        """How the call is answered: None (run it), a Resolution, or _WAIT; a subagent is
        started for a delegate call only when `start`."""
        call_id = str(call["id"])
        if approval_of(call) is not None:
            answered = attempt.answers.get(call_id)
            return _WAIT if answered is None else resolve(call, *answered)
        if not is_delegation(call) or self._delegations is None:
            return None
        reported = attempt.reports.get(call_id)
        if reported is not None:
            return report_resolution(call, *reported)
        if not start:
            return _WAIT
        claim = io.claim
        refused = await self._delegations.ensure(
            claim.tenant, claim.session, call, attempt.history, attempt.limits
        )
        if refused is None:
            return _WAIT
        return Resolution(None, refused, True, field="subagent", provenance={"refused": True})

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
