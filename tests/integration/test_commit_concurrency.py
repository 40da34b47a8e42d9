"""Dense seqs under concurrency, and exactly-once idempotent retries."""

from __future__ import annotations

import asyncio

import asyncpg

from keel_stream.kernel import CommitRequest, Submission
from keel_stream.store import PostgresLedger
from tests.support.ledger import counts


async def test_200_commits_from_20_tasks_get_seqs_1_to_200(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    tenant, sid = session

    async def writer(task: int) -> list[int]:
        seqs = []
        for i in range(10):
            sub = await ledger.commit(
                CommitRequest(
                    tenant_id=tenant,
                    session_id=sid,
                    kind="user.message",
                    payload={"text": f"task {task} message {i}"},
                    key=f"req-{task}-{i}",
                )
            )
            assert sub.created
            seqs.append(sub.seq)
        return seqs

    results = await asyncio.gather(*(writer(t) for t in range(20)))
    returned = sorted(s for seqs in results for s in seqs)
    assert returned == list(range(1, 201))
    for seqs in results:
        assert seqs == sorted(seqs), "one writer's commits must be ordered as it made them"

    stored = await pool.fetch(
        "SELECT seq FROM events WHERE tenant_id = $1 AND session_id = $2 ORDER BY seq", tenant, sid
    )
    assert [r["seq"] for r in stored] == list(range(1, 201))
    outbox = await pool.fetch("SELECT seq FROM outbox ORDER BY seq")
    assert [r["seq"] for r in outbox] == list(range(1, 201))
    assert await ledger.head(tenant, sid) == 200


async def test_50_concurrent_retries_make_one_row_and_one_seq(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    tenant, sid = session
    await ledger.commit(
        CommitRequest(tenant_id=tenant, session_id=sid, kind="user.message", payload={"text": "0"})
    )

    async def retry(i: int) -> Submission:
        # Same request, formatted differently by each caller: key order varies.
        payload = {"text": "hello keel", "delivery": "queue"}
        if i % 2:
            payload = dict(reversed(list(payload.items())))
        return await ledger.commit(
            CommitRequest(
                tenant_id=tenant, session_id=sid, kind="user.message", payload=payload, key="r-50"
            )
        )

    subs = await asyncio.gather(*(retry(i) for i in range(50)))
    assert {s.seq for s in subs} == {2}
    assert sum(s.created for s in subs) == 1
    assert len({s.committed_at for s in subs}) == 1
    assert await counts(pool) == (2, 2)
