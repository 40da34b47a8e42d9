"""Owner-scoped commits are fenced by the session's lease (owner + epoch)."""

from __future__ import annotations

import asyncpg
import pytest

from keel_stream.errors import ExternalSession, LeaseFenced
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.store import ExternalMarkers, PostgresLedger
from tests.support.ledger import counts, grant_lease


def summary(lease: LeaseToken | None, session: str = "s1") -> CommitRequest:
    return CommitRequest(
        tenant_id="acme",
        session_id=session,
        kind="run.finished",
        payload={"status": "done", "turns": 1},
        lease=lease,
    )


async def test_current_owner_commits(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await grant_lease(pool, "acme", "s1", LeaseToken(owner="w1", epoch=3))
    sub = await ledger.commit(summary(LeaseToken(owner="w1", epoch=3)))
    assert (sub.created, sub.seq) == (True, 1)


@pytest.mark.parametrize(
    "stale",
    [
        LeaseToken(owner="w1", epoch=2),  # the owner, before a takeover
        LeaseToken(owner="w2", epoch=3),  # another owner at the current epoch
        LeaseToken(owner="w1", epoch=4),  # an epoch from the future
    ],
    ids=["stale-epoch", "other-owner", "future-epoch"],
)
async def test_stale_or_foreign_lease_is_rejected_and_writes_nothing(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str], stale: LeaseToken
) -> None:
    await grant_lease(pool, "acme", "s1", LeaseToken(owner="w1", epoch=3))
    with pytest.raises(LeaseFenced) as info:
        await ledger.commit(summary(stale))
    assert info.value.code == "lease_fenced"
    assert await counts(pool) == (0, 0)
    assert await ledger.head("acme", "s1") == 0


async def test_takeover_fences_the_old_owner(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    old, new = LeaseToken(owner="w1", epoch=1), LeaseToken(owner="w2", epoch=2)
    await grant_lease(pool, "acme", "s1", old)
    await ledger.commit(summary(old))
    await grant_lease(pool, "acme", "s1", new)
    with pytest.raises(LeaseFenced):
        await ledger.commit(summary(old))
    assert (await ledger.commit(summary(new))).seq == 2


async def test_session_without_a_run_fences_every_owner(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    with pytest.raises(LeaseFenced):
        await ledger.commit(summary(LeaseToken(owner="w1", epoch=1)))
    assert await counts(pool) == (0, 0)


async def test_owner_scoped_commit_to_external_session_is_refused(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await ledger.create_session("acme", "ext", external=ExternalMarkers(backend="dsh", ref="r"))
    # Even a dirty run row with a matching lease must not let a native owner write.
    await grant_lease(pool, "acme", "ext", LeaseToken(owner="w1", epoch=1))
    with pytest.raises(ExternalSession):
        await ledger.commit(summary(LeaseToken(owner="w1", epoch=1), session="ext"))
    assert await counts(pool) == (0, 0)
