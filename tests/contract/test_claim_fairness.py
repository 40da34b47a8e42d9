"""The store contract for sharing workers between tenants: claims prefer the tenants with the
fewest running attempts, pass over the tenants a worker already runs its share of, and keep to a
per-tenant cap across workers."""

from __future__ import annotations

from keel_stream.kernel import CommitRequest
from keel_stream.store.protocol import ClaimFairness
from tests.contract.conftest import Adapter


async def say(adapter: Adapter, tenant: str, session: str) -> None:
    request = CommitRequest(
        tenant_id=tenant, session_id=session, kind="user.message", payload={"text": "hi"}
    )
    await adapter.ledger.commit(request)


async def two_tenants(adapter: Adapter) -> None:
    """acme: s1 running, then s2 and s3 pending; beta: b1 pending, newest of all."""
    await adapter.ledger.create_tenant("beta")
    for tenant, session in (("acme", "s2"), ("acme", "s3"), ("beta", "b1")):
        await adapter.ledger.create_session(tenant, session)
    await say(adapter, "acme", "s1")
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    assert claim.session == "s1"
    for tenant, session in (("acme", "s2"), ("acme", "s3"), ("beta", "b1")):
        await say(adapter, tenant, session)


async def test_a_tenant_with_fewer_running_attempts_goes_first(adapter: Adapter) -> None:
    await two_tenants(adapter)
    runs = adapter.runs("w", 10)
    claimed = [await runs.claim() for _ in range(3)]
    assert [(c.tenant, c.session) for c in claimed if c is not None] == [
        ("beta", "b1"),
        ("acme", "s2"),
        ("acme", "s3"),
    ], "beta's newer input first: acme already runs one attempt; then oldest first"


async def test_skipped_tenants_are_passed_over(adapter: Adapter) -> None:
    await two_tenants(adapter)
    runs = adapter.runs("w", 10)
    skip_beta = ClaimFairness(skip_tenants=frozenset({"beta"}))
    claim = await runs.claim(skip_beta)
    assert claim is not None
    assert (claim.tenant, claim.session) == ("acme", "s2")
    only_acme_left = ClaimFairness(skip_tenants=frozenset({"acme"}))
    claim = await runs.claim(only_acme_left)
    assert claim is not None
    assert claim.tenant == "beta"
    assert await runs.claim(only_acme_left) is None, "acme's s3 waits: acme is skipped"


async def test_the_tenant_cap_counts_running_attempts_of_every_worker(adapter: Adapter) -> None:
    await two_tenants(adapter)
    capped = ClaimFairness(tenant_cap=2)
    first = await adapter.runs("w2", 10).claim(capped)
    second = await adapter.runs("w3", 10).claim(capped)
    assert first is not None
    assert second is not None
    assert {(first.tenant, first.session), (second.tenant, second.session)} == {
        ("beta", "b1"),
        ("acme", "s2"),
    }
    assert await adapter.runs("w4", 10).claim(capped) is None, "acme runs 2 of its cap of 2"
    claim = await adapter.runs("w4", 10).claim()
    assert claim is not None
    assert claim.session == "s3", "without the cap s3 is claimable"
