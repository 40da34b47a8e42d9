"""Preparing a commit: everything the kernel can decide without reading the ledger.

The store calls prepare() before it opens its transaction, so a request that breaks a rule of
the vocabulary, the fences, the keys or the payload never touches the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from keel_stream.errors import (
    ExternalSession,
    ExternalSessionClosed,
    FenceNotAllowed,
    FenceRequired,
    IdempotencyConflict,
    InvalidIdentifier,
    InvalidPayload,
    KeyMismatch,
    KeyNotAllowed,
    KeyRequired,
    KindNotAllowedAtEdge,
    NotExternalSession,
    PayloadRule,
)
from keel_stream.kernel.canonical import payload_digest
from keel_stream.kernel.limits import MAX_EVENT_BYTES, check_event_size
from keel_stream.kernel.types import CommitRequest, LeaseToken, Submission
from keel_stream.kernel.validation import validate_payload
from keel_stream.kernel.vocabulary import EDGE_KINDS, CommitClass, Kind, KindSpec, spec_for

__all__ = [
    "ClassGate",
    "PreparedCommit",
    "SessionState",
    "check_class_gate",
    "check_identifier",
    "class_gate",
    "prepare",
    "replayed",
    "require_edge_kind",
]

_IDENTIFIER: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_MAX_KEY_LENGTH: Final = 256


@dataclass(frozen=True, slots=True)
class PreparedCommit:
    """A request the kernel has accepted in isolation; the store still checks it against state."""

    tenant_id: str
    session_id: str
    spec: KindSpec
    payload: dict[str, Any]
    key: str | None
    lease: LeaseToken | None
    digest: str
    """Canonical digest of the payload as requested: a retry is the same request iff equal."""

    @property
    def kind(self) -> Kind:
        return self.spec.kind

    @property
    def dedupe_key(self) -> str | None:
        """The stored uniqueness key: the key field names the namespace, so that a generationId
        and a toolCallId with the same value never collide."""
        if self.key is None or self.spec.key_field is None:
            return None
        return f"{self.spec.key_field}:{self.key}"


def check_identifier(value: str, what: str) -> str:
    """Tenant and session ids: 1-128 of [A-Za-z0-9._:@-], not starting with punctuation."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise InvalidIdentifier(f"{what} {value!r} is not a valid identifier")
    return value


def require_edge_kind(kind: str) -> Kind:
    """The edge whitelist: only edge-scoped kinds may be written by clients."""
    spec = spec_for(kind)
    if spec.kind not in EDGE_KINDS:
        raise KindNotAllowedAtEdge(f"{kind!r} cannot be written through the edge")
    return spec.kind


def _check_fence(spec: KindSpec, lease: LeaseToken | None) -> None:
    if spec.commit_class is CommitClass.OWNER and lease is None:
        raise FenceRequired(f"{spec.kind} is owner-scoped and must carry the lease token")
    if spec.commit_class is not CommitClass.OWNER and lease is not None:
        raise FenceNotAllowed(f"{spec.kind} is {spec.commit_class} and must not carry a lease")


def _resolve_key(spec: KindSpec, payload: dict[str, Any], request_key: str | None) -> str | None:
    """One key per kind: the request's key or the payload's key field, which must agree."""
    field = spec.key_field
    if field is None:
        if request_key is not None:
            raise KeyNotAllowed(f"{spec.kind} declares no idempotency key")
        return None
    in_payload = payload.get(field)
    if in_payload is not None and request_key is not None and in_payload != request_key:
        if spec.kind is Kind.TOOL_RESULT:
            raise InvalidPayload(
                PayloadRule.TOOL_CALL_ID_MISMATCH,
                "payload.toolCallId must equal the request's toolCallId",
            )
        raise KeyMismatch(f"payload.{field} differs from the request's idempotency key")
    key = request_key if request_key is not None else in_payload
    if key is None:
        if spec.kind is Kind.TOOL_RESULT:
            raise KeyRequired("tool.result must carry its toolCallId")
        return None
    if not isinstance(key, str) or not 0 < len(key) <= _MAX_KEY_LENGTH or "\x00" in key:
        raise InvalidIdentifier(
            f"{field} must be a string of 1-{_MAX_KEY_LENGTH} characters, without NUL"
        )
    return key


