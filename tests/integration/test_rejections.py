"""Refused commits: each with its code, and nothing written."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from keel_stream.errors import (
    ExternalSession,
    ExternalSessionClosed,
    FenceNotAllowed,
    InvalidPayload,
    KeelError,
    NotExternalSession,
    SessionNotFound,
    UnknownKind,
)
from keel_stream.kernel import CommitClass, CommitRequest, LeaseToken, spec_for
from keel_stream.store import ExternalMarkers, ExternalStatus, PostgresLedger
from tests.support.ledger import counts, grant_lease
from tests.support.payloads import BAD_PAYLOADS, BadPayload

LEASE = LeaseToken(owner="w1", epoch=1)


def commit_for(case: BadPayload, session: str) -> CommitRequest:
    owner = spec_for(case.kind).commit_class is CommitClass.OWNER
    return CommitRequest(
        tenant_id="acme",
        session_id=session,
        kind=case.kind,
        payload=case.payload,
        key=case.key,
        lease=LEASE if owner else None,
    )


@pytest.fixture
async def sessions(ledger: PostgresLedger, pool: asyncpg.Pool) -> dict[str, str]:
    await ledger.create_tenant("acme")
    native = await ledger.create_session("acme", "native")
    external = await ledger.create_session(
        "acme", "ext", external=ExternalMarkers(backend="dsh", ref="r-1")
    )
    await grant_lease(pool, "acme", native, LEASE)
    await ledger.commit(
        CommitRequest(tenant_id="acme", session_id=native, kind="user.message", payload={})
    )
    return {"native": native, "external": external}


@pytest.mark.parametrize("case", BAD_PAYLOADS, ids=lambda c: c.name)
async def test_bad_payload_is_refused_with_its_code_and_writes_nothing(
    ledger: PostgresLedger, pool: asyncpg.Pool, sessions: dict[str, str], case: BadPayload
) -> None:
    target = sessions["external" if case.kind == "external.event" else "native"]
    before = await counts(pool)
    with pytest.raises(InvalidPayload) as info:
        await ledger.commit(commit_for(case, target))
    assert info.value.error_code == case.rule.value
    assert await counts(pool) == before


async def test_tool_result_must_point_at_a_committed_call(
    ledger: PostgresLedger, pool: asyncpg.Pool, sessions: dict[str, str]
) -> None:
    def result(call_id: str) -> CommitRequest:
        return CommitRequest(
            tenant_id="acme",
            session_id="native",
            kind="tool.result",
            payload={"toolCallId": call_id},
            lease=LEASE,
        )

    with pytest.raises(InvalidPayload) as info:
        await ledger.commit(result("c1"))
    assert info.value.error_code == "tool_call_not_found"
    assert await counts(pool) == (1, 1)
    await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id="native",
            kind="assistant.message",
            payload={"content": [{"type": "toolCall", "id": "c1", "name": "ls"}]},
            lease=LEASE,
        )
    )
    assert (await ledger.commit(result("c1"))).seq == 3
    with pytest.raises(InvalidPayload):
        await ledger.commit(result("c2"))


async def test_missing_and_other_tenant_sessions_are_not_found(
    ledger: PostgresLedger, pool: asyncpg.Pool, sessions: dict[str, str]
) -> None:
    await ledger.create_tenant("globex")
    for tenant, session in [("acme", "nope"), ("globex", "native"), ("nobody", "native")]:
        with pytest.raises(SessionNotFound) as info:
            await ledger.commit(
                CommitRequest(tenant_id=tenant, session_id=session, kind="user.message", payload={})
            )
        assert info.value.code == "session_not_found"
        with pytest.raises(SessionNotFound):
            await ledger.read_events(tenant, session)
    assert await counts(pool) == (1, 1)


async def test_native_edge_write_to_external_session_is_refused(
    ledger: PostgresLedger, pool: asyncpg.Pool, sessions: dict[str, str]
) -> None:
    with pytest.raises(ExternalSession) as info:
        await ledger.commit(
            CommitRequest(
                tenant_id="acme", session_id="ext", kind="user.message", payload={"text": "x"}
            )
        )
    assert info.value.code == "external_session"
    assert await counts(pool) == (1, 1)


def external_event(session: str, key: str = "e1") -> CommitRequest:
    return CommitRequest(
        tenant_id="acme",
        session_id=session,
        kind="external.event",
        payload={"backend": "dsh", "externalRef": "r-1", "stateOwner": "external"},
        key=key,
    )


async def test_external_event_needs_an_open_external_session(
    ledger: PostgresLedger, pool: asyncpg.Pool, sessions: dict[str, str]
) -> None:
    assert (await ledger.commit(external_event("ext"))).seq == 1
    with pytest.raises(NotExternalSession):
        await ledger.commit(external_event("native"))
    await ledger.create_session(
        "acme", "closed", external=ExternalMarkers(backend="dsh", status=ExternalStatus.CLOSED)
    )
    with pytest.raises(ExternalSessionClosed):
        await ledger.commit(external_event("closed"))
    await ledger.create_session(
        "acme",
        "gone",
        external=ExternalMarkers(backend="dsh", status=ExternalStatus.BACKEND_UNAVAILABLE),
    )
    assert (await ledger.commit(external_event("gone"))).seq == 1
    assert await counts(pool) == (3, 3)


@pytest.mark.parametrize(
    ("request_fields", "error"),
    [
        ({"kind": "user.note", "payload": {}}, UnknownKind),
        ({"kind": "user.message", "payload": {}, "lease": LEASE}, FenceNotAllowed),
    ],
)
async def test_kernel_refusals_write_nothing(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    sessions: dict[str, str],
    request_fields: dict[str, Any],
    error: type[KeelError],
) -> None:
    with pytest.raises(error):
        await ledger.commit(CommitRequest(tenant_id="acme", session_id="native", **request_fields))
    assert await counts(pool) == (1, 1)
