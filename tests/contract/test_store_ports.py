"""The ports of the projection side, subagents and external sessions, and the backend itself:
one contract class per port, run on PostgreSQL and in memory (tests/contract/backends.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from keel_stream.kernel import CommitRequest
from keel_stream.store import ExternalMarkers, ExternalStatus, Store
from keel_stream.store.deadlines import Deadline
from keel_stream.store.outbox import Shard
from keel_stream.store.projection_parked import ParkedSession
from keel_stream.store.projection_state import Behind, StoredState
from keel_stream.store.subagents import Link
from tests.contract.backends import InMemory, OnPostgres

PROJECTION = "run_status"
"""Live at generation 1 in both backends, as migrated."""


async def _sessions_with_events(backend: Store, events: dict[str, int]) -> None:
    ledger = backend.ledger()
    for session, count in events.items():
        await ledger.create_session("acme", session)
        for i in range(count):
            payload = {"text": f"m{i}"}
            await ledger.commit(
                CommitRequest(
                    tenant_id="acme", session_id=session, kind="user.message", payload=payload
                )
            )


class BackendContract:
    async def test_the_repositories_handed_out_share_the_backends_state(
        self, backend: Store
    ) -> None:
        await _sessions_with_events(backend, {"s1": 2})
        events = await backend.projections().ledger_range("acme", "s1", 0)
        assert [e.seq for e in events] == [1, 2], "the ledger's commits, read by another port"
        due = datetime(2026, 12, 5, tzinfo=UTC)
        await backend.deadlines().sync("acme", "s1", [Deadline("acme", "s1", "d1", due, "reject")])
        claimed = await backend.deadlines().claim_due(due + timedelta(seconds=1), "w", 60, 10)
        assert [d.decision for d in claimed] == ["d1"]
        assert await backend.runs("w", 10).claim() is not None, "the input made a run owed"


class TestBackendOnPostgres(OnPostgres, BackendContract):
    pass


class TestBackendInMemory(InMemory, BackendContract):
    pass


class ProjectionScansContract:
    """What the reconcile asks: the sessions a generation has applied short of their head."""

    async def test_sessions_behind_are_those_short_of_their_head(self, backend: Store) -> None:
        await _sessions_with_events(backend, {"s1": 2, "s2": 1, "s3": 3})
        projections = backend.projections()
        async with projections.transaction() as tx:
            await tx.write_states(PROJECTION, 1, {("acme", "s1"): StoredState(2, {})})
            await tx.write_states(PROJECTION, 1, {("acme", "s3"): StoredState(1, {})})
        assert await projections.sessions_behind_ledger(PROJECTION, 1) == 2
        behind = [Behind("acme", "s2", 0, 1), Behind("acme", "s3", 1, 3)]
        found = await projections.sessions_behind(PROJECTION, 1, idle_s=0, limit=10, within_s=3600)
        assert found == behind
        assert (
            await projections.sessions_behind(PROJECTION, 1, idle_s=0, limit=1, within_s=3600)
            == behind[:1]
        )
        assert (
            await projections.sessions_behind(PROJECTION, 1, idle_s=3600, limit=10, within_s=3600)
            == []
        ), "sessions still busy are left to the stream"

    async def test_the_sweep_pages_the_sessions_in_key_order(self, backend: Store) -> None:
        await _sessions_with_events(backend, {"s1": 1, "s2": 1, "s3": 1})
        projections = backend.projections()
        assert await projections.sweep_end(("", ""), 2) == ("acme", "s2")
        assert await projections.sweep_end(("acme", "s2"), 2) == ("acme", "s3")
        assert await projections.sweep_end(("acme", "s3"), 2) is None
        ranged = await projections.sessions_behind_range(
            PROJECTION, 1, idle_s=0, limit=10, after=("acme", "s1"), upto=("acme", "s2")
        )
        assert ranged == [Behind("acme", "s2", 0, 1)]


class TestProjectionScansOnPostgres(OnPostgres, ProjectionScansContract):
    pass


class TestProjectionScansInMemory(InMemory, ProjectionScansContract):
    pass


class ParkedContract:
    async def test_a_parked_session_is_counted_listed_and_unparked(self, backend: Store) -> None:
        parked = backend.parked()
        entry = ParkedSession("acme", "s1", PROJECTION, 1, seq=3, error="boom")
        await parked.park([entry])
        await parked.park([entry])
        assert await backend.projections().parked().counts() == {(PROJECTION, 1): 1}
        (listed,) = await parked.listing(PROJECTION)
        assert (listed.key, listed.seq, listed.attempts, listed.due) == (entry.key, 3, 2, False)
        assert await parked.held() == {entry.slot}
        assert await parked.unpark(PROJECTION, "acme", "s1") == 1
        assert await parked.counts() == {}


class TestParkedOnPostgres(OnPostgres, ParkedContract):
    pass


class TestParkedInMemory(InMemory, ParkedContract):
    pass


class SubagentsContract:
    async def test_a_tree_holds_at_most_its_budget_and_a_link_stays(self, backend: Store) -> None:
        subagents = backend.subagents()
        first, second = Link("root", "call-1", 1, "root"), Link("root", "call-2", 1, "root")
        assert await subagents.link("acme", "c1", first, budget=1)
        assert not await subagents.link("acme", "c2", second, budget=1), "the tree is full"
        assert await subagents.link("acme", "c1", first, budget=1), "a repeated link stands"
        assert await subagents.link("acme", "c3", Link("other", "call-3", 1, "other"), budget=1)


class TestSubagentsOnPostgres(OnPostgres, SubagentsContract):
    pass


class TestSubagentsInMemory(InMemory, SubagentsContract):
    pass


class ExternalSessionsContract:
    async def test_closed_is_terminal_and_only_live_sessions_are_listed(
        self, backend: Store
    ) -> None:
        ledger, external = backend.ledger(), backend.external_sessions()
        await ledger.create_session("acme", "e1", external=ExternalMarkers(backend="dsh"))
        await ledger.create_session("acme", "e2", external=ExternalMarkers(backend="dsh"))
        await ledger.create_session("acme", "native")
        assert await external.count_active("acme", "dsh") == 2
        assert await external.set_status("acme", "e1", ExternalStatus.CLOSED)
        assert not await external.set_status("acme", "e1", ExternalStatus.ACTIVE), "terminal"
        assert not await external.set_status("acme", "native", ExternalStatus.CLOSED)
        assert [(s.session, s.status) for s in await external.live("dsh")] == [
            ("e2", ExternalStatus.ACTIVE)
        ]
        assert await external.last_backend_seq("acme", "e2") == 0
        assert await external.latest_turn("acme", "e2") is None


class TestExternalSessionsOnPostgres(OnPostgres, ExternalSessionsContract):
    pass


class TestExternalSessionsInMemory(InMemory, ExternalSessionsContract):
    pass


class OutboxContract:
    async def test_a_shard_leads_alone_and_hands_out_its_rows_until_acknowledged(
        self, backend: Store
    ) -> None:
        await _sessions_with_events(backend, {"s1": 2, "s2": 1})
        outbox = backend.outbox()
        async with outbox.shard(Shard()) as leader, outbox.shard(Shard()) as other:
            assert await leader.try_lead()
            assert not await other.try_lead(), "one relay leads a shard"
            rows = await leader.fetch(10)
            assert [(r.session, r.seq) for r in rows] == [("s1", 1), ("s1", 2), ("s2", 1)]
            assert (await leader.backlog()).events == 3
            await leader.acknowledge([rows[0].id])
            assert [(r.session, r.seq) for r in await leader.fetch(10)] == [("s1", 2), ("s2", 1)]

    async def test_republish_enqueues_the_ledger_again_after_a_seq(self, backend: Store) -> None:
        await _sessions_with_events(backend, {"s1": 3})
        outbox = backend.outbox()
        async with outbox.shard(Shard()) as shard:
            assert await shard.try_lead()
            await shard.acknowledge([r.id for r in await shard.fetch(10)])
            report = await outbox.republish(session="s1", after_seq=1)
            assert (report.sessions, report.events) == (1, 2)
            assert [r.seq for r in await shard.fetch(10)] == [2, 3]


class TestOutboxOnPostgres(OnPostgres, OutboxContract):
    pass


class TestOutboxInMemory(InMemory, OutboxContract):
    pass