def prepare(request: CommitRequest, *, max_event_bytes: int = MAX_EVENT_BYTES) -> PreparedCommit:
    """Validate a request against the vocabulary, fences, keys, payload rules and size (the
    serialized payload at most `max_event_bytes`, else PayloadTooLarge)."""
    check_identifier(request.tenant_id, "tenant")
    check_identifier(request.session_id, "session")
    spec = spec_for(request.kind)
    _check_fence(spec, request.lease)
    validate_payload(spec.kind, request.payload)
    payload = dict(request.payload)
    key = _resolve_key(spec, payload, request.key)
    if key is not None and spec.key_field is not None:
        payload.setdefault(spec.key_field, key)
    check_event_size(payload, max_event_bytes)
    return PreparedCommit(
        tenant_id=request.tenant_id,
        session_id=request.session_id,
        spec=spec,
        payload=payload,
        key=key,
        lease=request.lease,
        digest=payload_digest(payload),
    )


class SessionState(StrEnum):
    """What the commit-class gate reads of a session: who owns its state, and if it is closed."""

    NATIVE = "native"
    EXTERNAL = "external"
    EXTERNAL_CLOSED = "external-closed"

    @classmethod
    def of(cls, *, external: bool, closed: bool) -> SessionState:
        if not external:
            return cls.NATIVE
        return cls.EXTERNAL_CLOSED if closed else cls.EXTERNAL


@dataclass(frozen=True, slots=True)
class ClassGate:
    """Where a commit class may be written, as the store is told it (one row of the gate)."""

    admits: frozenset[SessionState]
    fenced: bool
    """The commit must hold the session's current lease (checked by the store, after the gate)."""


_GATE: Final[dict[CommitClass, ClassGate]] = {
    CommitClass.OWNER: ClassGate(frozenset({SessionState.NATIVE}), fenced=True),
    CommitClass.EDGE: ClassGate(frozenset({SessionState.NATIVE}), fenced=False),
    CommitClass.EXTERNAL: ClassGate(frozenset({SessionState.EXTERNAL}), fenced=False),
}


def class_gate(commit_class: CommitClass) -> ClassGate:
    """The commit-class gate (seed §2): a native write never reaches an external session, an
    external event never a native or closed one; only owner-scoped commits carry the fence."""
    return _GATE[commit_class]


def check_class_gate(commit: PreparedCommit, state: SessionState) -> bool:
    """The gate for one commit to a session in `state`, decided by the store under the
    session's lock: the refusal, or whether the store must check the commit's fence."""
    gate = class_gate(commit.spec.commit_class)
    session = commit.session_id
    if state in gate.admits:
        return gate.fenced
    if state is SessionState.NATIVE:
        raise NotExternalSession(f"session {session!r} is not external")
    if commit.spec.commit_class is CommitClass.EXTERNAL:
        raise ExternalSessionClosed(f"external session {session!r} is closed")
    if gate.fenced:
        raise ExternalSession(f"session {session!r} has no native owner")
    raise ExternalSession(f"session {session!r} is owned externally")


def replayed(
    commit: PreparedCommit, kind: str, digest: str, seq: int, committed_at: datetime
) -> Submission:
    """A retry of a committed request returns the original submission; the same key with
    another payload or kind is a conflict (payloads compared by canonical digest)."""
    if kind != commit.kind.value or digest != commit.digest:
        raise IdempotencyConflict(
            f"{commit.spec.key_field} {commit.key!r} was already committed at seq "
            f"{seq} with a different payload"
        )
    return Submission(created=False, seq=seq, kind=kind, key=commit.key, committed_at=committed_at)
