from __future__ import annotations

import pytest

from keel_stream.errors import UnknownKind
from keel_stream.kernel import EDGE_KINDS, REGISTRY, CommitClass, Kind, spec_for

# The seed's table, verbatim: kind, class, idempotency key field, emitted today.
SEED_TABLE = [
    ("user.message", "edge-scoped", "requestId", True),
    ("assistant.message", "owner-scoped", "generationId", True),
    ("tool.result", "owner-scoped", "toolCallId", True),
    ("compaction", "owner-scoped", None, True),
    ("run.finished", "owner-scoped", None, True),
    ("run.started", "owner-scoped", None, False),
    ("run.failed", "owner-scoped", None, False),
    ("external.event", "external-scoped", "requestId", True),
]


def test_registry_is_exactly_the_seed_table() -> None:
    actual = [
        (s.kind.value, s.commit_class.value, s.key_field, s.emitted) for s in REGISTRY.values()
    ]
    assert sorted(actual, key=str) == sorted(SEED_TABLE, key=str)
    assert len(Kind) == 8


def test_edge_whitelist_is_the_edge_class_only() -> None:
    assert frozenset({Kind.USER_MESSAGE}) == EDGE_KINDS
    assert {s.kind for s in REGISTRY.values() if s.commit_class is CommitClass.EDGE} == EDGE_KINDS


@pytest.mark.parametrize("kind", ["user.msg", "", "USER.MESSAGE", "run.cancelled"])
def test_unregistered_kind_is_refused(kind: str) -> None:
    with pytest.raises(UnknownKind) as info:
        spec_for(kind)
    assert info.value.code == "unknown_kind"
