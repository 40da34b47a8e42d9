"""The event vocabulary: every kind, its commit class and its idempotency key field.

A kind that is not registered here cannot enter the log. The string values are part of the wire
and storage contract and are pinned by a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from keel_stream.errors import UnknownKind

__all__ = [
    "EDGE_KINDS",
    "REGISTRY",
    "CommitClass",
    "Kind",
    "KindSpec",
    "StateOwner",
    "StopReason",
    "spec_for",
]


class Kind(StrEnum):
    """The whole vocabulary of the ledger."""

    USER_MESSAGE = "user.message"
    ASSISTANT_MESSAGE = "assistant.message"
    TOOL_RESULT = "tool.result"
    COMPACTION = "compaction"
    RUN_FINISHED = "run.finished"
    RUN_STARTED = "run.started"
    RUN_FAILED = "run.failed"
    EXTERNAL_EVENT = "external.event"


class CommitClass(StrEnum):
    """Who carries the fence; a property of the kind, never of the caller."""

    OWNER = "owner-scoped"
    EDGE = "edge-scoped"
    EXTERNAL = "external-scoped"


class StateOwner(StrEnum):
    """Who owns a session's state: keel's own loop, or an external backend (seed §2)."""

    KEEL = "keel"
    EXTERNAL = "external"


class StopReason(StrEnum):
    """Why a model answer (assistant.message) or an attempt (run.finished) stopped."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    ERROR = "error"
    """A terminal failure: answers nothing, never enters model context."""
    ABORTED = "aborted"
    """Cancelled: answers nothing, never enters model context."""
    MAX_TURNS = "max_turns"
    """The attempt hit its turn bound (run.finished only)."""


@dataclass(frozen=True, slots=True)
class KindSpec:
    """What the kernel knows about one kind."""

    kind: Kind
    commit_class: CommitClass
    key_field: str | None
    """The payload field that is the idempotency key; None: the kind must carry no key."""
    emitted: bool
    """False for reserved vocabulary: fences exist, no runtime emits it."""


def _spec(kind: Kind, cls: CommitClass, key: str | None, emitted: bool) -> tuple[Kind, KindSpec]:
    return kind, KindSpec(kind, cls, key, emitted)


REGISTRY: Final = MappingProxyType(
    dict(
        [
            _spec(Kind.USER_MESSAGE, CommitClass.EDGE, "requestId", emitted=True),
            _spec(Kind.ASSISTANT_MESSAGE, CommitClass.OWNER, "generationId", emitted=True),
            _spec(Kind.TOOL_RESULT, CommitClass.OWNER, "toolCallId", emitted=True),
            _spec(Kind.COMPACTION, CommitClass.OWNER, None, emitted=True),
            _spec(Kind.RUN_FINISHED, CommitClass.OWNER, None, emitted=True),
            _spec(Kind.RUN_STARTED, CommitClass.OWNER, None, emitted=False),
            _spec(Kind.RUN_FAILED, CommitClass.OWNER, None, emitted=False),
            _spec(Kind.EXTERNAL_EVENT, CommitClass.EXTERNAL, "requestId", emitted=True),
        ]
    )
)

EDGE_KINDS: Final = frozenset(k for k, s in REGISTRY.items() if s.commit_class is CommitClass.EDGE)
"""The edge whitelist: exactly the edge-scoped kinds."""


def spec_for(kind: str) -> KindSpec:
    """Look a kind string up in the registry; unknown strings are refused."""
    try:
        return REGISTRY[Kind(kind)]
    except ValueError:
        raise UnknownKind(f"unknown event kind {kind!r}") from None
