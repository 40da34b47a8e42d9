"""The compaction service: when a session's model context outgrows its budget, the earlier part
is replaced by a summary, committed as a `compaction` event before the next request.

The summary comes from the provider. The kept suffix of the context starts at `firstKeptSeq`
(the transcript fold keeps the messages from that one on, in the order the model saw them) and
never starts at a tool result, so no result is kept without its call. Inputs not yet presented
are never compacted: the next request presents them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from keel_stream.kernel import Event, Kind
from keel_stream.logs import get_logger
from keel_stream.projections.transcript import TranscriptState
from keel_stream.worker.providers.base import Provider, ProviderFailed
from keel_stream.worker.session_io import SessionIO
from keel_stream.worker.signals import Signals, unless_stopped

__all__ = ["CompactionPlan", "Compactor", "context_chars", "plan_compaction"]

Message = Mapping[str, Any]
_CUT_ROLES: Final = frozenset({"user", "assistant"})


def context_chars(messages: Sequence[Message]) -> int:
    """The size of messages as the budget counts it: characters of their JSON."""
    return sum(len(orjson.dumps(m)) for m in messages)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    summarised: tuple[Message, ...]
    first_kept_seq: int | None
    context_chars: int


def plan_compaction(state: TranscriptState, budget_chars: int) -> CompactionPlan | None:
    """What to summarise when the model's view exceeds the budget; None when within it, or
    when nothing but an earlier summary could be summarised (no compaction storm)."""
    size = context_chars(state.model_view)
    if budget_chars <= 0 or size <= budget_chars:
        return None
    context = state.context
    room = budget_chars // 2 - context_chars(state.waiting)
    cut, kept = len(context), 0
    for index in range(len(context) - 1, -1, -1):
        kept += context_chars([context[index]])
        if kept > room:
            break
        if context[index].get("role") in _CUT_ROLES:
            cut = index
    summarised = tuple(context[:cut])
    if not [m for m in summarised if m.get("role") != "summary"]:
        return None
    first_kept = context[cut]["seq"] if cut < len(context) else None
    return CompactionPlan(summarised, first_kept, size)


class Compactor:
    def __init__(self, provider: Provider, budget_chars: int) -> None:
        self._provider = provider
        self._budget = budget_chars
        self._log = get_logger("worker")

    async def compact(
        self, io: SessionIO, state: TranscriptState, signals: Signals
    ) -> Event | None:
        """Commit a compaction if the context needs one; None otherwise (or if the provider
        could not summarise: the request goes on uncompacted, and the next boundary tries again)."""
        plan = plan_compaction(state, self._budget)
        if plan is None:
            return None
        try:
            summary = await unless_stopped(self._provider.summarize(plan.summarised), signals)
        except ProviderFailed as exc:
            self._log.warning("compaction skipped: no summary", error=str(exc))
            return None
        payload: dict[str, Any] = {
            "summary": summary,
            "firstKeptSeq": plan.first_kept_seq,
            "compactedMessages": len(plan.summarised),
            "contextChars": plan.context_chars,
            "budgetChars": self._budget,
            "provider": self._provider.name,
            "model": self._provider.model,
        }
        return await io.commit(Kind.COMPACTION, payload)
