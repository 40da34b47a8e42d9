"""``word_totals``: a pure fold of the words users sent (the projection protocol)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class WordTotals:
    name = "word_totals"

    def initial(self) -> dict[str, int]:
        return {"messages": 0, "words": 0}

    def apply(self, state: dict[str, int], event: Any) -> dict[str, int]:
        if getattr(event, "kind", None) != "user.message":
            return state
        words = len(str(event.payload.get("text", "")).split())
        return {"messages": state["messages"] + 1, "words": state["words"] + words}

    def apply_many(self, state: dict[str, int], events: Sequence[Any]) -> dict[str, int]:
        for event in events:
            state = self.apply(state, event)
        return state

    def dump(self, state: dict[str, int]) -> dict[str, Any]:
        return dict(state)

    def load(self, data: Mapping[str, Any]) -> dict[str, int]:
        return {"messages": int(data["messages"]), "words": int(data["words"])}
