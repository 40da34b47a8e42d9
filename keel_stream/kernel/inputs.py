"""Input accounting: which inputs an answer consumed, which are still unanswered, owedTurn.

An input (a user.message) is answered when a completed assistant.message lists its seq in
inputSeqs. A terminal failure (stopReason error or aborted) answers nothing: a failure will be
retried and a cancellation is not re-run, but neither consumed the input. Before the first
assistant.message that carries inputSeqs (a legacy prefix of an upgraded log), inputs are judged
by the run's read_watermark instead.

A decision answer (a user.message with a ``decision``) and a subagent's result are not inputs.
While every call of the latest answer that has no result waits (on an open decision, or on a
subagent), the session is waiting: no model request can be made (the calls have no results), so
nothing is owed until an answer or a result arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from keel_stream.kernel.decisions import approval_of, released_call
from keel_stream.kernel.subagents import is_delegation
from keel_stream.kernel.types import EventLike
from keel_stream.kernel.vocabulary import Kind, StopReason

__all__ = [
    "TERMINAL_FAILURE_STOP_REASONS",
    "InputAccount",
    "InputTally",
    "account_inputs",
    "is_terminal_failure",
]

TERMINAL_FAILURE_STOP_REASONS: Final = frozenset({StopReason.ERROR, StopReason.ABORTED})


@dataclass(frozen=True, slots=True)
class InputAccount:
    """The answer to "is anything left to do in this session?"."""

    unanswered: tuple[int, ...]
    """Seqs of inputs no completed answer has consumed, ascending."""
    owed_turn: bool
    """The latest assistant is a terminal failure or asked for tools: the model owes a turn."""
    unpresented: tuple[int, ...] = ()
    """The unanswered inputs that no request has presented to the model yet (arrived late)."""
    open_decisions: tuple[str, ...] = ()
    """Gated calls of the latest answer with neither an answer nor a result."""
    running_subagents: tuple[str, ...] = ()
    """`delegate` calls of the latest answer whose subagent has not reported yet."""
    waiting: bool = False
    """Every call of the latest answer without a result waits on an open decision."""

    @property
    def needs_turn(self) -> bool:
        """A run that settles now with nothing owed would be wrong to call done."""
        return (self.owed_turn or bool(self.unanswered)) and not self.waiting


def is_terminal_failure(payload: Mapping[str, Any]) -> bool:
    """A terminal failed assistant message: it answers nothing and never enters model context."""
    return payload.get("stopReason") in TERMINAL_FAILURE_STOP_REASONS


@dataclass(frozen=True, slots=True)
class InputTally:
    """What input accounting remembers of a log, folded one event at a time (a tally kept
    over the ledger, not the ledger itself)."""

    inputs: tuple[int, ...] = ()
    answered: frozenset[int] = frozenset()
    presented: frozenset[int] = frozenset()
    """Seqs listed in any assistant's inputSeqs, failed answers included."""
    first_tracked: int | None = None
    """Seq of the first assistant.message that carries inputSeqs."""
    latest_stop: str | None = None
    latest_failed: bool = False
    pending_calls: frozenset[str] = frozenset()
    """Calls of the latest answer (if it asked for tools) that have no result yet."""
    awaiting: frozenset[str] = frozenset()
    delegated: frozenset[str] = frozenset()
    """The latest answer's `delegate` calls (waiting on a subagent, not a decision)."""
    """Of those, the gated ones whose decision has no answer yet."""

    def observe(self, event: EventLike) -> InputTally:
        """The ledger after one more event (in seq order)."""
        return self.observe_many((event,))

    def observe_many(self, events: Iterable[EventLike]) -> InputTally:
        """The ledger after several more events: observe() in a loop, without the copies."""
        inputs = list(self.inputs)
        answered = set(self.answered)
        presented = set(self.presented)
        pending, awaiting = set(self.pending_calls), set(self.awaiting)
        delegated = self.delegated
        first, stop, failed = self.first_tracked, self.latest_stop, self.latest_failed
        for event in events:
            if event.kind == Kind.USER_MESSAGE:
                released = released_call(event.payload)
                if released is None:
                    inputs.append(event.seq)
                else:
                    awaiting.discard(released)
            elif event.kind == Kind.TOOL_RESULT:
                call = str(event.payload.get("toolCallId"))
                pending.discard(call)
                awaiting.discard(call)
            elif event.kind == Kind.ASSISTANT_MESSAGE:
                payload = event.payload
                failed = is_terminal_failure(payload)
                latest = payload.get("stopReason")
                stop = latest if isinstance(latest, str) else None
                pending, awaiting, delegated = (
                    _calls_of(payload)
                    if stop == StopReason.TOOL_USE
                    else (set(), set(), frozenset())
                )
                seqs = payload.get("inputSeqs")
                if isinstance(seqs, list):
                    if first is None:
                        first = event.seq
                    presented.update(s for s in seqs if isinstance(s, int))
                    if not failed:
                        answered.update(s for s in seqs if isinstance(s, int))
        return InputTally(
            tuple(inputs), frozenset(answered), frozenset(presented), first, stop, failed,
            frozenset(pending), frozenset(awaiting), delegated,
        )  # fmt: skip

    def account(self, read_watermark: int = 0) -> InputAccount:
        """Unanswered inputs and owedTurn, judging the legacy prefix by the watermark."""

        def is_answered(seq: int) -> bool:
            if seq in self.answered:
                return True
            legacy = self.first_tracked is None or seq < self.first_tracked
            return legacy and seq <= read_watermark

        unanswered = tuple(s for s in self.inputs if not is_answered(s))
        waiting = bool(self.pending_calls) and self.pending_calls <= self.awaiting
        owed = self.latest_failed or (self.latest_stop == StopReason.TOOL_USE and not waiting)
        unpresented = tuple(s for s in unanswered if s not in self.presented)
        return InputAccount(
            unanswered=unanswered,
            owed_turn=owed,
            unpresented=unpresented,
            open_decisions=tuple(sorted(self.awaiting - self.delegated)),
            running_subagents=tuple(sorted(self.awaiting & self.delegated)),
            waiting=waiting,
        )


def _calls_of(payload: Mapping[str, Any]) -> tuple[set[str], set[str], frozenset[str]]:
    """The call ids of an answer, those that wait (gated by an approval, or delegated), and
    the delegated ones."""
    calls, waits, delegated = set(), set(), set()
    for block in payload.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "toolCall":
            call = str(block.get("id"))
            calls.add(call)
            if is_delegation(block):
                delegated.add(call)
                waits.add(call)
            elif approval_of(block) is not None:
                waits.add(call)
    return calls, waits, frozenset(delegated)


def account_inputs(events: Iterable[EventLike], read_watermark: int = 0) -> InputAccount:
    """Fold a session's log (in seq order) into its input account."""
    return InputTally().observe_many(events).account(read_watermark)
