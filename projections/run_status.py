"""Run status per session: the latest settled attempt, and whether anything is left to do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from keel_stream.kernel.inputs import InputTally
from keel_stream.kernel.vocabulary import Kind
from keel_stream.projections.base import EventLike

__all__ = ["RUN_STATUS", "RunStatusProjection", "RunStatusState"]


@dataclass(frozen=True, slots=True)
class RunStatusState:
    status: str | None = None
    """The status of the latest run.finished (done, failed, cancelled); None before any."""
    attempts: int = 0
    """Settled attempts (run.finished events) in the session."""
    turns: int | None = None
    tokens: Any = None
    stop_reason: str | None = None
    error: Any = None
    duration_ms: int | None = None
    inputs: InputTally = field(default_factory=InputTally)


class RunStatusProjection:
    name = "run_status"

    def initial(self) -> RunStatusState:
        return RunStatusState()

    def apply(self, state: RunStatusState, event: EventLike) -> RunStatusState:
        return self.apply_many(state, (event,))

    def apply_many(self, state: RunStatusState, events: Sequence[EventLike]) -> RunStatusState:
        summaries = [e for e in events if e.kind == Kind.RUN_FINISHED]
        inputs = state.inputs.observe_many(events)
        if not summaries:
            return replace(state, inputs=inputs)
        p = summaries[-1].payload
        return RunStatusState(
            status=p.get("status"),
            attempts=state.attempts + len(summaries),
            turns=p.get("turns"),
            tokens=p.get("tokens"),
            stop_reason=p.get("stopReason"),
            error=p.get("error"),
            duration_ms=p.get("durationMs"),
            inputs=inputs,
        )

    def dump(self, state: RunStatusState) -> dict[str, Any]:
        account = state.inputs.account()
        ledger = state.inputs
        return {
            "status": state.status,
            "attempts": state.attempts,
            "turns": state.turns,
            "tokens": state.tokens,
            "stopReason": state.stop_reason,
            "error": state.error,
            "durationMs": state.duration_ms,
            "unansweredInputs": list(account.unanswered),
            "owedTurn": account.owed_turn,
            "openDecisions": list(account.open_decisions),
            "runningSubagents": list(account.running_subagents),
            "waitingOnDecisions": account.waiting,
            "inputLedger": {
                "inputs": list(ledger.inputs),
                "answered": sorted(ledger.answered),
                "firstTracked": ledger.first_tracked,
                "latestStop": ledger.latest_stop,
                "latestFailed": ledger.latest_failed,
                "pendingCalls": sorted(ledger.pending_calls),
                "awaitingDecisions": sorted(ledger.awaiting),
                "delegated": sorted(ledger.delegated),
            },
        }

    def load(self, data: Mapping[str, Any]) -> RunStatusState:
        ledger = data.get("inputLedger", {})
        return RunStatusState(
            status=data.get("status"),
            attempts=int(data.get("attempts", 0)),
            turns=data.get("turns"),
            tokens=data.get("tokens"),
            stop_reason=data.get("stopReason"),
            error=data.get("error"),
            duration_ms=data.get("durationMs"),
            inputs=InputTally(
                inputs=tuple(ledger.get("inputs", ())),
                answered=frozenset(ledger.get("answered", ())),
                first_tracked=ledger.get("firstTracked"),
                latest_stop=ledger.get("latestStop"),
                latest_failed=bool(ledger.get("latestFailed", False)),
                pending_calls=frozenset(ledger.get("pendingCalls", ())),
                awaiting=frozenset(ledger.get("awaitingDecisions", ())),
                delegated=frozenset(ledger.get("delegated", ())),
            ),
        )


RUN_STATUS: Final = RunStatusProjection()
