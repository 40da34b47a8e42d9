from __future__ import annotations

from typing import Any

import pytest

from keel_stream.errors import (
    FenceNotAllowed,
    FenceRequired,
    InvalidIdentifier,
    InvalidPayload,
    KeyMismatch,
    KeyNotAllowed,
    KeyRequired,
    KindNotAllowedAtEdge,
    UnknownKind,
)
from keel_stream.kernel import CommitRequest, Kind, LeaseToken, prepare, require_edge_kind

LEASE = LeaseToken(owner="worker-1", epoch=1)


def request(kind: str, payload: dict[str, Any], **extra: Any) -> CommitRequest:
    return CommitRequest(tenant_id="t1", session_id="s1", kind=kind, payload=payload, **extra)


@pytest.mark.parametrize(
    "kind", ["assistant.message", "tool.result", "compaction", "run.finished", "run.started"]
)
def test_owner_scoped_kinds_require_the_lease(kind: str) -> None:
    with pytest.raises(FenceRequired):
        prepare(request(kind, {"status": "done", "toolCallId": "c"}, key=None))


@pytest.mark.parametrize("kind", ["user.message", "external.event"])
def test_edge_and_external_kinds_refuse_a_lease(kind: str) -> None:
    payload = {"backend": "b", "externalRef": "r"}
    with pytest.raises(FenceNotAllowed):
        prepare(request(kind, payload, lease=LEASE))


@pytest.mark.parametrize("kind", ["compaction", "run.finished", "run.started", "run.failed"])
def test_kinds_without_a_key_refuse_one(kind: str) -> None:
    with pytest.raises(KeyNotAllowed) as info:
        prepare(request(kind, {"status": "done"}, key="k1", lease=LEASE))
    assert info.value.code == "idempotency_key_not_allowed"


def test_key_in_request_and_payload_must_agree() -> None:
    with pytest.raises(KeyMismatch):
        prepare(request("user.message", {"requestId": "a"}, key="b"))
    with pytest.raises(KeyMismatch):
        prepare(request("assistant.message", {"generationId": "g1"}, key="g2", lease=LEASE))


def test_tool_result_key_must_equal_payload_tool_call_id() -> None:
    with pytest.raises(InvalidPayload) as info:
        prepare(request("tool.result", {"toolCallId": "c2"}, key="c1", lease=LEASE))
    assert info.value.error_code == "tool_call_id_mismatch"


def test_tool_result_needs_its_key() -> None:
    prepared = prepare(request("tool.result", {"toolCallId": "c1"}, lease=LEASE))
    assert prepared.key == "c1"
    assert prepared.dedupe_key == "toolCallId:c1"
    with pytest.raises((KeyRequired, InvalidPayload)):
        prepare(request("tool.result", {}, lease=LEASE))


def test_key_is_recorded_in_the_payload() -> None:
    prepared = prepare(request("user.message", {"text": "hi"}, key="r1"))
    assert prepared.payload == {"text": "hi", "requestId": "r1"}
    assert prepared.dedupe_key == "requestId:r1"


def test_key_from_payload_alone() -> None:
    prepared = prepare(request("user.message", {"text": "hi", "requestId": "r1"}))
    assert prepared.key == "r1"


def test_user_message_without_key_has_no_dedupe() -> None:
    assert prepare(request("user.message", {"text": "hi"})).dedupe_key is None


def test_digest_ignores_formatting_and_key_placement() -> None:
    a = prepare(request("user.message", {"text": "hi", "n": 1}, key="r1"))
    b = prepare(request("user.message", {"requestId": "r1", "n": 1.0, "text": "hi"}))
    assert a.digest == b.digest


@pytest.mark.parametrize("bad", ["", " x", "a/b", "x" * 129, "é"])
def test_identifiers_are_checked(bad: str) -> None:
    with pytest.raises(InvalidIdentifier):
        prepare(CommitRequest(tenant_id="t1", session_id=bad, kind="user.message", payload={}))


def test_overlong_key_is_refused() -> None:
    with pytest.raises(InvalidIdentifier):
        prepare(request("user.message", {}, key="k" * 257))


def test_unknown_kind() -> None:
    with pytest.raises(UnknownKind):
        prepare(request("user.note", {}))


def test_edge_whitelist() -> None:
    assert require_edge_kind("user.message") is Kind.USER_MESSAGE
    for kind in ["assistant.message", "tool.result", "external.event", "run.finished"]:
        with pytest.raises(KindNotAllowedAtEdge) as info:
            require_edge_kind(kind)
        assert info.value.code == "kind_not_allowed"
    with pytest.raises(UnknownKind):
        require_edge_kind("nope")
