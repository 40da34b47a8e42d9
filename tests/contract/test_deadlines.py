"""Decision deadlines: one contract, PostgreSQL and memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keel_stream.store import Store
from keel_stream.store.deadlines import Deadline, Deadlines
from tests.contract.backends import InMemory, OnPostgres

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def due(decision: str, minutes: int = 0, session: str = "s1") -> Deadline:
    return Deadline("acme", session, decision, T0 + timedelta(minutes=minutes), "reject")


class DeadlinesContract:
    @pytest.fixture
    def deadlines(self, backend: Store) -> Deadlines:
        return backend.deadlines()

    async def test_only_due_open_deadlines_are_claimed_once_per_lease(
        self, deadlines: Deadlines
    ) -> None:
        await deadlines.sync("acme", "s1", [due("a"), due("b", minutes=10)])
        await deadlines.sync("acme", "s1", [due("a", minutes=99), due("b", minutes=10)])
        claimed = await deadlines.claim_due(T0 + timedelta(minutes=1), "w1", 60, 10)
        assert [(d.decision, d.expires_at) for d in claimed] == [("a", T0)], (
            "the first write stands"
        )
        assert await deadlines.claim_due(T0 + timedelta(minutes=1), "w2", 60, 10) == []

    async def test_sync_closes_what_is_no_longer_open_and_close_is_final(
        self, deadlines: Deadlines
    ) -> None:
        await deadlines.sync("acme", "s1", [due("a"), due("b")])
        await deadlines.sync("acme", "s2", [due("c", session="s2")])
        await deadlines.sync("acme", "s1", [due("b")])
        await deadlines.close("acme", "s2", "c")
        claimed = await deadlines.claim_due(T0 + timedelta(hours=1), "w1", 60, 10)
        assert [d.decision for d in claimed] == ["b"]


class TestDeadlinesOnPostgres(OnPostgres, DeadlinesContract):
    pass


class TestDeadlinesInMemory(InMemory, DeadlinesContract):
    pass
